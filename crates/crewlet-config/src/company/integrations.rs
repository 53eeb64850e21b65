//! Connections to the outside world: company-wide blocks, what a unit owns
//! (for routing), and a seat's own accounts.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Company-wide integrations. Secrets are usually `${VAR}` references; a
/// webhook whose secret is missing answers 503 until it is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Integrations {
    /// GitHub webhooks (`X-Hub-Signature-256`) and REST client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<GithubIntegration>,
    /// GitLab webhooks (`X-Gitlab-Token` or signed) and REST client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitlab: Option<GitlabIntegration>,
    /// Plane webhooks (`X-Plane-Signature`) and REST client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane: Option<PlaneIntegration>,
    /// Jira webhooks (`X-Hub-Signature: sha256=`) and REST client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jira: Option<JiraIntegration>,
    /// Confluence webhooks (`X-Hub-Signature: sha256=`) and REST client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confluence: Option<ConfluenceIntegration>,
    /// Slack settings shared by every seat's app (each seat's own app is
    /// configured on the role, under `integrations.slack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackIntegration>,
    /// Mattermost chat: server, team, bot provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mattermost: Option<MattermostIntegration>,
    /// The Atlassian Forge app whose signed events `/webhooks/forge` accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "Forge events are not accepted yet"))]
    pub forge_app_id: Option<String>,
}

/// GitHub.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GithubIntegration {
    /// Declares the integration on; it then needs the settings marked
    /// required below (a webhook without its secret still answers 503).
    #[serde(default)]
    pub enabled: bool,
    /// Secret the webhook signatures are made with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
    /// Token for the REST client when a seat has none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// REST API base URL (GitHub Enterprise: `https://HOST/api/v3`).
    #[serde(default = "default_github_url")]
    pub url: String,
}

fn default_github_url() -> String {
    "https://api.github.com".into()
}

/// GitLab.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitlabIntegration {
    /// Declares the integration on; it then needs the settings marked
    /// required below (a webhook without its secret still answers 503).
    #[serde(default)]
    pub enabled: bool,
    /// Classic secret token, compared with `X-Gitlab-Token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_token: Option<String>,
    /// Signing secret (`whsec_...`) for Standard Webhooks signatures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
    /// Instance URL.
    #[serde(default = "default_gitlab_url")]
    pub url: String,
    /// Token for the REST client when a seat has none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Creating the seats' GitLab users and group membership.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<GitlabProvisioning>,
}

/// GitLab provisioning: what `crewlet gitlab provision` creates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitlabProvisioning {
    /// Group the seats' users join.
    #[serde(default)]
    pub group: String,
    /// Access level of the seats in the group.
    #[serde(default = "default_gitlab_access")]
    pub access_level: String,
    /// Access level per seat handle, overriding `access_level`.
    #[serde(default)]
    pub access_levels: IndexMap<String, String>,
    /// Prefix of the seats' usernames.
    #[serde(default)]
    pub username_prefix: String,
    /// Projects the seats join.
    #[serde(default)]
    pub projects: Vec<String>,
    /// Whether to create the group webhook (`auto`, ...).
    #[serde(default = "default_auto")]
    pub group_webhook: String,
    /// Scopes of the seats' access tokens.
    #[serde(default)]
    pub token_scopes: Vec<String>,
}

fn default_gitlab_access() -> String {
    "developer".into()
}

fn default_auto() -> String {
    "auto".into()
}

fn default_gitlab_url() -> String {
    "https://gitlab.com".into()
}

/// Plane.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlaneIntegration {
    /// Declares the integration on; it then needs the settings marked
    /// required below (a webhook without its secret still answers 503).
    #[serde(default)]
    pub enabled: bool,
    /// Secret for the hex HMAC in `X-Plane-Signature`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
    /// API base URL.
    #[serde(default = "default_plane_url")]
    pub url: String,
    /// Workspace slug.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// API token when a seat has none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Creating the seats' Plane users and project membership.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<PlaneProvisioning>,
}

/// Plane provisioning: what `crewlet plane provision` creates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlaneProvisioning {
    /// Workspace role of the seats.
    #[serde(default = "default_plane_role")]
    pub role: String,
    /// Role per seat handle, overriding `role`.
    #[serde(default)]
    pub roles: IndexMap<String, String>,
    /// Prefix of the seats' usernames.
    #[serde(default)]
    pub username_prefix: String,
    /// Projects the seats join.
    #[serde(default)]
    pub projects: Vec<String>,
    /// Days the seats' tokens are valid.
    #[serde(default = "default_token_expiry")]
    pub token_expiry_days: u32,
}

fn default_plane_role() -> String {
    "member".into()
}

fn default_token_expiry() -> u32 {
    364
}

fn default_plane_url() -> String {
    "https://api.plane.so".into()
}

/// Jira.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JiraIntegration {
    /// Secret for `X-Hub-Signature: sha256=...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
    /// Site URL, e.g. `https://acme.atlassian.net`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Atlassian Cloud id: reach the site through the Atlassian API gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "the Atlassian API gateway is not used yet; set `url`"))]
    pub cloud_id: Option<String>,
    /// Account email for API-token authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// API token when a seat has none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// Confluence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfluenceIntegration {
    /// Secret for `X-Hub-Signature: sha256=...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
    /// Site URL, e.g. `https://acme.atlassian.net/wiki`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Atlassian Cloud id: reach the site through the Atlassian API gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "the Atlassian API gateway is not used yet; set `url`"))]
    pub cloud_id: Option<String>,
    /// Public site URL used in links agents share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "links are not rewritten yet"))]
    pub site_url: Option<String>,
    /// Account email for API-token authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// API token when a seat has none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// Slack settings common to every seat's app.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlackIntegration {
    /// Web API base URL (change it only for a test server).
    #[serde(default = "default_slack_url")]
    pub api_url: String,
    /// When a seat's bot shows a working status ("is thinking...") in the
    /// Slack thread of a turn: `addressed` (the default: direct messages and
    /// mentions of the bot), `always` (every Slack turn) or `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typing_status: Option<WorkingStatus>,
    /// The working status's phrases, per phase; a phase left out or empty
    /// keeps the built-in ones. Slack shows a phrase after the bot's name,
    /// so each finishes that sentence ("is thinking..."); none may be blank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_phrases: Option<StatusPhrases>,
}

impl SlackIntegration {
    /// A blank phrase would clear the status instead of showing one.
    pub(crate) fn check_phrases(&self, out: &mut Vec<crate::check::Finding>) {
        let Some(phrases) = &self.status_phrases else {
            return;
        };
        let at = crate::yaml::YamlPath::root()
            .key("integrations")
            .key("slack")
            .key("status_phrases");
        for (phase, list) in [
            ("onboarding", &phrases.onboarding),
            ("plan", &phrases.plan),
            ("execute", &phrases.execute),
            ("review", &phrases.review),
            ("default", &phrases.default),
        ] {
            for (i, phrase) in list.iter().enumerate() {
                if phrase.trim().is_empty() {
                    out.push(crate::check::Finding::new(
                        at.key(phase).index(i),
                        "a status phrase cannot be blank: an empty status clears the indicator instead of showing it",
                    ));
                }
            }
        }
    }
}

/// When a seat shows a working status on a chat backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkingStatus {
    Off,
    Addressed,
    Always,
}

/// Working-status phrases per turn phase.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusPhrases {
    /// Phrases while onboarding.
    #[serde(default)]
    pub onboarding: Vec<String>,
    /// Phrases while planning.
    #[serde(default)]
    pub plan: Vec<String>,
    /// Phrases while executing.
    #[serde(default)]
    pub execute: Vec<String>,
    /// Phrases while reviewing.
    #[serde(default)]
    pub review: Vec<String>,
    /// Phrases for any other phase.
    #[serde(default)]
    pub default: Vec<String>,
}

/// Mattermost: the engine holds one websocket per seat bot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MattermostIntegration {
    /// Turns Mattermost on.
    #[serde(default)]
    pub enabled: bool,
    /// Server URL (`${VAR}` allowed).
    #[serde(default)]
    pub url: String,
    /// Team name (the URL slug).
    #[serde(default)]
    pub team: String,
    /// When a seat shows it is working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typing_status: Option<WorkingStatus>,
    /// Creating the seats' bots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<MattermostProvisioning>,
}

impl MattermostIntegration {
    /// An enabled Mattermost needs its server and team.
    pub(crate) fn check(&self, out: &mut Vec<crate::check::Finding>) {
        if !self.enabled {
            return;
        }
        let at = crate::yaml::YamlPath::root()
            .key("integrations")
            .key("mattermost");
        if self.url.trim().is_empty() {
            out.push(crate::check::Finding::new(
                at.key("url"),
                "Mattermost is enabled: set the server url (https://chat.example.com)",
            ));
        } else {
            super::validate::check_url(Some(&self.url), &at.key("url"), out);
        }
        if self.team.trim().is_empty() {
            out.push(crate::check::Finding::new(
                at.key("team"),
                "Mattermost is enabled: set the team name the seats' bots belong to",
            ));
        }
    }
}

/// Mattermost bot provisioning.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MattermostProvisioning {
    /// Prefix of the bots' usernames.
    #[serde(default)]
    pub username_prefix: String,
    /// Channels the bots join.
    #[serde(default)]
    pub channels: Vec<String>,
    /// Suffix of the bots' display names.
    #[serde(default)]
    pub display_name_suffix: String,
}

fn default_slack_url() -> String {
    "https://slack.com/api".into()
}

/// What a unit owns on outside systems. Notifications about these that
/// mention no seat go to the unit's lead.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnitIntegrations {
    /// The unit's Jira project (`{project: KEY}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jira: Option<ProjectIdentity>,
    /// The unit's Confluence space (`{space: KEY}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confluence: Option<SpaceIdentity>,
    /// The unit's Plane project (`{project: ID}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane: Option<ProjectIdentity>,
    /// GitHub repositories, as `owner/name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub github_repositories: Vec<String>,
    /// GitLab projects, as `group/project`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gitlab_projects: Vec<String>,
    /// Plane project identifiers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plane_projects: Vec<String>,
    /// Jira project keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jira_projects: Vec<String>,
    /// Confluence space keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub confluence_spaces: Vec<String>,
    /// Slack channel ids.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slack_channels: Vec<String>,
}

/// A Jira or Plane project a unit or an org-wide seat owns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectIdentity {
    /// Project key (Jira) or id or identifier (Plane).
    #[serde(default)]
    pub project: String,
}

/// A Confluence space a unit or an org-wide seat owns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpaceIdentity {
    /// Space key.
    #[serde(default)]
    pub space: String,
}

/// A seat's own identities on outside systems: an agent acts through them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleIntegrations {
    /// The seat's own Slack app (webhook `/webhooks/slack/{handle}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<Box<SlackSeat>>,
    /// The seat's GitHub account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<Box<SeatAccount>>,
    /// The seat's GitLab account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitlab: Option<Box<SeatAccount>>,
    /// The Plane project an org-wide seat owns, and the seat's account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane: Option<Box<TrackerSeat>>,
    /// The Jira project an org-wide seat owns, and the seat's account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jira: Option<Box<TrackerSeat>>,
    /// The Confluence space an org-wide seat owns, and the seat's account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confluence: Option<Box<WikiSeat>>,
    /// The seat's Mattermost bot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mattermost: Option<Box<MattermostSeat>>,
}

impl RoleIntegrations {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// A seat's Slack app: each seat is its own app with its own secrets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlackSeat {
    /// Signing secret of the app (v0 HMAC-SHA256 of requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
    /// Bot token (`xoxb-...`) the seat posts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_token: Option<String>,
    /// The bot's Slack user id, for recognizing @-mentions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_user_id: Option<String>,
    /// Default channel of the seat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "seats post to no default channel yet"))]
    pub channel: Option<String>,
}

/// A seat's Mattermost bot: it reads and posts as this account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MattermostSeat {
    /// The bot's personal access token, as a whole `${VAR}` so that
    /// `crewlet mattermost provision` knows where to write it.
    #[serde(default)]
    pub bot_token: String,
    /// The bot's username; empty: the handle.
    #[serde(default)]
    pub username: String,
    /// The seat's default channel.
    #[serde(default)]
    pub channel: String,
}

/// A tracker project an org-wide seat owns (routing), and the seat's account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrackerSeat {
    /// Project an org-wide seat owns: its notifications that address no
    /// seat go to this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Login, account id or email of the seat's account, for recognizing
    /// assignments and @-mentions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The account's API token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// A wiki space an org-wide seat owns (routing), and the seat's account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WikiSeat {
    /// Space an org-wide seat owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// The seat's account, for recognizing @-mentions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The account's API token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// A seat's account on a tracker or code host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SeatAccount {
    /// Login, username or email of the account, for recognizing assignments
    /// and @-mentions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The account's API token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}
