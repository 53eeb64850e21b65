//! The turn engine: what one agent seat does when a trigger wakes it.
//!
//! A turn is Plan (the model calls `submit_plan`: plan, direct or skip),
//! Execute (a tool loop with the tools the plan needs) and Review (the model
//! calls `submit_review`: done or self_iterate, which loops back to Plan with
//! a ledger of the work so far, at most `max_iterations` times). Every
//! completion is charged to the org and agent budgets through
//! [`crewlet_store::TokenLedger`]; guards (`max_iter`, `stall`, `depth_cap`,
//! `timeout`, `unhandled`) end a turn as failed; every step is an event sent
//! to an [`EventSink`].
//!
//! Owns: [`TurnEngine`], [`run_tool_loop`], the [`Tool`] trait and
//! [`ToolRegistry`], tool-result cleaning ([`sanitize`]), the prompts
//! ([`prompts`]), budgets ([`BudgetGate`]) and in-process token totals
//! ([`UsageTracker`]).
//!
//! Does not own: the queue (the engine adapts [`EventSink`] to it), the
//! per-seat one-turn-at-a-time rule and the global concurrency cap (the seat
//! runtime in `crewlet-engine`), talking to models (`crewlet-llm`), storing
//! budgets (`crewlet-store`).

mod budget;
mod decisions;
mod engine;
mod error;
mod events;
pub mod prompts;
mod registry;
pub mod sanitize;
mod seat;
mod tool;
mod tool_loop;
mod usage;

pub use budget::{BudgetGate, BudgetLimits};
pub use decisions::{
    Plan, PlanDecision, PlanStep, Review, ReviewDecision, SUBMIT_PLAN, SUBMIT_REVIEW,
    submit_plan_spec, submit_review_spec,
};
pub use engine::{
    FailureReason, GuardKind, PhaseRecord, TurnDecision, TurnEngine, TurnFailure, TurnOutcome,
    TurnSettings,
};
pub use error::TurnError;
pub use events::{CountingEventSink, EventSink, MemoryEventSink};
pub use registry::{ToolRegistry, Visibility};
pub use seat::{Colleague, CompanyProfile, SeatProfile, Trigger};
pub use tool::{
    Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput, slim_tool_spec, tool_spec,
};
pub use tool_loop::{
    LoopEnd, LoopEnv, LoopOutcome, LoopRequest, LoopStats, MAX_CALLS_PER_ROUND, ProgressObserver,
    Terminator, ToolExecution, ToolSelection, run_tool_loop,
};
pub use usage::{AgentTokenUsage, TokenUsage, UsageSummary, UsageTracker};
