//! What a turn knows about the company, the seat, and what woke it.
//!
//! These are this crate's own small shapes, filled from the company
//! configuration by whoever builds the engine, so the turn engine does not
//! depend on how the YAML is parsed.

use std::time::Duration;

use crewlet_core::{AgentId, BudgetPeriod, TraceContext};
use crewlet_llm::RoleLlm;
use crewlet_store::UnitCap;

/// The company, as every prompt presents it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompanyProfile {
    pub name: String,
    pub mission: String,
    pub vision: String,
    pub policies: Vec<String>,
    /// Org-wide token budget; 0 = unlimited.
    pub token_budget: u64,
    /// The window every budget counts in (`budget_policy.period`).
    pub budget_period: BudgetPeriod,
    /// The fraction of a cap that publishes `budget_warning`; 0 = none.
    pub budget_warn_at: f64,
}

/// A colleague named in a prompt (manager chain, reports).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Colleague {
    pub name: String,
    pub handle: String,
    /// Human seats are addressed, never spawned.
    pub human: bool,
}

impl Colleague {
    pub fn agent(name: impl Into<String>, handle: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            handle: handle.into(),
            human: false,
        }
    }

    pub fn human(name: impl Into<String>, handle: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            handle: handle.into(),
            human: true,
        }
    }
}

/// One agent seat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeatProfile {
    pub agent_id: AgentId,
    pub handle: String,
    /// The role's `name`, e.g. "Senior Engineer".
    pub role_name: String,
    pub goal: String,
    pub backstory: String,
    pub responsibilities: Vec<String>,
    pub guidelines: Vec<String>,
    /// Direct manager first, then up the chain.
    pub manager_chain: Vec<Colleague>,
    pub reports: Vec<Colleague>,
    /// The org units the seat sits in, outermost first.
    pub unit_path: Vec<String>,
    /// The role's token budget; 0 = unlimited.
    pub token_budget: u64,
    /// The budgets of the units the seat spends from (its own and those
    /// above it that have one).
    pub unit_budgets: Vec<UnitCap>,
    pub llm: RoleLlm,
    /// The sub-agents' model chain (`llm_subagent`); empty: the role's
    /// `llm`, else the company default.
    pub subagent_llm: Vec<String>,
}

impl SeatProfile {
    /// A seat of `company` with the given handle and role name; the rest empty.
    pub fn new(company: &str, handle: impl Into<String>, role_name: impl Into<String>) -> Self {
        let handle = handle.into();
        Self {
            agent_id: AgentId::for_seat(company, &handle),
            handle,
            role_name: role_name.into(),
            goal: String::new(),
            backstory: String::new(),
            responsibilities: Vec::new(),
            guidelines: Vec::new(),
            manager_chain: Vec::new(),
            reports: Vec::new(),
            unit_path: Vec::new(),
            token_budget: 0,
            unit_budgets: Vec::new(),
            llm: RoleLlm::default(),
            subagent_llm: Vec::new(),
        }
    }
}

/// What woke the seat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger {
    /// The task this turn works on; every event of the turn carries it.
    pub task_id: String,
    /// Where it came from: `slack`, `plane`, `schedule`, `colleague`, ...
    pub source: String,
    pub sender: Option<String>,
    pub channel: Option<String>,
    /// The request itself, as the seat should read it.
    pub content: String,
    /// How many delegations deep this work already is (0 = from outside).
    pub delegation_depth: u32,
    /// The seats waiting on this work, first asker first (a colleague's
    /// question carries who asked and who asked them).
    pub delegation_chain: Vec<String>,
    /// The earlier messages of a merged (coalesced) trigger, oldest first:
    /// `(sender, text)`. The learning workers observe every sender, not
    /// only the latest.
    pub earlier: Vec<(Option<String>, String)>,
    /// The span of whatever published the trigger; the turn continues it.
    pub trace: Option<TraceContext>,
    /// Overrides the engine's per-turn timeout (e.g. a schedule's `timeout_seconds`).
    pub timeout: Option<Duration>,
}

impl Trigger {
    pub fn new(
        task_id: impl Into<String>,
        source: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            task_id: task_id.into(),
            source: source.into(),
            sender: None,
            channel: None,
            content: content.into(),
            delegation_depth: 0,
            delegation_chain: Vec::new(),
            earlier: Vec::new(),
            trace: None,
            timeout: None,
        }
    }
}
