//! Tier B: the company YAML (founder-owned, imported as a versioned revision).

mod integrations;
mod llm;
mod mcp;
mod role;
mod schedule;
mod unit;
pub(crate) mod validate;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use integrations::{
    ConfluenceIntegration, GithubIntegration, GitlabIntegration, Integrations, JiraIntegration,
    PlaneIntegration, RoleIntegrations, SeatAccount, SlackIntegration, SlackSeat, UnitIntegrations,
};
pub use llm::{
    EmbeddingsKind, EmbeddingsProvider, LlmChoice, LlmKind, LlmPhases, LlmProvider, LlmSpec, Phase,
};
pub use mcp::{McpScope, McpServer, McpTransport};
pub use role::{Contact, Role, SeatKind};
pub use schedule::{Schedule, ScheduleTarget};
pub use unit::Unit;

/// A company: its purpose, its models and tools, and its org chart of units
/// and seats. One file per company; `name` is the only required key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Crewlet company")]
pub struct Company {
    /// The company's name. Every agent id is derived from it and the seat's
    /// handle, so renaming the company gives every seat a new id.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Why the company exists; shown to every agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mission: Option<String>,
    /// Where the company is going; shown to every agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<String>,
    /// Rules every agent follows, one sentence each.
    #[serde(default)]
    pub policies: Vec<String>,
    /// Models the seats may use.
    #[serde(default)]
    pub providers: CompanyProviders,
    /// Tokens the whole company may spend, over its lifetime; 0 = unlimited.
    #[serde(default)]
    pub token_budget: u64,
    /// Limits of the Plan -> Execute -> Review loop.
    #[serde(default)]
    pub turn_engine: TurnEngine,
    /// What agents remember between turns.
    #[serde(default)]
    pub learning: Learning,
    /// The scheduler that fires `schedules`.
    #[serde(default)]
    pub scheduling: Scheduling,
    /// MCP tool servers by name. `shared` servers serve every agent seat;
    /// `per_role` servers start once per role that lists them in its
    /// `mcp_servers`, with that role's `mcp_env`.
    #[serde(default)]
    pub mcp_servers: IndexMap<String, McpServer>,
    /// Company-wide connections to trackers, code hosts and wikis: webhook
    /// secrets and what the outbound clients need.
    #[serde(default)]
    pub integrations: Integrations,
    /// Org-wide seats that belong to no unit (founder, CEO, ...).
    #[serde(default)]
    pub roles: Vec<Role>,
    /// The org chart: units nest to any depth through `children`.
    #[serde(default)]
    pub units: Vec<Unit>,
}

/// The company's model providers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompanyProviders {
    /// Chat models by name. Seats refer to these names in `llm`; the first
    /// entry (or the one named `default`) is used when a seat names none.
    #[serde(default)]
    pub llm: IndexMap<String, LlmProvider>,
    /// The embedding model used by learning (diary, episodes, skills).
    /// Without one, learning degrades to recency and the engine still runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<EmbeddingsProvider>,
}

/// Limits of one turn and of the engine as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TurnEngine {
    /// Plan -> Execute -> Review passes per turn; more trips the `max_iter` guard.
    #[schemars(range(min = 1))]
    pub max_iterations: u32,
    /// Tool-loop rounds allowed while planning.
    #[schemars(range(min = 1))]
    pub plan_max_rounds: u32,
    /// Extra rounds with `tool_choice: required` when the model does not call
    /// `submit_plan`; after them the turn is skipped.
    pub plan_rescue_rounds: u32,
    /// Tool-loop rounds allowed while executing.
    #[schemars(range(min = 1))]
    pub execute_max_rounds: u32,
    /// Wall-clock limit of one turn; past it the `timeout` guard fires.
    #[schemars(range(min = 1))]
    pub turn_timeout_seconds: u64,
    /// Turns running at once across all seats (each seat runs one at a time).
    #[schemars(range(min = 1))]
    pub max_concurrent_turns: u32,
    /// How deep delegation between seats may nest before the `depth_cap` guard fires.
    #[schemars(range(min = 1))]
    pub delegation_depth_cap: u32,
}

impl Default for TurnEngine {
    fn default() -> Self {
        Self {
            max_iterations: 3,
            plan_max_rounds: 16,
            plan_rescue_rounds: 2,
            execute_max_rounds: 20,
            turn_timeout_seconds: 900,
            max_concurrent_turns: 10,
            delegation_depth_cap: 3,
        }
    }
}

/// Agent memory and self-improvement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Learning {
    /// Learning for every agent seat; a role's `learning_enabled` overrides it.
    pub enabled: bool,
    /// Diary entries frozen into the Plan prompt after filtering.
    pub diary_prefetch_entries: u32,
    /// Size of the diary digest given to Plan, in characters.
    pub diary_digest_chars: u32,
    /// How long a short-term diary entry lives, in days.
    pub diary_short_ttl_days: u32,
    /// Similar past turns summarized into the Plan prompt.
    pub episode_recall: u32,
    /// Raw episodes per agent before older ones are compacted.
    pub episode_compaction_threshold: u32,
    /// Tool calls a turn needs before a skill may be synthesized from it.
    pub skill_min_tool_calls: u32,
    /// Synthesized skills kept per agent.
    pub max_skills_per_agent: u32,
    /// Jaccard similarity at or above which a new skill is a duplicate.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub skill_duplicate_similarity: f64,
    /// Versions kept per synthesized skill.
    pub skill_versions_kept: u32,
}

impl Default for Learning {
    fn default() -> Self {
        Self {
            enabled: true,
            diary_prefetch_entries: 8,
            diary_digest_chars: 1500,
            diary_short_ttl_days: 30,
            episode_recall: 3,
            episode_compaction_threshold: 500,
            skill_min_tool_calls: 5,
            max_skills_per_agent: 50,
            skill_duplicate_similarity: 0.7,
            skill_versions_kept: 10,
        }
    }
}

/// The scheduler.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Scheduling {
    /// Fire schedules at all; `false` keeps them defined but silent.
    pub enabled: bool,
    /// How often the scheduler looks for due schedules.
    #[schemars(range(min = 1))]
    pub tick_seconds: u32,
}

impl Default for Scheduling {
    fn default() -> Self {
        Self {
            enabled: true,
            tick_seconds: 10,
        }
    }
}

impl Company {
    /// The provider chain a role uses in `phase`:
    /// `llm_<phase>` -> `llm` (per-phase map: the phase, then `default`) ->
    /// the provider named `default` -> the first provider.
    /// Names are returned as written; validation guarantees they exist.
    pub fn llm_chain<'a>(&'a self, role: &'a Role, phase: Phase) -> Vec<&'a str> {
        if let Some(chain) = role.llm_for_phase(phase) {
            return chain;
        }
        if self.providers.llm.contains_key("default") {
            return vec!["default"];
        }
        self.providers
            .llm
            .keys()
            .take(1)
            .map(String::as_str)
            .collect()
    }
}
