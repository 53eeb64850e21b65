//! The turn engine: [`TurnEngine::run_turn`] runs one turn of one seat.
//!
//! Parts, in the order a turn meets them:
//! - this file: the engine, its settings, the turn's start (`turn` span,
//!   `task_started`, the depth and time guards) and its end (the outcome and
//!   the closing events);
//! - `sequence.rs`: Plan -> Execute -> Review with self-iteration and the
//!   `stall` and `max_iter` guards;
//! - `fallback.rs`: one phase over the seat's provider chain, in its
//!   `phase` span, and how an error that ends a phase fails the turn;
//! - `phases.rs`: each phase as its own unit (request building, rescue
//!   rounds for the decision tools) returning its own typed result;
//! - `report.rs`: the typed events (`crewlet_core::payload::turn`);
//! - `ctx.rs`: what the turn (`TurnCtx`) and one phase of one iteration
//!   (`PhaseCtx`: the turn, the phase span, the phase, the iteration) carry;
//! - `outcome.rs`: [`TurnOutcome`], [`PhaseRecord`], [`TurnFailure`].

mod ctx;
mod fallback;
mod outcome;
mod phases;
mod report;
mod sequence;
mod subagents;

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crewlet_core::TraceContext;
use crewlet_llm::{LlmRegistry, Usage};
use crewlet_store::TokenLedger;
use tracing::{Instrument, Span};
use uuid::Uuid;

pub use outcome::{FailureReason, GuardKind, PhaseRecord, TurnDecision, TurnFailure, TurnOutcome};

use self::ctx::{TurnCtx, TurnState};
// A token count as a span field (`u64` fields are exported as strings).
use crate::tool_loop::i64_of;
use crate::{
    CompanyProfile, EventSink, NoRecall, Recall, SeatProfile, ToolRegistry, ToolSkills, Trigger,
    UsageSummary, UsageTracker,
};

/// Knobs of the turn engine (`turn_engine` in the company YAML).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnSettings {
    /// Plan -> Execute -> Review passes per turn (`self_iterate` loops).
    pub max_iterations: u32,
    pub plan_round_cap: u32,
    pub execute_round_cap: u32,
    pub review_round_cap: u32,
    /// Extra `tool_choice: required` rounds when Plan or Review ends without
    /// its decision tool.
    pub rescue_rounds: u32,
    /// Deepest delegation a turn may run at.
    pub max_delegation_depth: u32,
    /// Per-turn limit unless the trigger sets its own.
    pub turn_timeout: Duration,
    /// Stream completions (live `agent_turn_progress` text).
    pub stream: bool,
    /// The `source` of every event.
    pub source: String,
    /// How long a budget charge is retried while the database is
    /// unavailable before the turn fails as `store_unavailable`.
    pub store_patience: Duration,
}

impl Default for TurnSettings {
    fn default() -> Self {
        Self {
            max_iterations: 3,
            plan_round_cap: 16,
            execute_round_cap: 20,
            review_round_cap: 8,
            rescue_rounds: 2,
            max_delegation_depth: 3,
            turn_timeout: Duration::from_secs(900),
            stream: false,
            source: "turn".to_owned(),
            store_patience: Duration::from_secs(30),
        }
    }
}

/// Runs turns for the seats of one company.
pub struct TurnEngine {
    company: CompanyProfile,
    llm: LlmRegistry,
    tools: Arc<ToolRegistry>,
    ledger: Arc<dyn TokenLedger>,
    sink: Arc<dyn EventSink>,
    usage: Arc<UsageTracker>,
    recall: Arc<dyn Recall>,
    skills: Arc<ToolSkills>,
    settings: TurnSettings,
    subagents: crate::SubagentSettings,
}

impl std::fmt::Debug for TurnEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnEngine")
            .field("company", &self.company.name)
            .field("llm", &self.llm)
            .field("tools", &self.tools)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl TurnEngine {
    pub fn new(
        company: CompanyProfile,
        llm: LlmRegistry,
        ledger: Arc<dyn TokenLedger>,
        sink: Arc<dyn EventSink>,
    ) -> Self {
        Self {
            company,
            llm,
            tools: Arc::new(ToolRegistry::new()),
            ledger,
            sink,
            usage: Arc::new(UsageTracker::new()),
            recall: Arc::new(NoRecall),
            skills: Arc::new(ToolSkills::new()),
            settings: TurnSettings::default(),
            subagents: crate::SubagentSettings::default(),
        }
    }

    /// The limits of the sub-agents Execute may start.
    pub fn with_subagents(mut self, subagents: crate::SubagentSettings) -> Self {
        self.subagents = subagents;
        self
    }

    /// Where turns find the seat's memory (none by default).
    pub fn with_recall(mut self, recall: Arc<dyn Recall>) -> Self {
        self.recall = recall;
        self
    }

    /// The company's tool skills (none by default); shared, so a re-sync
    /// reaches running engines.
    pub fn with_skills(mut self, skills: Arc<ToolSkills>) -> Self {
        self.skills = skills;
        self
    }

    pub fn skills(&self) -> &Arc<ToolSkills> {
        &self.skills
    }

    pub fn with_tools(mut self, tools: Arc<ToolRegistry>) -> Self {
        self.tools = tools;
        self
    }

    pub fn with_settings(mut self, settings: TurnSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Shares one tracker between engines (e.g. after a config reload).
    pub fn with_usage_tracker(mut self, usage: Arc<UsageTracker>) -> Self {
        self.usage = usage;
        self
    }

    pub fn tools(&self) -> &Arc<ToolRegistry> {
        &self.tools
    }

    /// The company as the turns see it (its budgets and their policy).
    pub fn company(&self) -> &CompanyProfile {
        &self.company
    }

    pub fn settings(&self) -> &TurnSettings {
        &self.settings
    }

    pub fn usage(&self) -> &Arc<UsageTracker> {
        &self.usage
    }

    /// Auxiliary (learning, filtering) calls with this engine's models,
    /// budgets, token totals and event sink.
    pub fn auxiliary(&self) -> crate::Auxiliary {
        crate::Auxiliary {
            company: self.company.clone(),
            llm: self.llm.clone(),
            ledger: self.ledger.clone(),
            sink: self.sink.clone(),
            usage: self.usage.clone(),
            source: self.settings.source.clone(),
            patience: self.settings.store_patience,
        }
    }

    /// Per-agent and engine token totals so far.
    pub fn summary(&self) -> UsageSummary {
        self.usage.summary()
    }

    /// Runs one turn of `seat` for `trigger` to its end. Never panics and
    /// never returns an error: a failed turn is an outcome with `failure` set
    /// and a `task_failed` event.
    ///
    /// The turn runs in a `turn` span (`crewlet_telemetry::turn_span`) that
    /// continues the trigger's trace: when the caller already runs it inside
    /// a span of that trace (e.g. `span_from_event` of the inbox event), the
    /// turn span nests under that span; otherwise its parent is the
    /// trigger's span (`trigger.trace`); with neither, it nests under
    /// whatever span is current, or starts a trace. Each phase runs in a
    /// `phase` span, each completion in an `llm` span, each tool call in a
    /// `tool` span, and every event of the turn carries the ids of the turn
    /// or phase span it was emitted in, so the events and the exported spans
    /// form the same tree. Without a telemetry subscriber the spans are
    /// inert and the events get ids of their own in the same shape (the turn
    /// a child of the trigger, each phase a child of the turn).
    pub async fn run_turn(&self, seat: &SeatProfile, trigger: &Trigger) -> TurnOutcome {
        self.run_turn_journaled(seat, trigger, None).await
    }

    /// [`run_turn`](Self::run_turn) with an effect journal: every model
    /// answer and tool result is recorded before the turn moves on, and
    /// what the journal already holds (a resumed turn, a replay) is read
    /// back instead of asked or run again (see [`crate::journal`]). A
    /// resumed turn keeps the turn id its journal was begun with.
    pub async fn run_turn_journaled(
        &self,
        seat: &SeatProfile,
        trigger: &Trigger,
        journal: Option<&crate::TurnJournal>,
    ) -> TurnOutcome {
        let span = crewlet_telemetry::turn_span(
            &seat.agent_id.to_string(),
            &seat.role_name,
            Some(&trigger.task_id),
        );
        join_trigger_trace(&span, trigger.trace);
        // Every model call of the turn draws its retries from one budget.
        let outcome = crewlet_llm::with_retry_budget(
            crewlet_llm::RETRIES_PER_TURN,
            self.run_in_span(seat, trigger, journal, &span),
        )
        .instrument(span.clone())
        .await;
        span.record("llm_input_tokens", i64_of(outcome.usage.input_tokens));
        span.record("llm_output_tokens", i64_of(outcome.usage.output_tokens));
        span.record(
            "duration_ms",
            i64::try_from(outcome.duration.as_millis()).unwrap_or(i64::MAX),
        );
        outcome
    }

    async fn run_in_span(
        &self,
        seat: &SeatProfile,
        trigger: &Trigger,
        journal: Option<&crate::TurnJournal>,
        turn_span: &Span,
    ) -> TurnOutcome {
        let started = Instant::now();
        let span = crewlet_telemetry::trace_context_of(turn_span).unwrap_or_else(|| {
            trigger
                .trace
                .as_ref()
                .map_or_else(TraceContext::new_root, TraceContext::child)
        });
        let turn_id = journal
            .and_then(crate::TurnJournal::recorded_turn)
            .unwrap_or_else(Uuid::now_v7);
        if let Some(j) = journal {
            j.bind_turn(turn_id);
        }
        let t = TurnCtx {
            seat,
            trigger,
            turn_id,
            journal,
            span,
            state: Mutex::new(TurnState::default()),
            usage: Mutex::new(Usage::default()),
            budget_warnings: Mutex::new(Vec::new()),
        };
        turn_span.record("turn_id", tracing::field::display(t.turn_id));
        self.report_task_started(&t).await;

        let result = if trigger.delegation_depth > self.settings.max_delegation_depth {
            Err(TurnFailure::guard(
                GuardKind::DepthCap,
                format!(
                    "delegation depth {} is over the cap of {}",
                    trigger.delegation_depth, self.settings.max_delegation_depth
                ),
            ))
        } else {
            let limit = trigger.timeout.unwrap_or(self.settings.turn_timeout);
            match tokio::time::timeout(limit, self.drive(&t)).await {
                Ok(r) => r,
                Err(_) => Err(TurnFailure::guard(
                    GuardKind::Timeout,
                    format!("the turn ran past its limit of {} s", limit.as_secs_f64()),
                )),
            }
        };
        self.finish(t, result, started).await
    }

    /// The outcome of the turn, after its closing events:
    /// `turn.guard_breach` (when a guard stopped it), `agent_turn_completed`,
    /// then `task_completed` or `task_failed`.
    async fn finish(
        &self,
        t: TurnCtx<'_>,
        result: Result<TurnDecision, TurnFailure>,
        started: Instant,
    ) -> TurnOutcome {
        let usage = t.usage();
        let state = std::mem::take(&mut *t.state());
        let mut models: Vec<String> = Vec::new();
        for m in state.phases.iter().flat_map(|p| p.models.iter()) {
            if !models.contains(m) {
                models.push(m.clone());
            }
        }
        let (decision, failure) = match result {
            Ok(d) => (d, None),
            Err(f) => (TurnDecision::Failed, Some(f)),
        };
        if let Some(TurnFailure {
            reason: FailureReason::Guard(kind),
            detail,
        }) = &failure
        {
            self.report_guard_breach(&t, *kind, detail, state.iterations)
                .await;
        }
        let duration = started.elapsed();
        let fenced = failure
            .as_ref()
            .is_some_and(|f| f.reason == FailureReason::Fenced);
        let suspended = failure
            .as_ref()
            .is_some_and(|f| matches!(f.reason, FailureReason::Suspended { .. }));
        if fenced {
            // Not ended: the seat's new holder goes on with it.
            tracing::warn!(agent_id = %t.seat.agent_id, task_id = %t.trigger.task_id,
                "the seat moved to another node mid-turn; this node stops the turn and the new holder resumes it");
        } else if suspended {
            // Not ended either: it goes on from its journal when the work
            // that suspended it is done.
            tracing::info!(agent_id = %t.seat.agent_id, task_id = %t.trigger.task_id,
                "the turn is suspended until the work it started outside is done");
        } else {
            self.report_turn_completed(&t, decision, state.iterations, &models, usage, duration)
                .await;
            match &failure {
                None => {
                    self.report_task_completed(&t, decision, &state.final_artifact)
                        .await;
                }
                Some(f) => self.report_task_failed(&t, f).await,
            }
        }
        tracing::info!(
            agent_id = %t.seat.agent_id, role = %t.seat.role_name, task_id = %t.trigger.task_id,
            event = "turn_completed", decision = decision.as_str(),
            llm_input_tokens = usage.input_tokens, llm_output_tokens = usage.output_tokens,
            duration_ms = ms(duration), "turn finished"
        );
        TurnOutcome {
            turn_id: t.turn_id,
            task_id: t.trigger.task_id.clone(),
            decision,
            failure,
            iterations: state.iterations,
            models,
            usage,
            phases: state.phases,
            plan: state.plan,
            review: state.review,
            final_artifact: state.final_artifact,
            duration,
        }
    }
}

/// Joins the turn span to the trigger's trace before it starts (see
/// [`TurnEngine::run_turn`]).
fn join_trigger_trace(span: &Span, trigger: Option<TraceContext>) {
    let Some(parent) = trigger else { return };
    if span.is_disabled() {
        return;
    }
    // The caller already continues the trigger's trace: stay under its span.
    if crewlet_telemetry::current_trace_context().is_some_and(|c| c.trace_id == parent.trace_id) {
        return;
    }
    if let Err(e) = crewlet_telemetry::set_parent_from(span, parent) {
        tracing::debug!(error = %e, "turn span not joined to the trigger's trace");
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
