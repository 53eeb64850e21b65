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
    /// Display name, e.g. `Chief Technology Officer`.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Unique id of the seat, matching `[a-z0-9][a-z0-9-]*`; derived from
    /// `name` when unset (lower case, other characters become `-`). Part of
    /// the agent id, webhook URLs and queue topics: keep it stable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
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
    /// Roles (by handle or name) or units (by name, meaning the unit's own
    /// roles) this seat manages. Seats nobody manages report to their unit's lead.
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
    /// Learning for this seat; unset follows `learning.enabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_enabled: Option<bool>,
    /// The seat's own credentials for `per_role` MCP servers: environment
    /// variables for stdio servers, headers for HTTP ones. Merged over the
    /// `mcp_env` of the enclosing units.
    #[serde(default)]
    pub mcp_env: IndexMap<String, String>,
    /// `per_role` MCP servers (names from `mcp_servers`) this seat runs.
    #[serde(default)]
    pub mcp_servers: Vec<String>,
    /// Recurring work for this seat (agent seats only).
    #[serde(default)]
    pub schedules: Vec<Schedule>,
    /// The seat's own accounts on outside systems.
    #[serde(default, skip_serializing_if = "RoleIntegrations::is_empty")]
    pub integrations: RoleIntegrations,
    /// How to reach the person in a human seat (required there: at least one
    /// identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contact: Option<Contact>,
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

/// A person's identities.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Contact {
    /// Email address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// Slack member id, e.g. `U01ABCDEF`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack_user_id: Option<String>,
    /// GitHub login.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<String>,
    /// GitLab username.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gitlab: Option<String>,
    /// Plane user id or email.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plane: Option<String>,
    /// Jira account id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jira: Option<String>,
}

impl Contact {
    /// True when at least one identity is set (and not blank).
    pub fn has_identity(&self) -> bool {
        [
            &self.email,
            &self.slack_user_id,
            &self.github,
            &self.gitlab,
            &self.plane,
            &self.jira,
        ]
        .into_iter()
        .any(|v| v.as_deref().is_some_and(|s| !s.trim().is_empty()))
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

    /// Whether learning is on for this seat, given the company switch.
    pub fn learns(&self, company_default: bool) -> bool {
        self.learning_enabled.unwrap_or(company_default)
    }
}
