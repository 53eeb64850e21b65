//! Connections to the outside world: company-wide blocks, what a unit owns
//! (for routing), and a seat's own accounts.

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
}

/// GitHub.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GithubIntegration {
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
}

fn default_gitlab_url() -> String {
    "https://gitlab.com".into()
}

/// Plane.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlaneIntegration {
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
}

fn default_slack_url() -> String {
    "https://slack.com/api".into()
}

/// What a unit owns on outside systems. Notifications about these that
/// mention no seat go to the unit's lead.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnitIntegrations {
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

/// A seat's own identities on outside systems: an agent acts through them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleIntegrations {
    /// The seat's own Slack app (webhook `/webhooks/slack/{handle}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackSeat>,
    /// The seat's GitHub account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<SeatAccount>,
    /// The seat's GitLab account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitlab: Option<SeatAccount>,
    /// The seat's Plane account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane: Option<SeatAccount>,
    /// The seat's Jira account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jira: Option<SeatAccount>,
    /// The seat's Confluence account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confluence: Option<SeatAccount>,
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
