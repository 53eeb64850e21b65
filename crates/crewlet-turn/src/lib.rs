//! The turn engine: what one agent seat does when a trigger wakes it.
//!
//! A turn is Plan (the model calls `submit_plan`: plan, direct or skip),
//! Execute (a tool loop with the tools the plan needs) and Review (the model
//! calls `submit_review`: done or self_iterate, which loops back to Plan with
//! a ledger of the work so far, at most `max_iterations` times). Every
//! completion is charged to the org and agent budgets through
//! [`crewlet_store::TokenLedger`]; guards (`max_iter`, `stall`, `depth_cap`,
//! `timeout`, `unhandled`) end a turn as failed; every step is an event sent
//! to an [`EventSink`], its payload one of the typed contracts of
//! `crewlet_core::payload::turn`.
//!
//! Owns: [`TurnEngine`], [`run_tool_loop`], the [`Tool`] trait and
//! [`ToolRegistry`], tool-result cleaning ([`sanitize`]), the prompts
//! ([`prompts`]), budgets ([`BudgetGate`]) and in-process token totals
//! ([`UsageTracker`]).
//!
//! Does not own: the queue (the engine adapts [`EventSink`] to it), the
//! per-seat one-turn-at-a-time rule and the global concurrency cap (the seat
//! runtime in `crewlet-engine`), talking to models (`crewlet-llm`), storing
//! budgets (`crewlet-store`), the event payload types (`crewlet-core`).
//!
//! # Layout
//!
//! - `engine/`: the turn.
//!   - `mod.rs`: [`TurnEngine`], [`TurnSettings`], a turn's start (`turn`
//!     span, `task_started`, the depth and time guards) and end (the
//!     [`TurnOutcome`] and the closing events).
//!   - `sequence.rs`: Plan -> Execute -> Review, self-iteration and the
//!     `stall` / `max_iter` guards.
//!   - `phases.rs`: each phase as its own unit returning its own typed
//!     result (Plan a [`Plan`], Execute the execution record, Review a
//!     [`Review`]): its tool-loop request and, for Plan and Review, the
//!     rescue rounds that ask for the decision tool.
//!   - `fallback.rs`: one phase over the seat's provider chain (restart on
//!     the next provider, `llm_unavailable` when none is left) and how an
//!     error that ends a phase fails the turn.
//!   - `report.rs`: building and emitting the typed events.
//!   - `ctx.rs`: `TurnCtx` (what a turn shares across its phases) and
//!     `PhaseCtx` (the turn, the phase span, the phase and the iteration).
//!   - `outcome.rs`: [`TurnOutcome`], [`PhaseRecord`], [`TurnFailure`],
//!     [`FailureReason`], [`GuardKind`], [`TurnDecision`].
//! - `tool_loop/`: the loop every phase runs ([`run_tool_loop`]).
//!   - `mod.rs`: the loop and its types; a [`Terminator`] parses its
//!     tool's arguments once and the loop hands the decision back in
//!     [`LoopOutcome::decision`].
//!   - `complete.rs`: one completion in an `llm` span (streamed when
//!     progress is reported).
//!   - `calls.rs`: which tools a round offers, checking and running one
//!     round's tool calls (`tool` spans, panics caught, results cleaned).
//! - `subagent/`: `spawn_subagent` and `spawn_subagent_batch` (child tool
//!   loops under the Execute phase; see [`subagent`]).
//! - `decisions.rs` (`submit_plan` / `submit_review`), `prompts.rs`,
//!   `budget.rs`, `usage.rs`, `tool.rs`, `registry.rs`, `sanitize.rs`,
//!   `seat.rs`, `events.rs` (sinks), `recall.rs` (the [`Recall`] interface
//!   memory is reached through), `error.rs`.

mod auxiliary;
mod budget;
mod decisions;
mod engine;
mod error;
mod events;
pub mod journal;
pub mod prompts;
mod recall;
mod registry;
pub mod sanitize;
mod seat;
pub mod skills;
pub mod subagent;
mod tool;
mod tool_loop;
mod usage;

pub use auxiliary::{AuxCall, Auxiliary};
pub use budget::{BudgetGate, BudgetLimits, warning_payload};
pub use decisions::{
    Plan, PlanDecision, PlanStep, Review, ReviewDecision, SUBMIT_PLAN, SUBMIT_REVIEW,
    submit_plan_spec, submit_plan_spec_for, submit_review_spec,
};
pub use engine::{
    FailureReason, GuardKind, PhaseRecord, TurnDecision, TurnEngine, TurnFailure, TurnOutcome,
    TurnSettings,
};
pub use error::TurnError;
pub use events::{CountingEventSink, EventSink, MemoryEventSink};
pub use journal::{JournalMode, JournalStats, StepObserver, StepSource, StepView, TurnJournal};
pub use recall::{MemorySection, NoRecall, Recall, RecallRequest};
pub use registry::{ToolRegistry, Visibility};
pub use seat::{Colleague, CompanyProfile, SeatProfile, Trigger};
pub use skills::{CatalogueEntry, SkillTrigger, ToolSkill, ToolSkills};
pub use subagent::{
    SPAWN_SUBAGENT, SPAWN_SUBAGENT_BATCH, SUBAGENT_DENYLIST, SpawnSubagent, SpawnSubagentBatch,
    SubagentSettings,
};
pub use tool::{
    Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput, current_call_id, slim_tool_spec,
    tool_spec, with_call_id,
};
pub use tool_loop::{
    ACTIVATE_TOOL, LIST_MCP_SERVER_TOOLS, LoopEnd, LoopEnv, LoopNotice, LoopOutcome, LoopRequest,
    LoopStats, MAX_CALLS_PER_ROUND, MetaTools, ProgressObserver, Terminator, ToolExecution,
    ToolSelection, run_tool_loop,
};
pub use usage::{AgentTokenUsage, TokenUsage, UsageSummary, UsageTracker};
