//! `crewlet mattermost provision`: make the server match the company file.
//!
//! [`plan`] only reads: it checks the admin credential and the server
//! (preflight), then works out per seat what is missing: the bot account
//! (created, re-enabled, renamed to `{role name}{display_name_suffix}`),
//! its team and channel memberships, and a token in the seat's `${VAR}`
//! that authenticates as this very bot. [`apply`] then does exactly that,
//! seat by seat, and one seat failing does not stop the others. A second
//! run finds nothing to do.
//!
//! A token is only replaced when the server says it is bad (401, or it
//! belongs to another account). When the check cannot be made (5xx, no
//! answer) the seat is left as it is: minting on "cannot tell" would throw
//! away a credential that may well work.

mod apply;
mod display;

use std::collections::{HashMap, HashSet};
use std::fmt;

use crewlet_config::Company;
use serde_json::Value;

use super::client::{MattermostClient, MattermostError};
use super::seats::{self, EnvLookup, SeatSpec, TokenRef};
use super::wire::Bot;
use crate::provision::vars::{Owners, VarRules, recorded};
use crate::provision::{SeatAction, require_admin_token};

pub use crate::provision::{MintedToken, Outcome, ProvisionError, SeatOutcome};
pub use apply::{Report, apply};

/// The description of every token provisioning mints.
pub const TOKEN_DESCRIPTION: &str = "crewlet-engine";
/// The description of every bot provisioning creates.
pub const BOT_DESCRIPTION: &str = "Crewlet agent seat";
/// The operator's credential: never a seat's variable.
pub const ADMIN_TOKEN_VAR: &str = "MATTERMOST_ADMIN_TOKEN";

/// Which seats a run touches.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Only these handles (empty: every seat with a Mattermost bot).
    pub handles: Vec<String>,
    /// Disable these seats' bots and revoke their tokens.
    pub decommission: Vec<String>,
}

/// One change to make for a seat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Create,
    Enable,
    Rename {
        from: String,
    },
    JoinTeam,
    JoinChannel {
        name: String,
        id: String,
    },
    /// Mint a token into the variable; `why` it is needed.
    Mint {
        var: String,
        why: String,
    },
    /// The bot is disabled: try the recorded token once it is enabled,
    /// and mint a new one if the server refuses it.
    Verify {
        var: String,
    },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Create => f.write_str("create the bot"),
            Step::Enable => f.write_str("enable the bot"),
            Step::Rename { from } => write!(f, "set its display name (was \"{from}\")"),
            Step::JoinTeam => f.write_str("join the team"),
            Step::JoinChannel { name, .. } => write!(f, "join ~{name}"),
            Step::Mint { var, why } => write!(f, "mint a token into {var} ({why})"),
            Step::Verify { var } => write!(f, "check the token in {var} once enabled"),
        }
    }
}

/// What a run will do for one seat.
pub type Action = SeatAction<Step>;

/// How the seat variable rules read for a bot's `bot_token`.
const VAR_RULES: VarRules<'static> = VarRules {
    field: "bot_token",
    subject: "bot_token",
    noun: "bot_token",
    admin_var: ADMIN_TOKEN_VAR,
};

/// One seat of the plan.
#[derive(Clone)]
pub struct SeatPlan {
    pub handle: String,
    pub username: String,
    pub display_name: String,
    pub action: Action,
    pub notes: Vec<String>,
    user_id: Option<String>,
    /// The value the seat's variable holds now (for [`Step::Verify`]).
    recorded: Option<String>,
}

impl fmt::Debug for SeatPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeatPlan")
            .field("handle", &self.handle)
            .field("username", &self.username)
            .field("action", &self.action)
            .field("notes", &self.notes)
            .finish_non_exhaustive()
    }
}

/// One seat to decommission.
#[derive(Debug, Clone)]
pub struct RetirePlan {
    pub handle: String,
    pub username: String,
    pub user_id: Option<String>,
    pub disable: bool,
    /// Ids of the bot's active tokens.
    pub tokens: Vec<String>,
    pub fail: Option<String>,
}

/// Everything a run will do.
#[derive(Debug, Clone)]
pub struct Plan {
    pub url: String,
    pub team: String,
    pub team_id: String,
    /// The admin account's username.
    pub admin: String,
    pub notes: Vec<String>,
    pub seats: Vec<SeatPlan>,
    pub retire: Vec<RetirePlan>,
}

impl Plan {
    /// Changes planned (steps and decommissioning).
    pub fn changes(&self) -> usize {
        let seats: usize = self.seats.iter().map(|s| s.action.changes()).sum();
        let retire: usize = self
            .retire
            .iter()
            .map(|r| usize::from(r.disable) + r.tokens.len())
            .sum();
        seats + retire
    }

    /// Whether a seat is planned to fail.
    pub fn fails(&self) -> bool {
        self.seats.iter().any(|s| s.action.fails())
    }
}

/// The admin's client for the company's server.
pub fn admin_client(
    company: &Company,
    admin_token: &str,
    env: EnvLookup<'_>,
) -> Result<MattermostClient, ProvisionError> {
    let mm = seats::enabled(company).map_err(ProvisionError::Config)?;
    let url = seats::server_url(mm, env).map_err(ProvisionError::Config)?;
    require_admin_token(admin_token, ADMIN_TOKEN_VAR)?;
    MattermostClient::new(&url, admin_token.trim())
        .map_err(|e| ProvisionError::Config(e.to_string()))
}

/// Reads the server and works out what a run would change (no writes).
pub async fn plan(
    company: &Company,
    admin: &MattermostClient,
    options: &Options,
    env: EnvLookup<'_>,
) -> Result<Plan, ProvisionError> {
    let mm = seats::enabled(company).map_err(ProvisionError::Config)?;
    let specs = seats::seat_specs(company, mm, env);
    let known: HashSet<&str> = specs.iter().map(|s| s.handle.as_str()).collect();
    for handle in options.handles.iter().chain(&options.decommission) {
        if !known.contains(handle.as_str()) {
            return Err(ProvisionError::Config(format!(
                "`{handle}` is not an agent seat with integrations.mattermost"
            )));
        }
    }
    if let Some(both) = options
        .handles
        .iter()
        .find(|h| options.decommission.contains(h))
    {
        return Err(ProvisionError::Config(format!(
            "`{both}` is in both --handles and --decommission"
        )));
    }

    let mut plan = preflight(admin, &mm.team).await?;
    let bots: HashMap<String, Bot> = admin
        .bots()
        .await
        .map_err(|e| ProvisionError::Refused(format!("cannot list the bot accounts: {e}")))?
        .into_iter()
        .map(|b| (b.username.to_ascii_lowercase(), b))
        .collect();
    let find = |username: &str| bots.get(&username.to_ascii_lowercase());

    let mut owners = Owners::default();
    let mut channels: HashMap<String, Result<String, String>> = HashMap::new();
    for spec in &specs {
        if options.decommission.contains(&spec.handle) {
            let username = spec.username.clone().unwrap_or_default();
            plan.retire
                .push(retire(admin, &spec.handle, &username, find(&username)).await);
            continue;
        }
        if let TokenRef::Var(var) = &spec.token {
            owners.claim(var, &spec.handle);
        }
        if !options.handles.is_empty() && !options.handles.contains(&spec.handle) {
            continue;
        }
        let mut seat = SeatPlan {
            handle: spec.handle.clone(),
            username: spec.username.clone().unwrap_or_default(),
            display_name: spec.display_name.clone(),
            action: Action::Steps(Vec::new()),
            notes: Vec::new(),
            user_id: None,
            recorded: None,
        };
        seat.action = match seat_action(admin, &plan, spec, &owners, &mut channels, env).await {
            Ok(bot) => plan_seat(admin, &plan, spec, find(&seat.username), bot, &mut seat).await,
            Err(action) => action,
        };
        plan.seats.push(seat);
    }
    Ok(plan)
}

/// The checks that must pass before anything changes.
async fn preflight(admin: &MattermostClient, team: &str) -> Result<Plan, ProvisionError> {
    let refused = ProvisionError::Refused;
    let me = admin.me().await.map_err(|e| {
        refused(if e.is_auth() {
            format!("the admin token was rejected ({e})")
        } else {
            format!("cannot check the admin token: {e}")
        })
    })?;
    if !me.is_admin() {
        return Err(refused(format!(
            "the admin token belongs to @{}, who is not a system admin; creating bots and \
             minting their tokens needs the system_admin role",
            me.username
        )));
    }
    let found = admin.team_by_name(team).await.map_err(|e| {
        refused(if e.is_not_found() {
            format!(
                "team `{team}` does not exist on {}: create it first",
                admin.base_url()
            )
        } else {
            format!("cannot look up team `{team}`: {e}")
        })
    })?;
    let config = admin.config().await.map_err(|e| {
        refused(format!(
            "cannot read the server config to check ServiceSettings.EnableBotAccountCreation \
             and ServiceSettings.EnableUserAccessTokens: {e}"
        ))
    })?;
    let service = &config["ServiceSettings"];
    let required = [
        (
            "EnableBotAccountCreation",
            "bot accounts cannot be created (System Console > Integrations > Bot Accounts)",
        ),
        (
            "EnableUserAccessTokens",
            "bot tokens cannot be minted (System Console > Integrations > \
             Integration Management > Enable Personal Access Tokens)",
        ),
    ];
    let off: Vec<String> = required
        .iter()
        .filter(|(key, _)| !is_on(&service[*key]))
        .map(|(key, why)| format!("ServiceSettings.{key} is off, so {why}"))
        .collect();
    if !off.is_empty() {
        return Err(refused(off.join("; ")));
    }
    let mut notes = Vec::new();
    let site_url = service["SiteURL"].as_str().unwrap_or_default();
    if !site_url.is_empty() && seats::origin(site_url) != seats::origin(admin.base_url()) {
        notes.push(format!(
            "the server's SiteURL is {site_url}, not {}: browsers at any other address get no \
             live updates (run `crewlet mattermost doctor`)",
            admin.base_url()
        ));
    }
    Ok(Plan {
        url: admin.base_url().to_owned(),
        team: team.to_owned(),
        team_id: found.id,
        admin: me.username,
        notes,
        seats: Vec::new(),
        retire: Vec::new(),
    })
}

fn is_on(v: &Value) -> bool {
    v.as_bool() == Some(true) || v.as_str() == Some("true")
}

/// The seat's variable and channel ids, or why the seat is skipped or fails.
async fn seat_action(
    admin: &MattermostClient,
    plan: &Plan,
    spec: &SeatSpec,
    owners: &Owners,
    channels: &mut HashMap<String, Result<String, String>>,
    env: EnvLookup<'_>,
) -> Result<SeatBot, Action> {
    let var = match &spec.token {
        TokenRef::Literal(_) => return Err(Action::Skip("manual token".into())),
        TokenRef::Empty => return Err(Action::Fail(VAR_RULES.empty())),
        TokenRef::Mixed(_) => return Err(Action::Fail(VAR_RULES.mixed())),
        TokenRef::Var(var) => var.clone(),
    };
    VAR_RULES
        .check(&var, &spec.handle, owners)
        .map_err(Action::Fail)?;
    let username = spec
        .username
        .clone()
        .map_err(|e| Action::Fail(format!("username: {e}")))?;
    if username.is_empty() {
        return Err(Action::Fail("the bot's username is empty".into()));
    }
    let names = spec
        .channels
        .clone()
        .map_err(|e| Action::Fail(format!("channel: {e}")))?;
    let mut ids = Vec::new();
    let mut missing = Vec::new();
    for name in names {
        if !channels.contains_key(&name) {
            let found = match admin.channel_by_name(&plan.team_id, &name).await {
                Ok(c) => Ok(c.id),
                Err(e) if e.is_not_found() => Err(format!(
                    "channel ~{name} does not exist in team {}",
                    plan.team
                )),
                Err(e) => Err(format!("cannot look up channel ~{name}: {e}")),
            };
            channels.insert(name.clone(), found);
        }
        match channels.get(&name) {
            Some(Ok(id)) => ids.push((name, id.clone())),
            Some(Err(e)) => missing.push(e.clone()),
            None => {}
        }
    }
    if !missing.is_empty() {
        return Err(Action::Fail(missing.join("; ")));
    }
    let recorded = recorded(env, &var);
    Ok(SeatBot {
        var,
        channels: ids,
        recorded,
    })
}

/// What [`seat_action`] found.
struct SeatBot {
    var: String,
    channels: Vec<(String, String)>,
    recorded: Option<String>,
}

/// The steps for a seat whose configuration is usable.
async fn plan_seat(
    admin: &MattermostClient,
    plan: &Plan,
    spec: &SeatSpec,
    existing: Option<&Bot>,
    bot: SeatBot,
    seat: &mut SeatPlan,
) -> Action {
    let SeatBot {
        var,
        channels,
        recorded,
    } = bot;
    let Some(existing) = existing else {
        let mut steps = vec![Step::Create, Step::JoinTeam];
        steps.extend(
            channels
                .into_iter()
                .map(|(name, id)| Step::JoinChannel { name, id }),
        );
        steps.push(Step::Mint {
            var,
            why: "new bot".into(),
        });
        return Action::Steps(steps);
    };
    let uid = existing.user_id.clone();
    seat.user_id = Some(uid.clone());
    let mut steps = Vec::new();
    let disabled = existing.delete_at != 0;
    if disabled {
        steps.push(Step::Enable);
    }
    if existing.display_name != spec.display_name {
        steps.push(Step::Rename {
            from: existing.display_name.clone(),
        });
    }
    match admin.is_team_member(&plan.team_id, &uid).await {
        Ok(true) => {}
        Ok(false) => steps.push(Step::JoinTeam),
        Err(e) => return Action::Fail(format!("cannot read its team membership: {e}")),
    }
    for (name, id) in channels {
        match admin.is_channel_member(&id, &uid).await {
            Ok(true) => {}
            Ok(false) => steps.push(Step::JoinChannel { name, id }),
            Err(e) => return Action::Fail(format!("cannot read its membership of ~{name}: {e}")),
        }
    }
    match recorded {
        None => steps.push(Step::Mint {
            why: format!("{var} is not set"),
            var,
        }),
        Some(value) if disabled => {
            seat.recorded = Some(value);
            steps.push(Step::Verify { var });
        }
        Some(value) => match check_token(admin, &value, &uid).await {
            TokenCheck::Works => {}
            TokenCheck::Refused(why) => steps.push(Step::Mint { var, why }),
            TokenCheck::Unknown(why) => {
                seat.notes.push(format!(
                    "cannot check the token in {var} ({why}); left the seat as it is, re-run later"
                ));
                return Action::Skip("cannot check its token".into());
            }
        },
    }
    Action::Steps(steps)
}

/// What the server says about a recorded token.
pub(crate) enum TokenCheck {
    /// It authenticates as this bot.
    Works,
    /// The server refuses it, or it is someone else's.
    Refused(String),
    /// No verdict (5xx, no answer).
    Unknown(String),
}

pub(crate) async fn check_token(
    admin: &MattermostClient,
    token: &str,
    user_id: &str,
) -> TokenCheck {
    match admin.with_token(token).me().await {
        Ok(me) if me.id == user_id => TokenCheck::Works,
        Ok(me) => TokenCheck::Refused(format!(
            "its token authenticates as @{}, not as this bot",
            me.username
        )),
        Err(MattermostError::Status { status: 401, .. }) => {
            TokenCheck::Refused("the server refuses the recorded token".into())
        }
        Err(e) => TokenCheck::Unknown(e.to_string()),
    }
}

async fn retire(
    admin: &MattermostClient,
    handle: &str,
    username: &str,
    bot: Option<&Bot>,
) -> RetirePlan {
    let mut plan = RetirePlan {
        handle: handle.to_owned(),
        username: username.to_owned(),
        user_id: None,
        disable: false,
        tokens: Vec::new(),
        fail: None,
    };
    let Some(bot) = bot else {
        return plan;
    };
    plan.user_id = Some(bot.user_id.clone());
    plan.disable = bot.delete_at == 0;
    match admin.tokens(&bot.user_id).await {
        Ok(tokens) => {
            plan.tokens = tokens
                .into_iter()
                .filter(|t| t.is_active)
                .map(|t| t.id)
                .collect();
        }
        Err(e) => plan.fail = Some(format!("cannot list its tokens: {e}")),
    }
    plan
}
