//! A seat in the org chart: an agent run by a model, or a human.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::integrations::RoleIntegrations;
use super::llm::{LlmChoice, LlmSpec, Phase};
use super::schedule::Schedule;

/// A seat. Agent seats run turns; human seats are addressable (manager
/// chains, escalation, leads) but never run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Role {
    /// Who fills the seat.
    #[serde(default)]
    pub kind: SeatKind,
    /// Display name, e.g. `Chief Technology Officer`. `manages` and unit
    /// `lead`s refer to seats by name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Unique id of the seat, matching `[a-z0-9][a-z0-9-]*`; derived from
    /// `name` when unset or empty (lower case, other characters become `-`).
    /// Part of the agent id, webhook URLs and queue topics: keep it stable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// An org-wide role's home unit (by name): the role is placed among that
    /// unit's `roles`, inheriting its `mcp_env` and lead. A name no unit has
    /// leaves the role org-wide, with a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Email address of the seat: notifications that name it (an assignee,
    /// a mention) reach the seat, on every source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// Human seats: when the person is around, in words (for rosters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "rosters do not show availability yet"))]
    pub availability: Option<String>,
    /// What the seat is for, in one sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// Background that shapes how the agent works.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backstory: Option<String>,
    /// What the seat is accountable for.
    #[serde(default)]
    pub responsibilities: Vec<String>,
    /// How the agent should behave.
    #[serde(default)]
    pub behavioral_guidelines: Vec<String>,
    /// Roles (by name, or handle) or units (by name: every role of the unit
    /// and of its sub-units) this seat manages. A seat may have several
    /// managers; its manager is the first of them in file order (org-wide
    /// roles first, then unit by unit). A unit's lead manages the unit's own
    /// roles that no role of the unit manages.
    #[serde(default)]
    pub manages: Vec<String>,
    /// Tokens this seat may spend over its lifetime; 0 = unlimited.
    #[serde(default)]
    pub token_budget: u64,
    /// The seat's model: a provider name, a fallback chain `[a, b]`, or a map
    /// per phase (`plan`, `execute`, `review`, `auxiliary`, `default`).
    /// Unset: the provider named `default`, else the first provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmSpec>,
    /// Model for Plan; overrides `llm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_plan: Option<LlmChoice>,
    /// Model for Execute; overrides `llm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_execute: Option<LlmChoice>,
    /// Model for Review; overrides `llm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_review: Option<LlmChoice>,
    /// Cheaper model for side work (diary filtering, reflection); overrides `llm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_auxiliary: Option<LlmChoice>,
    /// Model for sub-agents (`spawn_subagent`); overrides `llm`. Unset: the
    /// `subagent` key of an `llm` map, else `llm` (its `default` key for a
    /// map), else the company default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_subagent: Option<LlmChoice>,
    /// Model for judging work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "there is no judge phase yet"))]
    pub llm_judge: Option<LlmChoice>,
    /// Model whose credentials the seat's coding agent gets in its
    /// sandbox; unset: the first of the seat's Execute chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm_sandbox: Option<LlmChoice>,
    /// Learning for this seat; unset follows `learning.enabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_enabled: Option<bool>,
    /// The seat's own credentials per MCP server (`mcp_env.<server>.<NAME>`):
    /// environment variables for stdio servers, headers for http ones. A
    /// seat with an entry for a `shared: false` server gets its own instance
    /// of it. Merged over the `mcp_env` of the seat's unit (the seat's value
    /// wins, server by server and name by name).
    #[serde(default)]
    pub mcp_env: IndexMap<String, IndexMap<String, String>>,
    /// Crewlet addition: `shared: false` MCP servers this seat runs even
    /// without an `mcp_env` entry for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<String>,
    /// The seat's code sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Box<super::later::RoleSandbox>>,
    /// Which nodes of a fleet may run the seat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Box<super::later::Placement>>,
    /// Recurring work for this seat (agent seats only).
    #[serde(default)]
    pub schedules: Vec<Schedule>,
    /// The seat's own accounts on outside systems.
    #[serde(default, skip_serializing_if = "RoleIntegrations::is_empty")]
    pub integrations: RoleIntegrations,
    /// How to reach the person in a human seat (required there: at least one
    /// identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contact: Option<Box<Contact>>,
}

/// Who fills a seat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SeatKind {
    /// An LLM agent: runs turns.
    #[default]
    Agent,
    /// A person: addressable, never run.
    Human,
}

/// A person's identities. Each value is a literal id or exactly one
/// whole-value `${VAR}` reference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Contact {
    /// Slack member id, e.g. `U01ABCDEF`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack_user_id: Option<String>,
    /// Mattermost username.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mattermost_user_id: Option<String>,
    /// Atlassian account id (Jira and Confluence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atlassian_account_id: Option<String>,
    /// GitHub login (compared without case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github_login: Option<String>,
    /// GitLab username (compared without case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitlab_username: Option<String>,
    /// Plane user id (compared without case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane_user_id: Option<String>,
    /// Crewlet addition: email address, matched on every source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

impl Contact {
    /// The identities as `(key, value)`, blank ones left out.
    pub fn entries(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("slack_user_id", &self.slack_user_id),
            ("mattermost_user_id", &self.mattermost_user_id),
            ("atlassian_account_id", &self.atlassian_account_id),
            ("github_login", &self.github_login),
            ("gitlab_username", &self.gitlab_username),
            ("plane_user_id", &self.plane_user_id),
            ("email", &self.email),
        ]
        .into_iter()
        .filter_map(|(k, v)| {
            v.as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(|v| (k, v))
        })
    }

    /// True when at least one identity is set (and not blank).
    pub fn has_identity(&self) -> bool {
        self.entries().next().is_some()
    }
}

impl Role {
    /// The per-phase override field (`llm_plan`, ...) for `phase`.
    pub fn llm_override(&self, phase: Phase) -> Option<&LlmChoice> {
        match phase {
            Phase::Plan => self.llm_plan.as_ref(),
            Phase::Execute => self.llm_execute.as_ref(),
            Phase::Review => self.llm_review.as_ref(),
            Phase::Auxiliary => self.llm_auxiliary.as_ref(),
        }
    }

    /// The role's own choice for `phase` (`llm_<phase>`, then `llm`), or
    /// `None` when the company default applies.
    pub fn llm_for_phase(&self, phase: Phase) -> Option<Vec<&str>> {
        if let Some(choice) = self.llm_override(phase) {
            return Some(choice.names());
        }
        self.llm.as_ref().and_then(|spec| spec.for_phase(phase))
    }

    /// The handle as written, `None` when unset or empty (then derived).
    pub fn explicit_handle(&self) -> Option<&str> {
        self.handle.as_deref().filter(|h| !h.is_empty())
    }

    /// Whether learning is on for this seat, given the company switch.
    pub fn learns(&self, company_default: bool) -> bool {
        self.learning_enabled.unwrap_or(company_default)
    }
}
