//! The active company revision as the API uses it: the parsed company, its
//! organization and the webhook secrets (with `${VAR}` expanded from the
//! process environment, only the names Tier A `security.company_env`
//! allows: the lookup given here is already filtered by `ApiBuilder`). Reloaded when the active revision changes, by a
//! background poll, after a write through this API, and on demand when a
//! webhook arrives before any company is known. Each loaded secret is
//! registered with `crewlet_telemetry::register_secret`, so no log line or
//! exported span shows it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crewlet_config::{Company, Organization, interpolate};
use crewlet_store::{ConfigRevision, ConfigRevisions};
use tracing::{info, warn};

use crate::engine_view::StaticEngineView;

/// Looks up an environment variable (the process environment in production).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A secret's bytes; never printed.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(Box<[u8]>);

impl Secret {
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The webhook secrets of one revision, expanded.
#[derive(Debug, Default, Clone)]
pub(crate) struct WebhookSecrets {
    pub github: Option<Secret>,
    pub gitlab_token: Option<Secret>,
    pub gitlab_signing: Option<Secret>,
    pub plane: Option<Secret>,
    pub jira: Option<Secret>,
    pub confluence: Option<Secret>,
    /// Signing secret of each seat's own Slack app, by handle.
    pub slack: HashMap<String, Secret>,
}

impl WebhookSecrets {
    /// Every expanded secret, as text.
    pub fn values(&self) -> Vec<String> {
        [
            &self.github,
            &self.gitlab_token,
            &self.gitlab_signing,
            &self.plane,
            &self.jira,
            &self.confluence,
        ]
        .into_iter()
        .flatten()
        .chain(self.slack.values())
        .map(|s| String::from_utf8_lossy(s.bytes()).into_owned())
        .collect()
    }

    fn from_company(company: &Company, org: &Organization, env: &EnvLookup) -> Self {
        let expand = |key: &str, raw: Option<&String>| -> Option<Secret> {
            let raw = raw?;
            match interpolate(raw, |name| env(name)) {
                Ok(v) if !v.trim().is_empty() => Some(Secret(v.into_bytes().into_boxed_slice())),
                Ok(_) => {
                    warn!(
                        key,
                        "webhook secret is empty; its webhooks answer 503 until it is set"
                    );
                    None
                }
                // The error names the variable, never a value.
                Err(e) => {
                    warn!(key, error = %e, "webhook secret cannot be expanded; its webhooks answer 503 until it is set");
                    None
                }
            }
        };
        let i = &company.integrations;
        let mut slack = HashMap::new();
        for seat in org.seats() {
            let raw = seat
                .role
                .integrations
                .slack
                .as_ref()
                .and_then(|s| s.signing_secret.as_ref());
            let key = format!("{}.integrations.slack.signing_secret", seat.yaml_path);
            if let Some(secret) = expand(&key, raw) {
                slack.insert(seat.handle.clone(), secret);
            }
        }
        Self {
            github: expand(
                "integrations.github.webhook_secret",
                i.github.as_ref().and_then(|g| g.webhook_secret.as_ref()),
            ),
            gitlab_token: expand(
                "integrations.gitlab.webhook_token",
                i.gitlab.as_ref().and_then(|g| g.webhook_token.as_ref()),
            ),
            gitlab_signing: expand(
                "integrations.gitlab.signing_secret",
                i.gitlab.as_ref().and_then(|g| g.signing_secret.as_ref()),
            ),
            plane: expand(
                "integrations.plane.webhook_secret",
                i.plane.as_ref().and_then(|p| p.webhook_secret.as_ref()),
            ),
            jira: expand(
                "integrations.jira.webhook_secret",
                i.jira.as_ref().and_then(|j| j.webhook_secret.as_ref()),
            ),
            confluence: expand(
                "integrations.confluence.webhook_secret",
                i.confluence
                    .as_ref()
                    .and_then(|c| c.webhook_secret.as_ref()),
            ),
            slack,
        }
    }
}

/// One loaded revision.
pub(crate) struct Snapshot {
    pub revision_id: i64,
    pub activated_at: Option<chrono::DateTime<chrono::Utc>>,
    pub company: Company,
    pub org: Arc<Organization>,
    pub secrets: WebhookSecrets,
    pub view: Arc<StaticEngineView>,
}

impl fmt::Debug for Snapshot {
    // The company may hold literal secrets: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("revision_id", &self.revision_id)
            .field("company", &self.company.name)
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    pub fn load(revision: &ConfigRevision, env: &EnvLookup) -> Result<Self, String> {
        let company: Company = serde_json::from_value(revision.payload.clone()).map_err(|e| {
            format!(
                "active company revision {} cannot be read: {e}",
                revision.revision_id
            )
        })?;
        let org = Arc::new(company.organization());
        let secrets = WebhookSecrets::from_company(&company, &org, env);
        // Never in a log line or an exported span from now on.
        crewlet_telemetry::register_secrets(secrets.values());
        let view = Arc::new(StaticEngineView::new(
            Some(org.clone()),
            Some(revision.revision_id),
        ));
        Ok(Self {
            revision_id: revision.revision_id,
            activated_at: revision.activated_at,
            company,
            org,
            secrets,
            view,
        })
    }
}

/// The API's copy of the active revision.
pub(crate) struct ActiveCompany {
    configs: Arc<dyn ConfigRevisions>,
    env: EnvLookup,
    current: RwLock<Option<Arc<Snapshot>>>,
    last_error: Mutex<Option<String>>,
    last_refresh: Mutex<Option<Instant>>,
    refreshing: tokio::sync::Mutex<()>,
}

impl ActiveCompany {
    pub fn new(configs: Arc<dyn ConfigRevisions>, env: EnvLookup) -> Self {
        Self {
            configs,
            env,
            current: RwLock::new(None),
            last_error: Mutex::new(None),
            last_refresh: Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    pub fn get(&self) -> Option<Arc<Snapshot>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Why the active revision could not be loaded, if it could not.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads the active revision and reloads when it changed.
    pub async fn refresh(&self) {
        let _one = self.refreshing.lock().await;
        *self.last_refresh.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        let active = match self.configs.active().await {
            Ok(a) => a,
            Err(e) => {
                warn!(error = %e, "cannot read the active company revision; keeping the one loaded");
                return;
            }
        };
        let Some(revision) = active else {
            *self.current.write().unwrap_or_else(|p| p.into_inner()) = None;
            return;
        };
        if let Some(cur) = self.get()
            && cur.revision_id == revision.revision_id
            && cur.activated_at == revision.activated_at
        {
            return;
        }
        match Snapshot::load(&revision, &self.env) {
            Ok(s) => {
                info!(
                    revision_id = s.revision_id,
                    company = %s.company.name,
                    seats = s.org.seats().len(),
                    "company revision loaded"
                );
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(s));
            }
            Err(e) => {
                warn!(error = %e, "keeping the previously loaded company revision");
                *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
        }
    }

    /// [`refresh`](Self::refresh) unless one ran within `min_gap`.
    pub async fn refresh_if_older(&self, min_gap: Duration) {
        let recent = self
            .last_refresh
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some_and(|t| t.elapsed() < min_gap);
        if !recent {
            self.refresh().await;
        }
    }
}
