//! `crewlet plane provision`: make the Plane workspace match the company.
//!
//! [`plan`] only reads. It checks the operator's token (`GET /users/me/`),
//! then works out:
//! - **projects**: every identifier in `integrations.plane.provisioning.projects`
//!   and `knowledge.plane_projects`, every unit's `integrations.plane.project`
//!   and `plane_projects`, and every seat's own `integrations.plane.project`;
//!   a missing one is created (name = identifier);
//! - **memberships**: each agent seat with `integrations.plane.user` joins
//!   the org-wide projects, its units' projects (its unit and those above)
//!   and its own, with `provisioning.roles[handle]` or `provisioning.role`
//!   (`admin`, `member` or `guest`). The user must already be a member of
//!   the workspace (matched by id, email, username or display name);
//! - **the webhook** (with `--base-url`): one workspace webhook on
//!   `{base-url}/webhooks/plane`. Created when missing, offering the
//!   company's `webhook_secret`; when Plane answers with a secret of its
//!   own and `webhook_secret` is one whole `${VAR}`, that secret is written
//!   to the env file. A hook on another host but the same path is pointed
//!   at the new URL; an inactive one is re-activated;
//! - **tokens**: Plane has no API to mint an API token for another user,
//!   so tokens are checked, not made: each seat's `integrations.plane.token`
//!   must authenticate as the seat's `user`, and a seat without one is
//!   reported as needing one.
//!
//! [`apply`] then makes the changes; one failing does not stop the others.
//! A second run finds nothing to change.

use std::collections::HashMap;
use std::fmt;

use crewlet_config::{Company, Unit};

use super::client::{Member, PlaneClient, Project};
use crate::knowledge::creds::expand;

pub use super::apply::{Report, apply};
pub use crate::provision::ProvisionError;

/// Where the API receives Plane webhooks.
pub const WEBHOOK_PATH: &str = "/webhooks/plane";
/// The operator's credential: never a seat's variable.
pub const PROVISION_TOKEN_VAR: &str = "PLANE_PROVISION_TOKEN";

/// What a run may do beyond projects and memberships.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The API's public URL; the webhook is managed only when it is given.
    pub base_url: Option<String>,
}

/// Plane's project role number for `role`.
pub fn role_number(role: &str) -> Option<u8> {
    match role.trim().to_ascii_lowercase().as_str() {
        "admin" => Some(20),
        "member" => Some(15),
        "guest" => Some(5),
        _ => None,
    }
}

/// A secret that prints as `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Hidden(pub String);

impl fmt::Debug for Hidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectState {
    Exists { id: String },
    Create,
}

#[derive(Debug, Clone)]
pub struct ProjectPlan {
    pub identifier: String,
    pub state: ProjectState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberState {
    Exists,
    Add,
    Fail(String),
}

/// One seat in one project.
#[derive(Debug, Clone)]
pub struct MemberPlan {
    pub handle: String,
    pub project: String,
    pub user_id: String,
    pub role: String,
    pub state: MemberState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookPlan {
    /// Not managed this run, and why.
    NotManaged(String),
    Ok {
        id: String,
        url: String,
    },
    Create {
        url: String,
        secret: Option<Hidden>,
    },
    /// Point hook `id` at `to` and make it active.
    Update {
        id: String,
        from: String,
        to: String,
    },
    /// Cannot be done, and why.
    Blocked(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenState {
    /// Authenticates as the seat's user.
    Ok,
    /// No token: one must be made in Plane, as the seat's user.
    Needed(String),
    /// The server refuses it, or it is someone else's.
    Bad(String),
    /// Could not be checked (the server did not answer).
    Unchecked(String),
}

#[derive(Debug, Clone)]
pub struct TokenCheck {
    pub handle: String,
    pub state: TokenState,
}

/// What a run would change.
#[derive(Debug, Clone)]
pub struct Plan {
    pub projects: Vec<ProjectPlan>,
    pub members: Vec<MemberPlan>,
    pub webhook: WebhookPlan,
    pub tokens: Vec<TokenCheck>,
    pub notes: Vec<String>,
    /// The `${VAR}` of `webhook_secret`, when it is one whole reference.
    pub secret_var: Option<String>,
}

impl Plan {
    /// How many changes [`apply`] would make.
    pub fn changes(&self) -> usize {
        let projects = self
            .projects
            .iter()
            .filter(|p| p.state == ProjectState::Create)
            .count();
        let members = self
            .members
            .iter()
            .filter(|m| m.state == MemberState::Add)
            .count();
        let hook = usize::from(matches!(
            self.webhook,
            WebhookPlan::Create { .. } | WebhookPlan::Update { .. }
        ));
        projects + members + hook
    }

    /// Whether something cannot be done (a seat or the webhook).
    pub fn blocked(&self) -> bool {
        self.members
            .iter()
            .any(|m| matches!(m.state, MemberState::Fail(_)))
            || matches!(self.webhook, WebhookPlan::Blocked(_))
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.projects {
            match &p.state {
                ProjectState::Exists { .. } => writeln!(f, "  project {}: exists", p.identifier)?,
                ProjectState::Create => writeln!(f, "  project {}: create", p.identifier)?,
            }
        }
        for m in &self.members {
            let what = match &m.state {
                MemberState::Exists => "member".to_owned(),
                MemberState::Add => format!("add as {}", m.role),
                MemberState::Fail(why) => format!("cannot add: {why}"),
            };
            writeln!(f, "  {} in {}: {what}", m.handle, m.project)?;
        }
        match &self.webhook {
            WebhookPlan::NotManaged(why) => writeln!(f, "  webhook: not managed ({why})")?,
            WebhookPlan::Ok { url, .. } => writeln!(f, "  webhook {url}: ok")?,
            WebhookPlan::Create { url, .. } => writeln!(f, "  webhook {url}: create")?,
            WebhookPlan::Update { from, to, .. } => {
                writeln!(f, "  webhook {from}: point at {to} and activate")?
            }
            WebhookPlan::Blocked(why) => writeln!(f, "  webhook: cannot be managed: {why}")?,
        }
        for t in &self.tokens {
            match &t.state {
                TokenState::Ok => writeln!(f, "  {} token: ok", t.handle)?,
                TokenState::Needed(how) => writeln!(f, "  {} token: NEEDED: {how}", t.handle)?,
                TokenState::Bad(why) => writeln!(f, "  {} token: BAD: {why}", t.handle)?,
                TokenState::Unchecked(why) => {
                    writeln!(f, "  {} token: unchecked ({why})", t.handle)?
                }
            }
        }
        for n in &self.notes {
            writeln!(f, "  note: {n}")?;
        }
        match self.changes() {
            0 => write!(f, "nothing to change"),
            1 => write!(f, "1 change"),
            n => write!(f, "{n} changes"),
        }
    }
}

/// One agent seat on Plane, as the company file describes it.
struct SeatSpec {
    handle: String,
    user: Option<String>,
    token: Option<String>,
    /// Name of the `${VAR}` its token is read from, for the hint.
    token_var: Option<String>,
    projects: Vec<String>,
    role: String,
}

fn push_unique(list: &mut Vec<String>, value: &str) {
    let v = value.trim().to_owned();
    if !v.is_empty() && !list.iter().any(|x| x.eq_ignore_ascii_case(&v)) {
        list.push(v);
    }
}

/// Unit name -> the Plane projects it owns, for every unit.
fn unit_projects(units: &[Unit], out: &mut HashMap<String, Vec<String>>) {
    for u in units {
        let mut list = Vec::new();
        if let Some(p) = &u.integrations.plane {
            push_unique(&mut list, &p.project);
        }
        for p in &u.integrations.plane_projects {
            push_unique(&mut list, p);
        }
        out.insert(u.name.clone(), list);
        unit_projects(&u.children, out);
    }
}

/// The `${VAR}` that is the whole of `raw`, if it is one.
pub fn whole_var(raw: Option<&str>) -> Option<String> {
    crate::provision::vars::whole_var(raw?)
}

fn seats(
    company: &Company,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<String>, Vec<SeatSpec>), ProvisionError> {
    let cfg = company.integrations.plane.as_ref();
    let prov = cfg.and_then(|c| c.provisioning.clone()).unwrap_or_default();
    let default_role = if prov.role.trim().is_empty() {
        "member".to_owned()
    } else {
        prov.role.clone()
    };
    let mut org_projects = Vec::new();
    for p in &prov.projects {
        push_unique(&mut org_projects, p);
    }
    for p in company.knowledge.iter().flat_map(|k| &k.plane_projects) {
        push_unique(&mut org_projects, p);
    }
    let mut by_unit = HashMap::new();
    unit_projects(&company.units, &mut by_unit);
    let org = company.organization();
    let mut out = Vec::new();
    for seat in org.agents() {
        let Some(own) = seat.role.integrations.plane.as_ref() else {
            continue;
        };
        let role = prov
            .roles
            .get(&seat.handle)
            .cloned()
            .unwrap_or_else(|| default_role.clone());
        if role_number(&role).is_none() {
            return Err(ProvisionError::Config(format!(
                "integrations.plane.provisioning: role `{role}` of seat {} is not one of admin, member, guest",
                seat.handle
            )));
        }
        let mut projects = org_projects.clone();
        for unit in &seat.unit_path {
            for p in by_unit.get(unit).into_iter().flatten() {
                push_unique(&mut projects, p);
            }
        }
        if let Some(p) = &own.project {
            push_unique(&mut projects, p);
        }
        out.push(SeatSpec {
            handle: seat.handle.clone(),
            user: expand(own.user.as_deref(), env),
            token: expand(own.token.as_deref(), env),
            token_var: whole_var(own.token.as_deref()),
            projects,
            role,
        });
    }
    let mut all = Vec::new();
    for p in org_projects
        .iter()
        .chain(out.iter().flat_map(|s| &s.projects))
    {
        push_unique(&mut all, p);
    }
    Ok((all, out))
}

fn find_project<'p>(projects: &'p [Project], key: &str) -> Option<&'p Project> {
    projects
        .iter()
        .find(|p| p.identifier.eq_ignore_ascii_case(key) || p.id.eq_ignore_ascii_case(key))
}

/// The operator's client for `company` (`integrations.plane.url` and
/// `workspace`) with `token`.
pub fn operator_client(
    company: &Company,
    token: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<PlaneClient, ProvisionError> {
    let cfg =
        company.integrations.plane.as_ref().ok_or_else(|| {
            ProvisionError::Config("the company has no integrations.plane".into())
        })?;
    let url = expand(Some(&cfg.url), env)
        .ok_or_else(|| ProvisionError::Config("integrations.plane.url is not set".into()))?;
    let workspace = expand(cfg.workspace.as_deref(), env)
        .ok_or_else(|| ProvisionError::Config("integrations.plane.workspace is not set".into()))?;
    if token.trim().is_empty() {
        return Err(ProvisionError::Config(format!(
            "no operator token: pass --token, set {PROVISION_TOKEN_VAR}, or set integrations.plane.token"
        )));
    }
    PlaneClient::new(&url, &workspace, token.trim())
        .map_err(|e| ProvisionError::Config(e.to_string()))
}

/// Works out what [`apply`] would change; reads only.
pub async fn plan(
    company: &Company,
    client: &PlaneClient,
    options: &Options,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Plan, ProvisionError> {
    let (wanted, specs) = seats(company, env)?;
    client
        .me()
        .await
        .map_err(|e| ProvisionError::Refused(format!("the operator token does not work: {e}")))?;
    let refused = |e: super::PlaneError| ProvisionError::Refused(e.to_string());
    let projects = client.projects().await.map_err(refused)?;
    let members = client.workspace_members().await.map_err(refused)?;
    let mut notes = Vec::new();
    let mut plans = Vec::new();
    let mut current: HashMap<String, Vec<String>> = HashMap::new();
    for key in &wanted {
        let state = match find_project(&projects, key) {
            Some(p) => {
                current.insert(
                    key.to_ascii_uppercase(),
                    client.project_members(&p.id).await.map_err(refused)?,
                );
                ProjectState::Exists { id: p.id.clone() }
            }
            None => ProjectState::Create,
        };
        plans.push(ProjectPlan {
            identifier: key.to_ascii_uppercase(),
            state,
        });
    }
    let mut member_plans = Vec::new();
    let mut tokens = Vec::new();
    for spec in &specs {
        let user: Option<&Member> = spec
            .user
            .as_deref()
            .and_then(|u| members.iter().find(|m| m.is(u)));
        match (&spec.user, user) {
            (None, _) => notes.push(format!(
                "{}: integrations.plane.user is not set (or its variable is not), so it joins no project",
                spec.handle
            )),
            (Some(u), None) => {
                for p in &spec.projects {
                    member_plans.push(MemberPlan {
                        handle: spec.handle.clone(),
                        project: p.to_ascii_uppercase(),
                        user_id: String::new(),
                        role: spec.role.clone(),
                        state: MemberState::Fail(format!("`{u}` is not a member of the workspace: invite it in Plane first")),
                    });
                }
            }
            (Some(_), Some(m)) => {
                for p in &spec.projects {
                    let key = p.to_ascii_uppercase();
                    let joined = current.get(&key).is_some_and(|ids| ids.iter().any(|id| id.eq_ignore_ascii_case(&m.id)));
                    member_plans.push(MemberPlan {
                        handle: spec.handle.clone(),
                        project: key,
                        user_id: m.id.clone(),
                        role: spec.role.clone(),
                        state: if joined { MemberState::Exists } else { MemberState::Add },
                    });
                }
            }
        }
        tokens.push(TokenCheck {
            handle: spec.handle.clone(),
            state: check_token(client, spec, user).await,
        });
    }
    let secret_var = whole_var(
        company
            .integrations
            .plane
            .as_ref()
            .and_then(|p| p.webhook_secret.as_deref()),
    );
    let webhook = webhook_plan(company, client, options, env, secret_var.as_deref()).await?;
    Ok(Plan {
        projects: plans,
        members: member_plans,
        webhook,
        tokens,
        notes,
        secret_var,
    })
}

async fn check_token(client: &PlaneClient, spec: &SeatSpec, user: Option<&Member>) -> TokenState {
    let Some(token) = &spec.token else {
        let var = spec.token_var.as_deref().map_or_else(
            || "set integrations.plane.token to a ${VAR}".to_owned(),
            |v| format!("put it in {v}"),
        );
        let who = spec.user.as_deref().unwrap_or("the seat's account");
        return TokenState::Needed(format!(
            "Plane cannot mint tokens for other users: sign in as {who}, create an API token (profile settings, API tokens) and {var}"
        ));
    };
    match client.with_token(token).me().await {
        Ok(me) => match user {
            Some(u) if !u.id.eq_ignore_ascii_case(&me.id) => TokenState::Bad(format!(
                "it belongs to {}, not to the seat's user",
                if me.email.is_empty() {
                    &me.id
                } else {
                    &me.email
                }
            )),
            _ => TokenState::Ok,
        },
        Err(e) if matches!(e.status(), Some(401 | 403)) => {
            TokenState::Bad("Plane refuses it".into())
        }
        Err(e) => TokenState::Unchecked(e.to_string()),
    }
}

/// `url` without a trailing slash, scheme and host lower-cased.
fn normalize_url(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            format!(
                "{}://{}{path}",
                scheme.to_ascii_lowercase(),
                host.to_ascii_lowercase()
            )
        }
        None => url.to_owned(),
    }
}

async fn webhook_plan(
    company: &Company,
    client: &PlaneClient,
    options: &Options,
    env: &dyn Fn(&str) -> Option<String>,
    secret_var: Option<&str>,
) -> Result<WebhookPlan, ProvisionError> {
    let Some(base) = options
        .base_url
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty())
    else {
        return Ok(WebhookPlan::NotManaged("no --base-url".into()));
    };
    let target = format!("{}{WEBHOOK_PATH}", base.trim_end_matches('/'));
    let hooks = client
        .webhooks()
        .await
        .map_err(|e| ProvisionError::Refused(format!("cannot list webhooks: {e}")))?;
    let want = normalize_url(&target);
    if let Some(h) = hooks.iter().find(|h| normalize_url(&h.url) == want) {
        return Ok(if h.is_active {
            WebhookPlan::Ok {
                id: h.id.clone(),
                url: h.url.clone(),
            }
        } else {
            WebhookPlan::Update {
                id: h.id.clone(),
                from: h.url.clone(),
                to: target,
            }
        });
    }
    if let Some(h) = hooks
        .iter()
        .find(|h| normalize_url(&h.url).ends_with(WEBHOOK_PATH))
    {
        return Ok(WebhookPlan::Update {
            id: h.id.clone(),
            from: h.url.clone(),
            to: target,
        });
    }
    let raw = company
        .integrations
        .plane
        .as_ref()
        .and_then(|p| p.webhook_secret.as_deref());
    let secret = expand(raw, env).map(Hidden);
    if secret.is_none() && secret_var.is_none() {
        return Ok(WebhookPlan::Blocked(
            "integrations.plane.webhook_secret is not set: make it one ${VAR} (e.g. ${PLANE_WEBHOOK_SECRET}) so the secret can be recorded".into(),
        ));
    }
    Ok(WebhookPlan::Create {
        url: target,
        secret,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_roles_and_vars() {
        assert_eq!(
            normalize_url("HTTP://Api.Example.com/webhooks/plane/"),
            "http://api.example.com/webhooks/plane"
        );
        assert_eq!(role_number("Admin"), Some(20));
        assert_eq!(role_number("developer"), None);
        assert_eq!(whole_var(Some("${A}")).as_deref(), Some("A"));
        assert_eq!(whole_var(Some("x${A}")), None);
        assert_eq!(whole_var(Some("lit")), None);
        assert_eq!(format!("{:?}", Hidden("s".into())), "***");
    }
}
