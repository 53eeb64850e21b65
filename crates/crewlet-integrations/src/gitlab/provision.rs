//! `crewlet gitlab provision`: make a GitLab instance match the company file.
//!
//! [`plan`] only reads. Preflight: the operator's token belongs to an
//! instance admin, the group exists, and so does every project of
//! `provisioning.projects`. Then per agent seat with `integrations.gitlab`:
//! the user (created when missing), its direct membership of the group and
//! of those projects at the configured access level, and a token in the
//! seat's `${VAR}` that authenticates as this very user. Last, the webhook
//! that brings issues, comments and merge requests to Crewlet's
//! `/webhooks/gitlab`. [`apply`] then does exactly what the plan lists,
//! seat by seat; one seat failing does not stop the others. A second run
//! finds nothing to do.
//!
//! A token is replaced only when GitLab says it is bad (401 or 403, or it
//! belongs to someone else). When the check cannot be made (5xx, no
//! answer) the token is left alone: minting on "cannot tell" would throw
//! away a credential that may well work.

mod apply;
mod display;
mod hooks;

use std::fmt;

use crewlet_config::Company;

use super::client::{GitlabClient, Space};
use super::seats::{self, EnvLookup, SeatSpec, Settings, TokenRef};
use crate::provision::vars::{Owners, VarRules, recorded};
use crate::provision::{SeatAction, require_admin_token};

pub use crate::provision::{MintedToken, Outcome, ProvisionError, SeatOutcome};
pub use apply::{HookOutcome, Report, apply};

/// The operator's credential: never a seat's variable.
pub const ADMIN_TOKEN_VAR: &str = "GITLAB_ADMIN_TOKEN";
/// The domain of the addresses created users get unless told otherwise
/// (`.invalid` is reserved: mail to it goes nowhere).
pub const DEFAULT_EMAIL_DOMAIN: &str = "noreply.invalid";
/// Days a minted token is valid (GitLab.com allows at most 365).
pub const DEFAULT_TOKEN_DAYS: u32 = 364;
/// The path Crewlet's API receives GitLab webhooks on.
pub const WEBHOOK_PATH: &str = "/webhooks/gitlab";

/// What a run does beyond the company file.
#[derive(Debug, Clone)]
pub struct Options {
    /// Crewlet's API as GitLab reaches it; the hook posts to
    /// `{base_url}/webhooks/gitlab`.
    pub base_url: String,
    /// Only these handles (empty: every seat with `integrations.gitlab`).
    pub handles: Vec<String>,
    /// Created users get `{username}@{email_domain}`.
    pub email_domain: String,
    /// Days a minted token is valid.
    pub token_days: u32,
    /// Write the token to hooks that already look right (GitLab never shows
    /// a hook's token, so a changed `webhook_token` is not noticed otherwise).
    pub rewrite_hooks: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            handles: Vec::new(),
            email_domain: DEFAULT_EMAIL_DOMAIN.into(),
            token_days: DEFAULT_TOKEN_DAYS,
            rewrite_hooks: false,
        }
    }
}

/// One change to make for a seat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Create {
        email: String,
    },
    Join {
        space: Space,
        id: u64,
        path: String,
        level: u32,
    },
    SetLevel {
        space: Space,
        id: u64,
        path: String,
        from: u32,
        to: u32,
    },
    /// Mint a token into the variable; `why` it is needed.
    Mint {
        var: String,
        why: String,
    },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = |l: &u32| seats::level_name(*l);
        match self {
            Step::Create { email } => write!(f, "create the user ({email})"),
            Step::Join {
                space,
                path,
                level: l,
                ..
            } => write!(f, "join {} {path} as {}", space.noun(), level(l)),
            Step::SetLevel {
                space,
                path,
                from,
                to,
                ..
            } => write!(
                f,
                "make it {} of {} {path} (was {})",
                level(to),
                space.noun(),
                level(from)
            ),
            Step::Mint { var, why } => write!(f, "mint a token into {var} ({why})"),
        }
    }
}

/// What a run will do for one seat.
pub type Action = SeatAction<Step>;

/// How the seat variable rules read for a user's `integrations.gitlab.token`.
const VAR_RULES: VarRules<'static> = VarRules {
    field: "integrations.gitlab.token",
    subject: "the token",
    noun: "token",
    admin_var: ADMIN_TOKEN_VAR,
};

/// One seat of the plan.
#[derive(Debug, Clone)]
pub struct SeatPlan {
    pub handle: String,
    pub username: String,
    /// The role's name: a created user's display name.
    pub name: String,
    pub action: Action,
    pub notes: Vec<String>,
    user_id: Option<u64>,
}

/// What a run will do about one hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookAction {
    /// It exists and sends the events Crewlet routes.
    Keep,
    Create,
    Update {
        hook_id: u64,
        why: String,
    },
    Fail(String),
}

/// One webhook of the plan: on the group, or on one project.
#[derive(Debug, Clone)]
pub struct HookPlan {
    pub space: Space,
    pub path: String,
    pub action: HookAction,
    id: u64,
}

/// Everything a run will do.
#[derive(Clone)]
pub struct Plan {
    pub url: String,
    pub group: String,
    /// The admin account's username.
    pub admin: String,
    /// Where the hooks post.
    pub hook_url: String,
    pub notes: Vec<String>,
    pub seats: Vec<SeatPlan>,
    pub hooks: Vec<HookPlan>,
    group_id: u64,
    /// `provisioning.projects` with their ids.
    projects: Vec<(String, u64)>,
    scopes: Vec<String>,
    expires_at: String,
    webhook_token: Option<String>,
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("url", &self.url)
            .field("group", &self.group)
            .field("hook_url", &self.hook_url)
            .field("seats", &self.seats)
            .field("hooks", &self.hooks)
            .finish_non_exhaustive()
    }
}

impl Plan {
    /// Changes planned: seat steps and hooks to create or update.
    pub fn changes(&self) -> usize {
        let seats: usize = self.seats.iter().map(|s| s.action.changes()).sum();
        let hooks = self
            .hooks
            .iter()
            .filter(|h| matches!(h.action, HookAction::Create | HookAction::Update { .. }))
            .count();
        seats + hooks
    }

    /// Whether a seat or a hook is planned to fail.
    pub fn fails(&self) -> bool {
        self.seats.iter().any(|s| s.action.fails())
            || self
                .hooks
                .iter()
                .any(|h| matches!(h.action, HookAction::Fail(_)))
    }
}

/// The admin's client for the company's instance.
pub fn admin_client(
    company: &Company,
    admin_token: &str,
    env: EnvLookup<'_>,
) -> Result<GitlabClient, ProvisionError> {
    let settings = seats::settings(company, env).map_err(ProvisionError::Config)?;
    require_admin_token(admin_token, ADMIN_TOKEN_VAR)?;
    GitlabClient::new(&settings.url, admin_token).map_err(|e| ProvisionError::Config(e.to_string()))
}

/// Reads the instance and works out what a run would change (no writes).
pub async fn plan(
    company: &Company,
    admin: &GitlabClient,
    options: &Options,
    env: EnvLookup<'_>,
) -> Result<Plan, ProvisionError> {
    let config = ProvisionError::Config;
    let settings = seats::settings(company, env).map_err(config)?;
    let base = api_base(&options.base_url).ok_or_else(|| {
        config(format!(
            "--base-url `{}` is not an http(s) url",
            options.base_url
        ))
    })?;
    if options.token_days == 0 {
        return Err(config("--token-days must be at least 1".into()));
    }
    let domain = options.email_domain.trim().trim_start_matches('@');
    if domain.is_empty() || domain.contains(char::is_whitespace) {
        return Err(config(format!(
            "`{}` is not an email domain",
            options.email_domain
        )));
    }
    let specs = seats::seat_specs(company, env);
    for handle in &options.handles {
        if !specs.iter().any(|s| &s.handle == handle) {
            return Err(config(format!(
                "`{handle}` is not an agent seat with integrations.gitlab"
            )));
        }
    }

    let mut plan = preflight(admin, &settings).await?;
    plan.hook_url = format!("{base}{WEBHOOK_PATH}");
    plan.expires_at = (chrono::Utc::now().date_naive()
        + chrono::Days::new(u64::from(options.token_days)))
    .format("%Y-%m-%d")
    .to_string();
    plan.webhook_token = settings.webhook_token.clone().ok();

    let mut owners = Owners::default();
    for spec in &specs {
        if let TokenRef::Var(var) = &spec.token {
            owners.claim(var, &spec.handle);
        }
        if !options.handles.is_empty() && !options.handles.contains(&spec.handle) {
            continue;
        }
        let mut seat = SeatPlan {
            handle: spec.handle.clone(),
            username: spec.username.clone().unwrap_or_default(),
            name: spec.name.clone(),
            action: Action::Steps(Vec::new()),
            notes: spec.notes.clone(),
            user_id: None,
        };
        seat.action = match seat_checks(spec, &owners) {
            Ok(var) => plan_seat(admin, &plan, spec, var, domain, env, &mut seat).await,
            Err(action) => action,
        };
        plan.seats.push(seat);
    }
    plan.hooks = hooks::plan_hooks(admin, &settings, &mut plan, options.rewrite_hooks).await;
    Ok(plan)
}

/// Crewlet's API base URL without a trailing slash, when it is http(s).
fn api_base(url: &str) -> Option<String> {
    let trimmed = url.trim().trim_end_matches('/');
    let parsed = reqwest::Url::parse(trimmed).ok()?;
    (matches!(parsed.scheme(), "http" | "https") && parsed.host_str().is_some())
        .then(|| trimmed.to_owned())
}

/// The checks that must pass before anything changes.
async fn preflight(admin: &GitlabClient, settings: &Settings) -> Result<Plan, ProvisionError> {
    let refused = ProvisionError::Refused;
    let me = admin.me().await.map_err(|e| {
        refused(if e.status() == Some(401) {
            format!("the admin token was rejected ({e})")
        } else {
            format!("cannot check the admin token: {e}")
        })
    })?;
    if me.is_admin != Some(true) {
        return Err(refused(format!(
            "the admin token belongs to @{}, who is not an instance administrator; creating \
             users and minting their tokens needs an administrator's token with the api scope",
            me.username
        )));
    }
    let lookup = |space: Space, path: String| async move {
        admin.namespace(space, &path).await.map_err(|e| {
            refused(if e.is_not_found() {
                format!(
                    "{} `{path}` does not exist on {}: create it first",
                    space.noun(),
                    admin.base_url()
                )
            } else {
                format!("cannot look up {} `{path}`: {e}", space.noun())
            })
        })
    };
    let group = lookup(Space::Group, settings.group.clone()).await?;
    let mut projects = Vec::new();
    for path in &settings.projects {
        let found = lookup(Space::Project, path.clone()).await?;
        projects.push((path.clone(), found.id));
    }
    Ok(Plan {
        url: admin.base_url().to_owned(),
        group: settings.group.clone(),
        admin: me.username,
        hook_url: String::new(),
        notes: Vec::new(),
        seats: Vec::new(),
        hooks: Vec::new(),
        group_id: group.id,
        projects,
        scopes: settings.scopes.clone(),
        expires_at: String::new(),
        webhook_token: None,
    })
}

/// The seat's token variable (`None`: a literal token), or why it cannot
/// be provisioned.
fn seat_checks(spec: &SeatSpec, owners: &Owners) -> Result<Option<String>, Action> {
    if let Err(e) = &spec.username {
        return Err(Action::Fail(e.clone()));
    }
    if spec.username.as_deref().is_ok_and(str::is_empty) {
        return Err(Action::Fail("the username is empty".into()));
    }
    if let Err(e) = &spec.level {
        return Err(Action::Fail(format!("access level: {e}")));
    }
    let var = match &spec.token {
        TokenRef::Literal => return Ok(None),
        TokenRef::Empty => return Err(Action::Fail(VAR_RULES.empty())),
        TokenRef::Mixed => return Err(Action::Fail(VAR_RULES.mixed())),
        TokenRef::Var(var) => var.clone(),
    };
    VAR_RULES
        .check(&var, &spec.handle, owners)
        .map_err(Action::Fail)?;
    Ok(Some(var))
}

async fn plan_seat(
    admin: &GitlabClient,
    plan: &Plan,
    spec: &SeatSpec,
    var: Option<String>,
    domain: &str,
    env: EnvLookup<'_>,
    seat: &mut SeatPlan,
) -> Action {
    let level = spec.level.clone().unwrap_or_default();
    let spaces = std::iter::once((Space::Group, plan.group.clone(), plan.group_id)).chain(
        plan.projects
            .iter()
            .map(|(path, id)| (Space::Project, path.clone(), *id)),
    );
    let user = match admin.user_by_username(&seat.username).await {
        Ok(u) => u,
        Err(e) => return Action::Fail(format!("cannot look up the user: {e}")),
    };
    let Some(user) = user else {
        let mut steps = vec![Step::Create {
            email: format!("{}@{domain}", seat.username),
        }];
        steps.extend(spaces.map(|(space, path, id)| Step::Join {
            space,
            id,
            path,
            level,
        }));
        match var {
            Some(var) => steps.push(Step::Mint {
                var,
                why: "new user".into(),
            }),
            None => seat
                .notes
                .push("the token is written in the company file: not replaced".into()),
        }
        return Action::Steps(steps);
    };
    seat.user_id = Some(user.id);
    if !user.state.is_empty() && user.state != "active" {
        return Action::Fail(format!(
            "the user is {}: reactivate it (Admin area > Users) and run again",
            user.state
        ));
    }
    let mut steps = Vec::new();
    for (space, path, id) in spaces {
        match admin.member(space, id, user.id).await {
            Ok(None) => steps.push(Step::Join {
                space,
                id,
                path,
                level,
            }),
            Ok(Some(m)) if m.access_level != level => steps.push(Step::SetLevel {
                space,
                id,
                path,
                from: m.access_level,
                to: level,
            }),
            Ok(Some(_)) => {}
            Err(e) => {
                return Action::Fail(format!(
                    "cannot read its membership of {} {path}: {e}",
                    space.noun()
                ));
            }
        }
    }
    let Some(var) = var else {
        seat.notes
            .push("the token is written in the company file: not checked or replaced".into());
        return Action::Steps(steps);
    };
    match recorded(env, &var) {
        None => steps.push(Step::Mint {
            why: format!("{var} is not set"),
            var,
        }),
        Some(value) => match check_token(admin, &value, user.id).await {
            TokenCheck::Works => {}
            TokenCheck::Refused(why) => steps.push(Step::Mint { var, why }),
            TokenCheck::Unknown(why) => seat.notes.push(format!(
                "cannot check the token in {var} ({why}); left it as it is, run again later"
            )),
        },
    }
    Action::Steps(steps)
}

/// What GitLab says about a recorded token.
pub(crate) enum TokenCheck {
    /// It authenticates as this user.
    Works,
    /// GitLab refuses it, or it is someone else's.
    Refused(String),
    /// No verdict (5xx, no answer).
    Unknown(String),
}

pub(crate) async fn check_token(admin: &GitlabClient, token: &str, user_id: u64) -> TokenCheck {
    match admin.with_token(token).me().await {
        Ok(me) if me.id == user_id => TokenCheck::Works,
        Ok(me) => TokenCheck::Refused(format!(
            "its token authenticates as @{}, not as this user",
            me.username
        )),
        Err(e) if e.status() == Some(401) => {
            TokenCheck::Refused("GitLab refuses the recorded token (revoked or expired)".into())
        }
        Err(e) if e.status() == Some(403) => {
            TokenCheck::Refused("the recorded token may not read its own user".into())
        }
        Err(e) => TokenCheck::Unknown(e.to_string()),
    }
}
