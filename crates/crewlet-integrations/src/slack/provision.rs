//! `crewlet slack provision`: one Slack app per agent seat, created and
//! kept in step with the company file through the manifest API.
//!
//! Per seat ([`plan`](super::plan::plan) says which): create the app
//! (`apps.manifest.create`) or, when the ledger knows it and its manifest
//! changed, update it (`apps.manifest.update`; an app deleted in Slack is
//! replaced); record it in the ledger; write its signing secret into the
//! env file under the company file's `${VAR}`; then install it: the
//! operator opens the printed link, approves, and pastes the code (or the
//! whole redirect URL) back, which `oauth.v2.access` trades for the bot
//! token, written the same way (with the bot's user id when the file has
//! a `${VAR}` for it). A dry run validates the manifests and reports what
//! would happen, creating nothing.
//!
//! Every mutation is saved as soon as it is made, so an interrupted run
//! resumes where it stopped. One seat failing does not stop the others.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crewlet_config::Company;
use tracing::{info, warn};

use super::api::{SlackClient, SlackError};
use super::ledger::{AppRecord, Ledger};
use super::manifest::{authorize_url, fingerprint, oauth_redirect_url};
use super::plan::{Planned, SeatPlan, install_code, plan};
use super::secrets::{EnvStore, TokenError, config_token};

/// Errors of `apps.manifest.update` meaning the app is gone from Slack.
const APP_GONE: &[&str] = &["app_not_found", "invalid_app_id", "invalid_app"];

/// How long to wait on a 429 with no `Retry-After` (manifest methods are
/// Slack's slowest tier, about one call a minute).
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(60);

/// What to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Public base URL of the Crewlet API (the apps' webhooks and OAuth
    /// redirect live under it).
    pub base_url: String,
    /// The ledger file.
    pub state_file: PathBuf,
    /// Only these handles (empty: every Slack seat).
    pub handles: Vec<String>,
    pub dry_run: bool,
    pub skip_install: bool,
    pub reinstall: bool,
    /// How long one call may wait out rate limits in total.
    pub rate_limit_budget: Duration,
}

impl Options {
    pub fn new(base_url: &str, state_file: PathBuf) -> Options {
        Options {
            base_url: base_url.trim().trim_end_matches('/').to_owned(),
            state_file,
            handles: Vec::new(),
            dry_run: false,
            skip_install: false,
            reinstall: false,
            rate_limit_budget: Duration::from_secs(180),
        }
    }
}

/// `slack-apps.json` beside the company file.
pub fn default_state_file(company_file: &Path) -> PathBuf {
    beside(company_file, "slack-apps.json")
}

/// `.env` beside the company file.
pub fn default_env_file(company_file: &Path) -> PathBuf {
    beside(company_file, ".env")
}

fn beside(file: &Path, name: &str) -> PathBuf {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(name),
        _ => PathBuf::from(name),
    }
}

/// Asks the operator for the code of an install.
pub trait InstallPrompt {
    /// Shows `url` (the install link of seat `handle`) and returns what
    /// the operator pasted.
    fn code(&mut self, handle: &str, url: &str) -> Result<String, String>;
}

impl<F> InstallPrompt for F
where
    F: FnMut(&str, &str) -> Result<String, String>,
{
    fn code(&mut self, handle: &str, url: &str) -> Result<String, String> {
        self(handle, url)
    }
}

/// What happened to a seat's app (or, in a dry run, would).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Created,
    Updated,
    Unchanged,
    WouldCreate,
    WouldUpdate,
    Skipped(String),
    Failed(String),
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Created => f.write_str("created"),
            Action::Updated => f.write_str("updated"),
            Action::Unchanged => f.write_str("unchanged"),
            Action::WouldCreate => f.write_str("would create"),
            Action::WouldUpdate => f.write_str("would update"),
            Action::Skipped(why) => write!(f, "skipped: {why}"),
            Action::Failed(why) => write!(f, "FAILED: {why}"),
        }
    }
}

/// One seat's line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatReport {
    pub handle: String,
    pub app_id: Option<String>,
    pub action: Action,
    /// A bot token was minted (dry run: would be).
    pub installed: bool,
    pub notes: Vec<String>,
}

/// The whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub dry_run: bool,
    pub seats: Vec<SeatReport>,
}

impl Report {
    pub fn failed(&self) -> bool {
        self.seats
            .iter()
            .any(|s| matches!(s.action, Action::Failed(_)))
    }

    pub fn seat(&self, handle: &str) -> Option<&SeatReport> {
        self.seats.iter().find(|s| s.handle == handle)
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let width = self.seats.iter().map(|s| s.handle.len()).max().unwrap_or(0);
        for s in &self.seats {
            write!(f, "{:width$}  {}", s.handle, s.action)?;
            if let Some(app) = &s.app_id {
                write!(f, " ({app})")?;
            }
            if s.installed {
                f.write_str(if self.dry_run {
                    ", would install"
                } else {
                    ", installed"
                })?;
            }
            writeln!(f)?;
            for n in &s.notes {
                writeln!(f, "{:width$}    note: {n}", "")?;
            }
        }
        Ok(())
    }
}

/// Why nothing was done at all.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error(transparent)]
    Ledger(#[from] super::ledger::LedgerError),
}

/// Runs provisioning for `company`.
pub async fn provision(
    company: &Company,
    client: &SlackClient,
    env: &mut EnvStore,
    prompt: &mut dyn InstallPrompt,
    options: &Options,
) -> Result<Report, ProvisionError> {
    let base = options.base_url.as_str();
    if !(base.starts_with("https://") || base.starts_with("http://")) {
        return Err(ProvisionError::Config(format!(
            "--base-url `{base}` must be the public http(s) URL of the Crewlet API"
        )));
    }
    let planned = plan(company, base, &options.handles).map_err(ProvisionError::Config)?;
    let mut ledger = Ledger::load(&options.state_file)?;
    let mut report = Report {
        dry_run: options.dry_run,
        seats: Vec::new(),
    };
    // No configuration token is no run at all (not one failure per seat).
    let token = if planned.iter().any(|p| matches!(p, Planned::Provision(_))) {
        Some(config_token(client, env, now(), false).await?)
    } else {
        None
    };
    let mut run = Run {
        client,
        options,
        token,
        rotated: false,
    };
    for p in planned {
        let seat = match p {
            Planned::Skip { handle, reason } => skipped(handle, Action::Skipped(reason)),
            Planned::Refuse { handle, reason } => skipped(handle, Action::Failed(reason)),
            Planned::Provision(plan) => {
                let result = run.seat(&plan, &mut ledger, env, prompt).await;
                let result = match result {
                    // The configuration token was refused: rotate once, retry.
                    Err(Failure::Slack(e)) if e.is_token_error() && !run.rotated => {
                        run.rotated = true;
                        match config_token(client, env, now(), true).await {
                            Ok(t) => {
                                run.token = Some(t);
                                run.seat(&plan, &mut ledger, env, prompt).await
                            }
                            Err(te) => Err(Failure::Other(te.to_string())),
                        }
                    }
                    other => other,
                };
                match result {
                    Ok(s) => s,
                    Err(failure) => {
                        let why = failure.to_string();
                        warn!(seat = %plan.handle, error = %why, "slack provisioning failed for the seat");
                        SeatReport {
                            handle: plan.handle.clone(),
                            app_id: ledger.apps.get(&plan.handle).map(|r| r.app_id.clone()),
                            action: Action::Failed(why),
                            installed: false,
                            notes: Vec::new(),
                        }
                    }
                }
            }
        };
        report.seats.push(seat);
    }
    Ok(report)
}

fn skipped(handle: String, action: Action) -> SeatReport {
    SeatReport {
        handle,
        app_id: None,
        action,
        installed: false,
        notes: Vec::new(),
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Why one seat failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Slack(SlackError),
    #[error("{0}")]
    Other(String),
}

impl From<SlackError> for Failure {
    fn from(e: SlackError) -> Self {
        Failure::Slack(e)
    }
}

impl From<super::ledger::LedgerError> for Failure {
    fn from(e: super::ledger::LedgerError) -> Self {
        Failure::Other(e.to_string())
    }
}

struct Run<'a> {
    client: &'a SlackClient,
    options: &'a Options,
    /// The configuration token, fetched on first need.
    token: Option<String>,
    rotated: bool,
}

impl Run<'_> {
    async fn token(&mut self, env: &mut EnvStore) -> Result<String, Failure> {
        if let Some(t) = &self.token {
            return Ok(t.clone());
        }
        let t = config_token(self.client, env, now(), false)
            .await
            .map_err(|e| Failure::Other(e.to_string()))?;
        self.token = Some(t.clone());
        Ok(t)
    }

    /// Calls `f` again while Slack answers 429, within the budget.
    async fn patiently<T, F, Fut>(&self, mut f: F) -> Result<T, SlackError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SlackError>>,
    {
        let started = Instant::now();
        loop {
            match f().await {
                Err(SlackError::RateLimited {
                    method,
                    retry_after,
                }) => {
                    let wait = retry_after.unwrap_or(DEFAULT_RETRY_AFTER);
                    if started.elapsed() + wait > self.options.rate_limit_budget {
                        return Err(SlackError::RateLimited {
                            method,
                            retry_after,
                        });
                    }
                    warn!(%method, wait_secs = wait.as_secs(), "slack rate limit; waiting");
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    async fn seat(
        &mut self,
        plan: &SeatPlan,
        ledger: &mut Ledger,
        env: &mut EnvStore,
        prompt: &mut dyn InstallPrompt,
    ) -> Result<SeatReport, Failure> {
        let token = self.token(env).await?;
        let fp = fingerprint(&plan.manifest);
        let known = ledger.apps.get(&plan.handle).cloned();
        let has_token = env.get(&plan.bot_token_var).is_some();
        if self.options.dry_run {
            let app_id = known.as_ref().map(|r| r.app_id.as_str());
            self.patiently(|| {
                self.client
                    .manifest_validate(&token, &plan.manifest, app_id)
            })
            .await?;
            let action = match &known {
                None => Action::WouldCreate,
                Some(r) if r.manifest_fingerprint != fp => Action::WouldUpdate,
                Some(_) => Action::Unchanged,
            };
            let install = !self.options.skip_install
                && (known.is_none() || self.options.reinstall || !has_token);
            return Ok(SeatReport {
                handle: plan.handle.clone(),
                app_id: known.map(|r| r.app_id),
                action,
                installed: install,
                notes: Vec::new(),
            });
        }

        let mut notes = Vec::new();
        let mut action = Action::Unchanged;
        let mut record = known;
        if let Some(r) = record.as_mut()
            && r.manifest_fingerprint != fp
        {
            let app_id = r.app_id.clone();
            let updated = self
                .patiently(|| self.client.manifest_update(&token, &app_id, &plan.manifest))
                .await;
            match updated {
                Ok(()) => {
                    r.manifest_fingerprint = fp.clone();
                    ledger.apps.insert(plan.handle.clone(), r.clone());
                    ledger.save(&self.options.state_file)?;
                    action = Action::Updated;
                }
                Err(e) if e.code().is_some_and(|c| APP_GONE.contains(&c)) => {
                    notes.push(format!(
                        "app {app_id} no longer exists in Slack; created a replacement"
                    ));
                    record = None;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut record = match record {
            Some(r) => r,
            None => {
                let creds = self
                    .patiently(|| self.client.manifest_create(&token, &plan.manifest))
                    .await?;
                let r = AppRecord {
                    app_id: creds.app_id,
                    manifest_fingerprint: fp,
                    client_id: creds.client_id,
                    client_secret: creds.client_secret,
                    signing_secret: creds.signing_secret,
                    ..AppRecord::default()
                };
                ledger.apps.insert(plan.handle.clone(), r.clone());
                ledger.save(&self.options.state_file)?;
                info!(seat = %plan.handle, app_id = %r.app_id, "slack app created");
                action = Action::Created;
                r
            }
        };

        // The signing secret: the ledger is its durable copy.
        if !record.signing_secret.is_empty() {
            if env.file_value(&plan.signing_secret_var).as_deref()
                != Some(record.signing_secret.as_str())
            {
                env.set(&plan.signing_secret_var, &record.signing_secret)
                    .map_err(Failure::Other)?;
            }
        } else if env.get(&plan.signing_secret_var).is_none() {
            notes.push(format!(
                "the ledger has no signing secret for app {}: copy it from the app's Basic Information page into {}",
                record.app_id, plan.signing_secret_var
            ));
        }

        // The install: a new app always needs one (a token already in the
        // variable belongs to an app that no longer is this seat's).
        let needs_install = action == Action::Created || self.options.reinstall || !has_token;
        let mut installed = false;
        if needs_install && self.options.skip_install {
            notes.push(format!(
                "install skipped: {} {}",
                plan.bot_token_var,
                if has_token {
                    "holds a token of an earlier install"
                } else {
                    "is not set"
                }
            ));
        } else if needs_install {
            self.install(plan, &mut record, env, prompt).await?;
            ledger.apps.insert(plan.handle.clone(), record.clone());
            ledger.save(&self.options.state_file)?;
            installed = true;
        }
        Ok(SeatReport {
            handle: plan.handle.clone(),
            app_id: Some(record.app_id),
            action,
            installed,
            notes,
        })
    }

    async fn install(
        &self,
        plan: &SeatPlan,
        record: &mut AppRecord,
        env: &mut EnvStore,
        prompt: &mut dyn InstallPrompt,
    ) -> Result<(), Failure> {
        if record.client_id.is_empty() || record.client_secret.is_empty() {
            return Err(Failure::Other(format!(
                "the ledger entry of {} (app {}) has no client_id or client_secret, so it cannot be installed: copy both from the app's Basic Information page into {}",
                plan.handle,
                record.app_id,
                self.options.state_file.display()
            )));
        }
        let redirect = oauth_redirect_url(&self.options.base_url);
        let url = authorize_url(&record.client_id, &redirect, &plan.handle);
        let pasted = prompt
            .code(&plan.handle, &url)
            .map_err(|e| Failure::Other(format!("no install code: {e}")))?;
        let code = install_code(&pasted).map_err(Failure::Other)?;
        let install = self
            .patiently(|| {
                self.client
                    .oauth_access(&record.client_id, &record.client_secret, &code, &redirect)
            })
            .await?;
        if !install.app_id.is_empty() && install.app_id != record.app_id {
            return Err(Failure::Other(format!(
                "the code is for app {}, not {} ({}): open the link printed for this seat",
                install.app_id, record.app_id, plan.handle
            )));
        }
        env.set(&plan.bot_token_var, &install.bot_token)
            .map_err(Failure::Other)?;
        if let Some(var) = &plan.bot_user_id_var
            && !install.bot_user_id.is_empty()
        {
            env.set(var, &install.bot_user_id).map_err(Failure::Other)?;
        }
        record.bot_user_id = install.bot_user_id;
        record.team_id = install.team_id;
        info!(seat = %plan.handle, app_id = %record.app_id, "slack app installed");
        Ok(())
    }
}
