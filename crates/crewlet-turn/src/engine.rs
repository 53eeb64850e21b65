//! The turn: Plan -> Execute -> Review, with self-iteration, fallback
//! chains, budgets, guards and the events that tell the world about it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_llm::{LlmError, LlmProvider, LlmRegistry, Message, Phase, ToolChoice, Usage};
use crewlet_store::{BudgetRefusal, BudgetType, TokenLedger};
use serde::Serialize;
use serde_json::{Value, json};
use tracing::{Instrument, Span};
use uuid::Uuid;

use crate::decisions::{SUBMIT_PLAN, SUBMIT_REVIEW, submit_plan_spec, submit_review_spec};
use crate::prompts::{self, ExecutionRecord, PhaseBrief, PriorIteration};
use crate::tool::first_sentence;
use crate::tool_loop::{
    LoopEnd, LoopEnv, LoopRequest, LoopStats, ProgressObserver, Terminator, ToolExecution,
    ToolSelection, run_tool_loop,
};
use crate::{
    BudgetGate, BudgetLimits, CompanyProfile, EventSink, Plan, PlanDecision, Review,
    ReviewDecision, SeatProfile, ToolContext, ToolRegistry, Trigger, TurnError, UsageSummary,
    UsageTracker,
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

/// Why a guard stopped a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardKind {
    /// Review asked for another pass after the last allowed one.
    MaxIter,
    /// Two `self_iterate` reviews in a row with the same artifact.
    Stall,
    /// The trigger is delegated deeper than allowed.
    DepthCap,
    /// The turn ran past its time limit.
    Timeout,
    /// An error the turn cannot handle (a tool panicked, the ledger refused
    /// a charge as malformed).
    Unhandled,
}

impl GuardKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            GuardKind::MaxIter => "max_iter",
            GuardKind::Stall => "stall",
            GuardKind::DepthCap => "depth_cap",
            GuardKind::Timeout => "timeout",
            GuardKind::Unhandled => "unhandled",
        }
    }
}

/// Why a turn failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureReason {
    Guard(GuardKind),
    BudgetExhausted(BudgetRefusal),
    LlmUnavailable {
        phase: Phase,
    },
    /// The database stayed unavailable (a budget charge could not be
    /// recorded): the work is not done and should be retried later.
    StoreUnavailable,
}

impl FailureReason {
    /// The `reason` of `task_failed`: `budget_exhausted`, `llm_unavailable`,
    /// or the guard's kind.
    pub fn code(&self) -> &'static str {
        match self {
            FailureReason::Guard(kind) => kind.as_str(),
            FailureReason::BudgetExhausted(_) => "budget_exhausted",
            FailureReason::LlmUnavailable { .. } => "llm_unavailable",
            FailureReason::StoreUnavailable => "store_unavailable",
        }
    }

    /// Whether the task should run again later rather than count as failed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, FailureReason::StoreUnavailable)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnFailure {
    pub reason: FailureReason,
    pub detail: String,
}

impl TurnFailure {
    fn guard(kind: GuardKind, detail: impl Into<String>) -> Self {
        Self {
            reason: FailureReason::Guard(kind),
            detail: detail.into(),
        }
    }
}

/// How a turn ended, as `agent_turn_completed.decision` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnDecision {
    Done,
    Direct,
    Skip,
    Failed,
}

impl TurnDecision {
    pub fn as_str(&self) -> &'static str {
        match self {
            TurnDecision::Done => "done",
            TurnDecision::Direct => "direct",
            TurnDecision::Skip => "skip",
            TurnDecision::Failed => "failed",
        }
    }
}

/// One phase of one iteration, across its fallback attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseRecord {
    pub phase: Phase,
    pub iteration: u32,
    /// The provider entry that finished the phase (or failed last).
    pub provider: String,
    /// The model that answered last (the provider's configured model if none did).
    pub model: String,
    /// Every model that answered in this phase, first use first.
    pub models: Vec<String>,
    pub usage: Usage,
    pub calls: u32,
    pub duration: Duration,
    pub tool_executions: Vec<ToolExecution>,
    pub ok: bool,
}

/// What a turn did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnOutcome {
    pub turn_id: Uuid,
    pub task_id: String,
    pub decision: TurnDecision,
    pub failure: Option<TurnFailure>,
    pub iterations: u32,
    /// Models that answered, first use first.
    pub models: Vec<String>,
    /// Every completion of the turn, charged or refused.
    pub usage: Usage,
    pub phases: Vec<PhaseRecord>,
    pub plan: Option<Plan>,
    pub review: Option<Review>,
    pub final_artifact: String,
    pub duration: Duration,
}

impl TurnOutcome {
    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
    }

    /// Whether the turn failed for a reason that passes (the database was
    /// unavailable): its task should be handed back and run again.
    pub fn should_retry(&self) -> bool {
        self.failure
            .as_ref()
            .is_some_and(|f| f.reason.is_retryable())
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
    settings: TurnSettings,
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

/// Everything one turn shares across its phases.
struct TurnCtx<'a> {
    seat: &'a SeatProfile,
    trigger: &'a Trigger,
    turn_id: Uuid,
    span: TraceContext,
    state: Mutex<TurnState>,
    usage: Mutex<Usage>,
}

#[derive(Default)]
struct TurnState {
    iterations: u32,
    phases: Vec<PhaseRecord>,
    plan: Option<Plan>,
    review: Option<Review>,
    final_artifact: String,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

enum PhaseResult {
    Plan(Plan),
    Execute(ExecutionRecord),
    Review(Review),
}

fn validate_plan(v: &Value) -> Result<(), String> {
    Plan::parse(v).map(|_| ())
}

fn validate_review(v: &Value) -> Result<(), String> {
    Review::parse(v).map(|_| ())
}

fn budget_type_str(t: BudgetType) -> &'static str {
    match t {
        BudgetType::Org => "org",
        BudgetType::Agent => "agent",
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
            settings: TurnSettings::default(),
        }
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

    pub fn settings(&self) -> &TurnSettings {
        &self.settings
    }

    pub fn usage(&self) -> &Arc<UsageTracker> {
        &self.usage
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
        let span = crewlet_telemetry::turn_span(
            &seat.agent_id.to_string(),
            &seat.role_name,
            Some(&trigger.task_id),
        );
        join_trigger_trace(&span, trigger.trace);
        let outcome = self
            .run_in_span(seat, trigger, &span)
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
        turn_span: &Span,
    ) -> TurnOutcome {
        let started = Instant::now();
        let span = crewlet_telemetry::trace_context_of(turn_span).unwrap_or_else(|| {
            trigger
                .trace
                .as_ref()
                .map_or_else(TraceContext::new_root, TraceContext::child)
        });
        let t = TurnCtx {
            seat,
            trigger,
            turn_id: Uuid::now_v7(),
            span,
            state: Mutex::new(TurnState::default()),
            usage: Mutex::new(Usage::default()),
        };
        turn_span.record("turn_id", tracing::field::display(t.turn_id));
        self.emit(
            &t,
            EventType::TaskStarted,
            t.span,
            format!("{} started {}", seat.handle, trigger.task_id),
            json!({"turn_id": t.turn_id, "trigger": trigger_json(trigger)}),
        )
        .await;

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

    async fn finish(
        &self,
        t: TurnCtx<'_>,
        result: Result<TurnDecision, TurnFailure>,
        started: Instant,
    ) -> TurnOutcome {
        let usage = *lock(&t.usage);
        let state = std::mem::take(&mut *lock(&t.state));
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
            tracing::warn!(agent = %t.seat.handle, task_id = %t.trigger.task_id, guard = kind.as_str(), %detail, "turn stopped by a guard");
            self.emit(
                &t,
                EventType::TurnGuardBreach,
                t.span,
                format!("guard {} stopped {}'s turn", kind.as_str(), t.seat.handle),
                json!({"kind": kind.as_str(), "detail": detail, "turn_id": t.turn_id,
                       "iteration": state.iterations}),
            )
            .await;
        }
        let duration = started.elapsed();
        self.emit(
            &t,
            EventType::AgentTurnCompleted,
            t.span,
            format!("{} finished a turn: {}", t.seat.handle, decision.as_str()),
            json!({
                "turn_id": t.turn_id,
                "decision": decision.as_str(),
                "iterations": state.iterations,
                "models": models,
                "trigger": trigger_json(t.trigger),
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "total_tokens": usage.total(),
                "duration_ms": ms(duration),
            }),
        )
        .await;
        match &failure {
            None => {
                self.emit(
                    &t,
                    EventType::TaskCompleted,
                    t.span,
                    format!("{} completed {}", t.seat.handle, t.trigger.task_id),
                    json!({"turn_id": t.turn_id, "decision": decision.as_str(),
                           "final_artifact": state.final_artifact}),
                )
                .await;
            }
            Some(f) => {
                self.emit(
                    &t,
                    EventType::TaskFailed,
                    t.span,
                    format!(
                        "{} failed {}: {}",
                        t.seat.handle,
                        t.trigger.task_id,
                        f.reason.code()
                    ),
                    json!({"turn_id": t.turn_id, "reason": f.reason.code(), "detail": f.detail,
                           "will_retry": f.reason.is_retryable()}),
                )
                .await;
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

    async fn drive(&self, t: &TurnCtx<'_>) -> Result<TurnDecision, TurnFailure> {
        let catalogue: Vec<(String, String)> = self
            .tools
            .tools_for(&t.seat.handle)
            .iter()
            .map(|tool| {
                (
                    tool.name().to_owned(),
                    first_sentence(tool.description(), 160),
                )
            })
            .collect();
        let mut prior: Vec<PriorIteration> = Vec::new();
        let mut last_sent_back: Option<String> = None;
        let mut iteration = 0u32;
        loop {
            iteration += 1;
            lock(&t.state).iterations = iteration;

            let plan = match self
                .run_phase(
                    t,
                    iteration,
                    &PhaseBrief::Plan {
                        catalogue: &catalogue,
                        prior: &prior,
                    },
                )
                .await?
            {
                PhaseResult::Plan(p) => p,
                _ => return Err(unexpected(Phase::Plan)),
            };
            lock(&t.state).plan = Some(plan.clone());
            if plan.decision == PlanDecision::Skip {
                return Ok(TurnDecision::Skip);
            }

            let execution = match self
                .run_phase(t, iteration, &PhaseBrief::Execute { plan: &plan })
                .await?
            {
                PhaseResult::Execute(e) => e,
                _ => return Err(unexpected(Phase::Execute)),
            };
            lock(&t.state)
                .final_artifact
                .clone_from(&execution.final_text);
            if plan.decision == PlanDecision::Direct {
                return Ok(TurnDecision::Direct);
            }

            let review = match self
                .run_phase(
                    t,
                    iteration,
                    &PhaseBrief::Review {
                        plan: &plan,
                        execution: &execution,
                    },
                )
                .await?
            {
                PhaseResult::Review(r) => r,
                _ => return Err(unexpected(Phase::Review)),
            };
            {
                let mut state = lock(&t.state);
                state.review = Some(review.clone());
                if !review.final_artifact.trim().is_empty() {
                    state.final_artifact.clone_from(&review.final_artifact);
                }
            }
            match review.decision {
                ReviewDecision::Done => return Ok(TurnDecision::Done),
                ReviewDecision::SelfIterate => {
                    let artifact = review.final_artifact.trim().to_owned();
                    if last_sent_back.as_deref() == Some(artifact.as_str()) {
                        return Err(TurnFailure::guard(
                            GuardKind::Stall,
                            format!(
                                "review sent the work back twice with the same artifact (iteration {iteration})"
                            ),
                        ));
                    }
                    if iteration >= self.settings.max_iterations {
                        return Err(TurnFailure::guard(
                            GuardKind::MaxIter,
                            format!(
                                "review still asked for another pass after {iteration} iterations"
                            ),
                        ));
                    }
                    last_sent_back = Some(artifact);
                    prior.push(PriorIteration {
                        iteration,
                        plan_reasoning: plan.reasoning.clone(),
                        completed_work: review.completed_work.clone(),
                        notes: review.notes.clone(),
                        final_artifact: review.final_artifact.clone(),
                    });
                }
            }
        }
    }

    /// Runs a phase on the seat's chain: on a provider failure the phase
    /// restarts on the next provider; when none is left the turn fails with
    /// `llm_unavailable`.
    async fn run_phase(
        &self,
        t: &TurnCtx<'_>,
        iteration: u32,
        brief: &PhaseBrief<'_>,
    ) -> Result<PhaseResult, TurnFailure> {
        let phase_span = crewlet_telemetry::phase_span(brief.phase().as_str());
        phase_span.record("iteration", i64::from(iteration));
        let span =
            crewlet_telemetry::trace_context_of(&phase_span).unwrap_or_else(|| t.span.child());
        let mut stats = LoopStats::default();
        let result = self
            .run_phase_in_span(t, iteration, brief, span, &mut stats)
            .instrument(phase_span.clone())
            .await;
        phase_span.record("llm_input_tokens", i64_of(stats.usage.input_tokens));
        phase_span.record("llm_output_tokens", i64_of(stats.usage.output_tokens));
        result
    }

    async fn run_phase_in_span(
        &self,
        t: &TurnCtx<'_>,
        iteration: u32,
        brief: &PhaseBrief<'_>,
        span: TraceContext,
        stats: &mut LoopStats,
    ) -> Result<PhaseResult, TurnFailure> {
        let phase = brief.phase();
        let chain = match self.llm.resolve(&t.seat.llm, phase) {
            Ok(chain) if !chain.is_empty() => chain,
            Ok(_) => {
                return Err(self
                    .unavailable(t, span, phase, iteration, &[], &LlmError::NoProviders)
                    .await);
            }
            Err(e) => return Err(self.unavailable(t, span, phase, iteration, &[], &e).await),
        };
        let first = &chain.providers()[0];
        self.emit(
            t,
            EventType::AgentPhaseStarted,
            span,
            format!("{} {} started", t.seat.handle, phase),
            json!({"phase": phase.as_str(), "turn_id": t.turn_id, "iteration": iteration,
                   "provider": first.name(), "model": first.model()}),
        )
        .await;
        let started = Instant::now();
        let providers = chain.providers();
        for (i, provider) in providers.iter().enumerate() {
            let attempt = self
                .attempt(t, span, iteration, brief, provider.as_ref(), stats)
                .await;
            let ok = attempt.is_ok();
            // A provider that fails with a next one in the chain hands the
            // phase over; every other ending completes the phase here, once.
            let falls_back = matches!(&attempt, Err(TurnError::Llm(_))) && providers.len() > i + 1;
            if !falls_back {
                self.phase_completed(
                    t,
                    span,
                    phase,
                    iteration,
                    provider.as_ref(),
                    stats,
                    started,
                    ok,
                )
                .await;
            }
            let err = match attempt {
                Ok(result) => return Ok(result),
                Err(e) => e,
            };
            match err {
                TurnError::Llm(e) => {
                    if let Some(next) = providers.get(i + 1) {
                        tracing::warn!(agent = %t.seat.handle, %phase, from = provider.name(), to = next.name(), error = %e, "llm provider failed; restarting the phase on the next one");
                        self.emit(
                            t,
                            EventType::ProviderFallback,
                            span,
                            format!("{phase}: {} -> {}", provider.name(), next.name()),
                            json!({"phase": phase.as_str(), "from": provider.name(), "to": next.name(),
                                   "error": e.to_string(), "error_class": e.class().as_str(),
                                   "turn_id": t.turn_id, "iteration": iteration}),
                        )
                        .await;
                        continue;
                    }
                    return Err(self
                        .unavailable(t, span, phase, iteration, &chain.names(), &e)
                        .await);
                }
                TurnError::BudgetExhausted { refusal } => {
                    self.emit(
                        t,
                        EventType::BudgetExhausted,
                        span,
                        format!(
                            "{} token budget exhausted ({} of {})",
                            budget_type_str(refusal.budget_type),
                            refusal.used_tokens,
                            refusal.max_tokens
                        ),
                        json!({"budget_type": budget_type_str(refusal.budget_type),
                               "used_tokens": refusal.used_tokens,
                               "max_tokens": refusal.max_tokens}),
                    )
                    .await;
                    let detail = TurnError::BudgetExhausted {
                        refusal: refusal.clone(),
                    }
                    .to_string();
                    return Err(TurnFailure {
                        reason: FailureReason::BudgetExhausted(refusal),
                        detail,
                    });
                }
                TurnError::Ledger(e) if e.is_transient() => {
                    tracing::warn!(agent = %t.seat.handle, %phase, error = %e, "the budget ledger stayed unavailable; the task will be retried");
                    return Err(TurnFailure {
                        reason: FailureReason::StoreUnavailable,
                        detail: e.to_string(),
                    });
                }
                other => {
                    return Err(TurnFailure::guard(GuardKind::Unhandled, other.to_string()));
                }
            }
        }
        Err(unexpected(phase))
    }

    #[allow(clippy::too_many_arguments)]
    async fn phase_completed(
        &self,
        t: &TurnCtx<'_>,
        span: TraceContext,
        phase: Phase,
        iteration: u32,
        provider: &dyn LlmProvider,
        stats: &LoopStats,
        started: Instant,
        ok: bool,
    ) {
        let duration = started.elapsed();
        let model = stats
            .models
            .last()
            .cloned()
            .unwrap_or_else(|| provider.model().to_owned());
        self.emit(
            t,
            EventType::AgentPhaseCompleted,
            span,
            format!(
                "{} {} {}",
                t.seat.handle,
                phase,
                if ok { "completed" } else { "failed" }
            ),
            json!({
                "phase": phase.as_str(),
                "model": model,
                "provider": provider.name(),
                "input_tokens": stats.usage.input_tokens,
                "output_tokens": stats.usage.output_tokens,
                "cache_read_tokens": stats.usage.cache_read_tokens,
                "calls": stats.calls,
                "duration_ms": ms(duration),
                "tool_executions": stats.tool_executions,
                "turn_id": t.turn_id,
                "iteration": iteration,
                "outcome": if ok { "ok" } else { "failed" },
            }),
        )
        .await;
        lock(&t.state).phases.push(PhaseRecord {
            phase,
            iteration,
            provider: provider.name().to_owned(),
            model,
            models: stats.models.clone(),
            usage: stats.usage,
            calls: stats.calls,
            duration,
            tool_executions: stats.tool_executions.clone(),
            ok,
        });
    }

    async fn unavailable(
        &self,
        t: &TurnCtx<'_>,
        span: TraceContext,
        phase: Phase,
        iteration: u32,
        providers: &[String],
        error: &LlmError,
    ) -> TurnFailure {
        tracing::error!(agent = %t.seat.handle, %phase, error = %error, "no llm provider could serve the phase");
        self.emit(
            t,
            EventType::LlmUnavailable,
            span,
            format!("{phase}: no llm provider available"),
            json!({"phase": phase.as_str(), "providers": providers, "error": error.to_string(),
                   "error_class": error.class().as_str(), "turn_id": t.turn_id,
                   "iteration": iteration}),
        )
        .await;
        TurnFailure {
            reason: FailureReason::LlmUnavailable { phase },
            detail: error.to_string(),
        }
    }

    /// One try of a phase on one provider.
    async fn attempt(
        &self,
        t: &TurnCtx<'_>,
        span: TraceContext,
        iteration: u32,
        brief: &PhaseBrief<'_>,
        provider: &dyn LlmProvider,
        stats: &mut LoopStats,
    ) -> Result<PhaseResult, TurnError> {
        let phase = brief.phase();
        let ctx = ToolContext {
            agent_id: t.seat.agent_id,
            agent_handle: t.seat.handle.clone(),
            role_name: t.seat.role_name.clone(),
            task_id: t.trigger.task_id.clone(),
            turn_id: t.turn_id,
            phase,
            iteration,
            delegation_depth: t.trigger.delegation_depth,
            trace: span,
        };
        let observer = Progress {
            engine: self,
            t,
            span,
            phase,
            iteration,
        };
        let env = LoopEnv {
            provider,
            registry: &self.tools,
            ctx: &ctx,
            budget: BudgetGate {
                ledger: self.ledger.as_ref(),
                tracker: &self.usage,
                agent_id: t.seat.agent_id,
                agent_handle: &t.seat.handle,
                limits: BudgetLimits {
                    org_max: self.company.token_budget,
                    agent_max: t.seat.token_budget,
                },
                turn_usage: Some(&t.usage),
                patience: crewlet_store::Patience::at_most(self.settings.store_patience),
            },
            progress: Some(&observer),
            stream: self.settings.stream,
        };
        let system = prompts::system_prompt(&self.company, t.seat, t.trigger, brief);
        let messages = vec![Message::user(prompts::kickoff(phase))];
        match brief {
            PhaseBrief::Plan { .. } => {
                let request = LoopRequest {
                    system,
                    messages,
                    tools: ToolSelection::ReadOnly,
                    slim_tools: true,
                    terminators: vec![Terminator {
                        spec: submit_plan_spec(),
                        validate: validate_plan,
                    }],
                    tool_choice: ToolChoice::Auto,
                    round_cap: self.settings.plan_round_cap,
                    grace_round: false,
                };
                let decided = self.decide(&env, request, SUBMIT_PLAN, stats).await?;
                Ok(PhaseResult::Plan(match decided {
                    Some(args) => Plan::parse(&args).unwrap_or_else(Plan::skip),
                    None => Plan::skip("the model did not call submit_plan"),
                }))
            }
            PhaseBrief::Execute { plan } => {
                let request = LoopRequest {
                    system,
                    messages,
                    tools: ToolSelection::Named(plan.tool_names()),
                    slim_tools: false,
                    terminators: Vec::new(),
                    tool_choice: ToolChoice::Auto,
                    round_cap: self.settings.execute_round_cap,
                    grace_round: true,
                };
                let outcome = run_tool_loop(&env, request, stats).await?;
                let mut final_text = outcome.text;
                if let LoopEnd::Terminated { tool, .. } = &outcome.end
                    && final_text.trim().is_empty()
                {
                    final_text = format!("(ended by the tool {tool})");
                }
                Ok(PhaseResult::Execute(ExecutionRecord {
                    final_text,
                    tool_executions: stats.tool_executions.clone(),
                    hit_round_cap: outcome.end == LoopEnd::RoundCap,
                }))
            }
            PhaseBrief::Review { execution, .. } => {
                let request = LoopRequest {
                    system,
                    messages,
                    tools: ToolSelection::ReadOnly,
                    slim_tools: false,
                    terminators: vec![Terminator {
                        spec: submit_review_spec(),
                        validate: validate_review,
                    }],
                    tool_choice: ToolChoice::Auto,
                    round_cap: self.settings.review_round_cap,
                    grace_round: false,
                };
                let decided = self.decide(&env, request, SUBMIT_REVIEW, stats).await?;
                let fallback = || Review {
                    decision: ReviewDecision::Done,
                    notes: "the model did not call submit_review; the work is taken as it is"
                        .into(),
                    completed_work: execution.final_text.clone(),
                    final_artifact: execution.final_text.clone(),
                };
                Ok(PhaseResult::Review(match decided {
                    Some(args) => Review::parse(&args).unwrap_or_else(|_| fallback()),
                    None => fallback(),
                }))
            }
        }
    }

    /// Runs a decision loop (Plan, Review), then up to `rescue_rounds` rounds
    /// that offer only the decision tool with `tool_choice: required`.
    /// `None` when the model never called it with valid arguments.
    async fn decide(
        &self,
        env: &LoopEnv<'_>,
        request: LoopRequest,
        tool: &str,
        stats: &mut LoopStats,
    ) -> Result<Option<Value>, TurnError> {
        let system = request.system.clone();
        let terminators = request.terminators.clone();
        let mut outcome = run_tool_loop(env, request, stats).await?;
        for _ in 0..self.settings.rescue_rounds {
            if let LoopEnd::Terminated {
                tool: called,
                arguments,
            } = &outcome.end
                && called == tool
            {
                return Ok(Some(arguments.clone()));
            }
            let mut messages = outcome.messages;
            messages.push(Message::user(prompts::rescue(tool)));
            let rescue = LoopRequest {
                system: system.clone(),
                messages,
                tools: ToolSelection::None,
                slim_tools: false,
                terminators: terminators.clone(),
                tool_choice: ToolChoice::Required,
                round_cap: 1,
                grace_round: false,
            };
            outcome = run_tool_loop(env, rescue, stats).await?;
        }
        Ok(match outcome.end {
            LoopEnd::Terminated {
                tool: called,
                arguments,
            } if called == tool => Some(arguments),
            _ => None,
        })
    }

    async fn emit(
        &self,
        t: &TurnCtx<'_>,
        event_type: EventType,
        span: TraceContext,
        summary: String,
        payload: Value,
    ) {
        let mut event = Event::new(event_type, self.settings.source.as_str())
            .with_summary(summary)
            .with_agent(t.seat.agent_id, t.seat.role_name.as_str())
            .with_task(t.trigger.task_id.as_str())
            .with_trace(span)
            .with_delegation_depth(t.trigger.delegation_depth)
            .with_agent_handle(t.seat.handle.as_str())
            .with_payload(payload);
        if let Some(channel) = &t.trigger.channel {
            event = event.with_channel(channel.as_str());
        }
        if let Some(sender) = &t.trigger.sender {
            event = event.with_sender(sender.as_str());
        }
        self.sink.emit(event).await;
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

/// A token count as a span field (`u64` fields are exported as strings).
fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn unexpected(phase: Phase) -> TurnFailure {
    TurnFailure::guard(
        GuardKind::Unhandled,
        format!("internal error: the {phase} phase produced no result"),
    )
}

fn trigger_json(trigger: &Trigger) -> Value {
    let mut summary: String = trigger.content.chars().take(200).collect();
    if trigger.content.chars().count() > 200 {
        summary.push_str("...");
    }
    json!({"source": trigger.source, "sender": trigger.sender, "channel": trigger.channel,
           "task_id": trigger.task_id, "delegation_depth": trigger.delegation_depth,
           "summary": summary})
}

/// Publishes `agent_turn_progress` (stream-only) for one phase.
struct Progress<'a, 'b> {
    engine: &'a TurnEngine,
    t: &'a TurnCtx<'b>,
    span: TraceContext,
    phase: Phase,
    iteration: u32,
}

#[async_trait]
impl ProgressObserver for Progress<'_, '_> {
    async fn progress(&self, text: &str, tool_executions: &[ToolExecution]) {
        self.engine
            .emit(
                self.t,
                EventType::AgentTurnProgress,
                self.span,
                format!("{} {} in progress", self.t.seat.handle, self.phase),
                json!({"turn_id": self.t.turn_id, "phase": self.phase.as_str(),
                       "iteration": self.iteration, "role": self.t.seat.role_name,
                       "response": text, "tool_executions": tool_executions}),
            )
            .await;
    }
}
