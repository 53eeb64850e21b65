//! Tier B: the company YAML (founder-owned, imported as a versioned revision).

mod budget;
pub mod cli_agent;
mod integrations;
pub mod later;
mod learning;
mod llm;
mod mcp;
mod role;
mod rules;
mod sandbox_check;
mod schedule;
mod unit;
pub(crate) mod validate;

use std::borrow::Cow;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use budget::{BudgetPeriod, BudgetPolicy};
pub use integrations::{
    ConfluenceIntegration, GithubIntegration, GitlabIntegration, Integrations, JiraIntegration,
    MattermostIntegration, MattermostProvisioning, MattermostSeat, PlaneIntegration,
    ProjectIdentity, RoleIntegrations, SeatAccount, SlackIntegration, SlackSeat, SpaceIdentity,
    StatusPhrases, TrackerSeat, UnitIntegrations, WikiSeat, WorkingStatus,
};
pub use learning::Learning;
pub use llm::{
    DEFAULT_EMBEDDING_DIMENSIONS, EmbeddingsKind, EmbeddingsProvider, LOCAL_EMBEDDING_DIMENSIONS,
    LlmChoice, LlmKind, LlmPhases, LlmProvider, LlmSpec, LocalRun, Phase,
};
pub use mcp::{McpServer, McpTransport};
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
    /// Read scope of the knowledge search (`## Relevant knowledge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knowledge: Option<later::Knowledge>,
    /// Values substituted for `${name}` in tool-skill titles, summaries and
    /// bodies (keys are identifiers: letters, digits, `_`; values may use
    /// `${ENV}`; an empty value is dropped). Do not put secrets here: skill
    /// text reaches prompts and events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill_variables: Option<IndexMap<String, String>>,
    /// Models the seats may use.
    #[serde(default)]
    pub providers: CompanyProviders,
    /// Tokens the whole company may spend (in each `budget_policy.period`,
    /// or until reset); 0 = unlimited.
    #[serde(default)]
    pub token_budget: u64,
    /// How the token budgets count (a period that starts over on its own)
    /// and when they warn.
    #[serde(default, skip_serializing_if = "is_default_policy")]
    pub budget_policy: BudgetPolicy,
    /// Limits of the Plan -> Execute -> Review loop.
    #[serde(default)]
    pub turn_engine: TurnEngine,
    /// What agents remember between turns.
    #[serde(default)]
    pub learning: Learning,
    /// The scheduler that fires `schedules`.
    #[serde(default)]
    pub scheduling: Scheduling,
    /// MCP tool servers, each with a unique `name`. `shared: true` servers
    /// serve every agent seat; `shared: false` servers start once for each
    /// agent seat with an `mcp_env.<name>` entry (its own or its unit's).
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
    /// A safety valve against webhook storms and notification loops: at
    /// most this many notifications per seat per second reach its inbox
    /// (counted by each engine process); the rest are skipped and counted.
    /// 0 or unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notification_rate_limit: Option<u64>,
    /// Seconds a seat's inbox lingers after the first waiting task to take
    /// more of the burst into the same batch (0: no added latency; what
    /// waited during a turn is still merged per conversation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 60.0))]
    pub notification_coalesce_window_seconds: Option<f64>,
    /// Most inbox tasks in one batch, and so in one merged task (default 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub notification_coalesce_max_batch: Option<u32>,
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
    /// Python extensions of the original engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "extensions are not supported"))]
    pub extensions: Option<Vec<serde_json::Map<String, serde_json::Value>>>,
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
    /// Without one, learning is off (agents start every turn without memory)
    /// and the engine still runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<EmbeddingsProvider>,
    /// The code-sandbox provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<later::SandboxProvider>,
}

/// Limits of one turn and of the engine as a whole. The original engine's
/// names and defaults, plus Crewlet's own (`plan_rescue_rounds`,
/// `turn_timeout_seconds`, `max_concurrent_turns`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TurnEngine {
    /// Plan -> Execute -> Review passes per turn; more trips the `max_iter` guard.
    #[schemars(range(min = 1))]
    pub max_iterations: u32,
    /// Tool-loop rounds allowed while executing.
    #[schemars(range(min = 1))]
    pub max_tool_rounds: u32,
    /// Tool-loop rounds allowed while planning.
    #[schemars(range(min = 1))]
    pub plan_max_tool_rounds: u32,
    /// How deep delegation between seats may nest before the `depth_cap` guard fires.
    #[schemars(range(min = 1))]
    pub delegation_depth_limit: u32,
    /// Crewlet: extra rounds with `tool_choice: required` when the model does
    /// not call `submit_plan`; after them the turn is skipped.
    pub plan_rescue_rounds: u32,
    /// Crewlet: wall-clock limit of one turn; past it the `timeout` guard fires.
    #[schemars(range(min = 1))]
    pub turn_timeout_seconds: u64,
    /// Crewlet: turns running at once across all seats (each seat runs one at a time).
    #[schemars(range(min = 1))]
    pub max_concurrent_turns: u32,
    /// Tool-loop rounds of a seat's onboarding turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "onboarding turns are not built yet"))]
    pub onboarding_max_tool_rounds: Option<u32>,
    /// Most tool-loop rounds of one sub-agent (`spawn_subagent`); a
    /// sub-agent asking for more is held to this. Unset: 20.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub subagent_max_turns: Option<u32>,
    /// Seconds one sub-agent may run before it is stopped as timed out.
    /// Unset: 120.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001))]
    pub subagent_timeout_seconds: Option<f64>,
    /// Share of the seat's remaining token budget one spawn call may spend
    /// (a batch splits it between its children); no cap when the seat's
    /// budgets have none. Unset: 0.2.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub subagent_budget_fraction: Option<f64>,
    /// Sub-agents of one batch running at once (1 to 10). Unset: 3.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub subagent_max_parallel: Option<u32>,
    /// Seconds a whole batch of sub-agents may run; children still running
    /// then are stopped as timed out, finished ones keep their answers.
    /// Unset: 120.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.001))]
    pub subagent_batch_timeout_seconds: Option<f64>,
    /// Fewest tokens a child of a batch may be given; children whose split
    /// of the batch's share would be less are refused. Unset: 500.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subagent_min_per_child_tokens: Option<u32>,
    /// Tools Execute always offers, whatever Plan chose.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "Execute offers the tools Plan chose plus the built-ins"))]
    pub executor_always_on_tools: Option<Vec<String>>,
    /// Let a busy tool loop ask for more rounds, up to the ceilings below.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = EXTENSION))]
    pub extension_enabled: Option<bool>,
    /// Most Plan rounds with extensions.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = EXTENSION))]
    pub plan_max_tool_rounds_ceiling: Option<u32>,
    /// Most Execute rounds with extensions.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = EXTENSION))]
    pub execute_max_tool_rounds_ceiling: Option<u32>,
    /// Most onboarding rounds with extensions.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = EXTENSION))]
    pub onboarding_max_tool_rounds_ceiling: Option<u32>,
    /// Rounds one extension adds.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = EXTENSION))]
    pub extension_round_step: Option<u32>,
    /// Share of the turn's budget a sandbox run may spend.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "the code sandbox is not built yet"))]
    pub sandbox_budget_fraction: Option<f64>,
    /// Fewest tokens a sandbox run is given.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "the code sandbox is not built yet"))]
    pub sandbox_min_budget_tokens: Option<u32>,
}

const EXTENSION: &str =
    "round extensions are not built yet: the limits are max_tool_rounds and plan_max_tool_rounds";

impl Default for TurnEngine {
    fn default() -> Self {
        Self {
            max_iterations: 3,
            max_tool_rounds: 20,
            plan_max_tool_rounds: 16,
            delegation_depth_limit: 3,
            plan_rescue_rounds: 2,
            turn_timeout_seconds: 900,
            max_concurrent_turns: 10,
            onboarding_max_tool_rounds: None,
            subagent_max_turns: None,
            subagent_timeout_seconds: None,
            subagent_budget_fraction: None,
            subagent_max_parallel: None,
            subagent_batch_timeout_seconds: None,
            subagent_min_per_child_tokens: None,
            executor_always_on_tools: None,
            extension_enabled: None,
            plan_max_tool_rounds_ceiling: None,
            execute_max_tool_rounds_ceiling: None,
            onboarding_max_tool_rounds_ceiling: None,
            extension_round_step: None,
            sandbox_budget_fraction: None,
            sandbox_min_budget_tokens: None,
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
    /// Time zone of schedules that name none.
    pub default_timezone: String,
    /// Random delay of up to this many seconds added to each fire.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "fires are not jittered yet"))]
    pub jitter_seconds: Option<u32>,
    /// Shortest catch-up window after downtime.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = CATCHUP))]
    pub catchup_min_seconds: Option<u32>,
    /// Longest catch-up window after downtime.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = CATCHUP))]
    pub catchup_max_seconds: Option<u32>,
}

const CATCHUP: &str = "missed runs are not caught up yet";

impl Default for Scheduling {
    fn default() -> Self {
        Self {
            enabled: true,
            tick_seconds: 10,
            default_timezone: "UTC".into(),
            jitter_seconds: None,
            catchup_min_seconds: None,
            catchup_max_seconds: None,
        }
    }
}

impl Company {
    /// The providers seats choose from: `providers.llm`, or, when it is
    /// empty, one provider named `default` of type `openai` with every
    /// default (model `gpt-4o`, key from `OPENAI_API_KEY`), as the original
    /// engine does.
    pub fn llm_providers(&self) -> Cow<'_, IndexMap<String, LlmProvider>> {
        if self.providers.llm.is_empty() {
            let mut fallback = IndexMap::new();
            fallback.insert(
                DEFAULT_PROVIDER.to_owned(),
                LlmProvider::with_defaults(LlmKind::Openai),
            );
            Cow::Owned(fallback)
        } else {
            Cow::Borrowed(&self.providers.llm)
        }
    }

    /// The provider chain a role uses in `phase`: the names of `llm_<phase>`
    /// (else of `llm`; per-phase map: the phase, then `default`) that are
    /// defined, in order; when none is, the provider named `default`, else
    /// the first provider. Names that are not defined are left out (the
    /// validator warns about them).
    pub fn llm_chain(&self, role: &Role, phase: Phase) -> Vec<String> {
        let providers = self.llm_providers();
        let mut chain: Vec<String> = Vec::new();
        for name in role.llm_for_phase(phase).unwrap_or_default() {
            if providers.contains_key(name) && !chain.iter().any(|c| c == name) {
                chain.push(name.to_owned());
            }
        }
        if chain.is_empty() {
            if providers.contains_key(DEFAULT_PROVIDER) {
                chain.push(DEFAULT_PROVIDER.to_owned());
            } else if let Some(first) = providers.keys().next() {
                chain.push(first.clone());
            }
        }
        chain
    }

    /// The MCP server named `name`.
    pub fn mcp_server(&self, name: &str) -> Option<&McpServer> {
        self.mcp_servers.iter().find(|s| s.name == name)
    }

    /// The time zone `schedule` is read in: its own, else
    /// `scheduling.default_timezone`.
    pub fn schedule_timezone<'a>(&'a self, schedule: &'a Schedule) -> &'a str {
        if schedule.timezone.trim().is_empty() {
            &self.scheduling.default_timezone
        } else {
            &schedule.timezone
        }
    }
}

/// The provider a seat uses when it names none.
pub const DEFAULT_PROVIDER: &str = "default";

fn is_default_policy(p: &BudgetPolicy) -> bool {
    *p == BudgetPolicy::default()
}
