//! Sub-agents: short-lived workers a seat's Execute phase starts with
//! `spawn_subagent` (one) or `spawn_subagent_batch` (several at once).
//!
//! A sub-agent is a bounded tool loop of its own: a fresh conversation
//! (the parent's brief as its system prompt and task), the parent's tools
//! minus the control denylist and minus tools that write outside the
//! company, its own model chain (`llm_subagent`, else the role's `llm`),
//! a round cap, a wall-clock limit and a token cap that is a fraction of
//! what the seat's budgets have left. Its answer is the tool's result; a
//! sub-agent that runs out of time, tokens or rounds is a failed call that
//! says which. Every completion is charged to the seat like the parent's.
//!
//! The spawn tools are ordinary registry tools; what they need of the
//! running turn (the seat, the models, the budget, the event sink) reaches
//! them through a task-local [`Scope`] the Execute phase sets around its
//! tool loop. A child runs under [`Scope::Child`], so a sub-agent cannot
//! spawn even if a spawn tool were somehow offered to it.
//!
//! Parts: `ledger.rs` caps a child's spending; `run.rs` runs one child and
//! a batch; `tools.rs` has the two tools and their arguments.

mod batch;
mod ledger;
mod run;
#[cfg(test)]
mod tests;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use crewlet_llm::{LlmRegistry, Usage};
use crewlet_store::{BudgetWarning, TokenLedger};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::{CompanyProfile, EventSink, SeatProfile, ToolRegistry, ToolSkills, UsageTracker};

pub use run::{ChildOutcome, ChildResult};
pub use tools::{SpawnSubagent, SpawnSubagentBatch, spawn_tools};

/// The tool that starts one sub-agent.
pub const SPAWN_SUBAGENT: &str = "spawn_subagent";
/// The tool that starts several sub-agents at once.
pub const SPAWN_SUBAGENT_BATCH: &str = "spawn_subagent_batch";

/// Tools a sub-agent never gets, whatever the parent names: starting more
/// workers, suspending the turn for a sandbox run, growing its own tool
/// list, and talking to colleagues (a sub-agent works for its parent only).
pub const SUBAGENT_DENYLIST: &[&str] = &[
    SPAWN_SUBAGENT,
    SPAWN_SUBAGENT_BATCH,
    "run_sandbox",
    crate::ACTIVATE_TOOL,
    crate::LIST_MCP_SERVER_TOOLS,
    "a2a_ask",
    "request_a2a_channel",
    "send_a2a_message",
    "close_a2a_channel",
];

/// The `turn_engine.subagent_*` knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct SubagentSettings {
    /// Most tool-loop rounds of one sub-agent; a request for more is clamped.
    pub max_turns: u32,
    /// Wall-clock limit of one sub-agent.
    pub timeout: Duration,
    /// Share of the seat's remaining budget one call may spend (a batch
    /// splits it between its children). Outside (0, 1]: no cap.
    pub budget_fraction: f64,
    /// Children of a batch running at once.
    pub max_parallel: usize,
    /// Wall-clock limit of a whole batch.
    pub batch_timeout: Duration,
    /// Fewest tokens a child of a batch may be given; children that would
    /// get less are refused.
    pub min_per_child_tokens: u64,
}

impl Default for SubagentSettings {
    fn default() -> Self {
        Self {
            max_turns: 20,
            timeout: Duration::from_secs(120),
            budget_fraction: 0.2,
            max_parallel: 3,
            batch_timeout: Duration::from_secs(120),
            min_per_child_tokens: 500,
        }
    }
}

/// What a spawn call reaches of the turn that makes it.
pub(crate) struct Host {
    pub company: CompanyProfile,
    pub llm: LlmRegistry,
    pub tools: Arc<ToolRegistry>,
    pub ledger: Arc<dyn TokenLedger>,
    pub sink: Arc<dyn EventSink>,
    pub tracker: Arc<UsageTracker>,
    pub skills: Arc<ToolSkills>,
    pub settings: SubagentSettings,
    /// The `source` of the events.
    pub source: String,
    pub patience: Duration,
    pub stream: bool,
    pub seat: SeatProfile,
    pub task_id: String,
    pub channel: Option<String>,
    pub sender: Option<String>,
    pub delegation_depth: u32,
    pub turn_id: Uuid,
    pub iteration: u32,
    /// What the children spent; the turn adds it to its total.
    pub spent: Mutex<Usage>,
    /// Budget warnings the children's charges claimed; the turn reports them.
    pub warnings: Mutex<Vec<BudgetWarning>>,
}

/// Where a spawn tool runs.
#[derive(Clone)]
pub(crate) enum Scope {
    /// In a parent's Execute phase.
    Parent(Arc<Host>),
    /// Inside a sub-agent: no further spawning.
    Child,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// Runs `fut` (a parent's Execute loop) with `host` reachable by the spawn
/// tools.
pub(crate) async fn with_host<F: std::future::Future>(host: Arc<Host>, fut: F) -> F::Output {
    SCOPE.scope(Scope::Parent(host), fut).await
}

/// The scope the current task runs in, if any.
fn current_scope() -> Option<Scope> {
    SCOPE.try_with(Clone::clone).ok()
}

/// Runs `fut` (a child's loop) where spawning is refused.
async fn as_child<F: std::future::Future>(fut: F) -> F::Output {
    SCOPE.scope(Scope::Child, fut).await
}
