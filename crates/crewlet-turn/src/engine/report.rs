//! The events a turn emits, built from the typed payloads of
//! `crewlet_core::payload::turn`. Nothing here decides anything: the
//! sequencing and the fallback runner call these once each step is known.

use std::time::Duration;

use async_trait::async_trait;
use crewlet_core::payload::{
    AgentPhaseCompleted, AgentPhaseStarted, AgentTurnCompleted, AgentTurnProgress, BudgetExhausted,
    EffectUncertain, ExecuteMissingTool, LlmUnavailable, ProviderFallback, TaskCompleted,
    TaskFailed, TaskStarted, ToolActivated, ToolSkillBlocked, TriggerSummary, TurnGuardBreach,
};
use crewlet_core::{EventPayload, TraceContext};
use crewlet_llm::{LlmError, LlmProvider, Usage};
use crewlet_store::BudgetRefusal;

use super::ctx::{PhaseCtx, TurnCtx};
use super::{GuardKind, TurnDecision, TurnEngine, TurnFailure, ms};
use crate::tool_loop::LoopNotice;
use crate::{LoopStats, ProgressObserver, ToolExecution, Trigger};

impl TurnEngine {
    /// Sends `payload` as an event of the turn, stamped with the seat, the
    /// task, the trigger's channel and sender, and the span `span`.
    pub(super) async fn emit<P: EventPayload>(
        &self,
        t: &TurnCtx<'_>,
        span: TraceContext,
        summary: String,
        payload: &P,
    ) {
        let mut event = payload
            .to_event(self.settings.source.as_str())
            .with_summary(summary)
            .with_agent(t.seat.agent_id, t.seat.role_name.as_str())
            .with_task(t.trigger.task_id.as_str())
            .with_trace(span)
            .with_delegation_depth(t.trigger.delegation_depth)
            .with_agent_handle(t.seat.handle.as_str());
        if let Some(channel) = &t.trigger.channel {
            event = event.with_channel(channel.as_str());
        }
        if let Some(sender) = &t.trigger.sender {
            event = event.with_sender(sender.as_str());
        }
        self.sink.emit(event).await;
    }

    pub(super) async fn report_task_started(&self, t: &TurnCtx<'_>) {
        let payload = TaskStarted {
            turn_id: t.turn_id,
            trigger: trigger_summary(t.trigger),
        };
        let summary = format!("{} started {}", t.seat.handle, t.trigger.task_id);
        self.emit(t, t.span, summary, &payload).await;
    }

    pub(super) async fn report_phase_started(
        &self,
        pc: &PhaseCtx<'_, '_>,
        first: &dyn LlmProvider,
    ) {
        let t = pc.turn;
        let payload = AgentPhaseStarted {
            phase: pc.phase.as_str().to_owned(),
            turn_id: t.turn_id,
            iteration: pc.iteration,
            provider: first.name().to_owned(),
            model: first.model().to_owned(),
        };
        let summary = format!("{} {} started", t.seat.handle, pc.phase);
        self.emit(t, pc.span, summary, &payload).await;
    }

    /// `agent_phase_completed`; `model` is the model that answered last.
    pub(super) async fn report_phase_completed(
        &self,
        pc: &PhaseCtx<'_, '_>,
        provider: &dyn LlmProvider,
        model: &str,
        stats: &LoopStats,
        duration: Duration,
        ok: bool,
    ) {
        let t = pc.turn;
        let payload = AgentPhaseCompleted {
            phase: pc.phase.as_str().to_owned(),
            model: model.to_owned(),
            provider: provider.name().to_owned(),
            input_tokens: stats.usage.input_tokens,
            output_tokens: stats.usage.output_tokens,
            cache_read_tokens: stats.usage.cache_read_tokens,
            calls: Some(u64::from(stats.calls)),
            duration_ms: ms(duration),
            tool_executions: stats.tool_executions.clone(),
            turn_id: t.turn_id.to_string(),
            iteration: pc.iteration,
            outcome: if ok { "ok" } else { "failed" }.to_owned(),
            auxiliary: None,
            prompt: stats.prompt.clone(),
            response: Some(stats.response.clone()).filter(|r| !r.is_empty()),
        };
        let summary = format!(
            "{} {} {}",
            t.seat.handle,
            pc.phase,
            if ok { "completed" } else { "failed" }
        );
        self.emit(t, pc.span, summary, &payload).await;
    }

    pub(super) async fn report_fallback(
        &self,
        pc: &PhaseCtx<'_, '_>,
        from: &dyn LlmProvider,
        to: &dyn LlmProvider,
        error: &LlmError,
    ) {
        let phase = pc.phase;
        tracing::warn!(agent = %pc.turn.seat.handle, %phase, from = from.name(), to = to.name(), error = %error, "llm provider failed; restarting the phase on the next one");
        let payload = ProviderFallback {
            phase: phase.as_str().to_owned(),
            from: from.name().to_owned(),
            to: to.name().to_owned(),
            to_model: Some(to.model().to_owned()),
            error: error.to_string(),
            error_class: error.class().as_str().to_owned(),
            turn_id: pc.turn.turn_id,
            iteration: pc.iteration,
        };
        let summary = format!("{phase}: {} -> {}", from.name(), to.name());
        self.emit(pc.turn, pc.span, summary, &payload).await;
    }

    pub(super) async fn report_unavailable(
        &self,
        pc: &PhaseCtx<'_, '_>,
        providers: &[String],
        error: &LlmError,
    ) {
        let phase = pc.phase;
        tracing::error!(agent = %pc.turn.seat.handle, %phase, error = %error, "no llm provider could serve the phase");
        let payload = LlmUnavailable {
            phase: phase.as_str().to_owned(),
            providers: providers.to_vec(),
            error: error.to_string(),
            error_class: error.class().as_str().to_owned(),
            turn_id: pc.turn.turn_id,
            iteration: pc.iteration,
        };
        let summary = format!("{phase}: no llm provider available");
        self.emit(pc.turn, pc.span, summary, &payload).await;
    }

    pub(super) async fn report_budget_exhausted(
        &self,
        pc: &PhaseCtx<'_, '_>,
        refusal: &BudgetRefusal,
    ) {
        let budget_type = refusal.budget_type.as_str();
        let payload = BudgetExhausted {
            budget_type: budget_type.to_owned(),
            used_tokens: refusal.used_tokens,
            max_tokens: refusal.max_tokens,
        };
        let summary = format!(
            "{budget_type} token budget exhausted ({} of {})",
            refusal.used_tokens, refusal.max_tokens
        );
        self.emit(pc.turn, pc.span, summary, &payload).await;
    }

    /// Publishes the budget warnings the turn's charges claimed so far.
    pub(super) async fn report_budget_warnings(&self, pc: &PhaseCtx<'_, '_>) {
        let warnings = std::mem::take(&mut *pc.turn.budget_warnings.lock());
        for w in warnings {
            let payload = crate::budget::warning_payload(&w, self.company.budget_warn_at);
            tracing::warn!(agent = %pc.turn.seat.handle, scope = %w.scope, used = w.used_tokens,
                max = w.max_tokens, "token budget reached its warning threshold");
            let summary = format!(
                "{} token budget at {} of {} ({:.0}%)",
                w.scope,
                w.used_tokens,
                w.max_tokens,
                percent(w.used_tokens, w.max_tokens)
            );
            self.emit(pc.turn, pc.span, summary, &payload).await;
        }
    }

    pub(super) async fn report_guard_breach(
        &self,
        t: &TurnCtx<'_>,
        kind: GuardKind,
        detail: &str,
        iteration: u32,
    ) {
        tracing::warn!(agent = %t.seat.handle, task_id = %t.trigger.task_id, guard = kind.as_str(), %detail, "turn stopped by a guard");
        let payload = TurnGuardBreach {
            kind: kind.as_str().to_owned(),
            detail: detail.to_owned(),
            turn_id: t.turn_id,
            iteration,
        };
        let summary = format!("guard {} stopped {}'s turn", kind.as_str(), t.seat.handle);
        self.emit(t, t.span, summary, &payload).await;
    }

    pub(super) async fn report_turn_completed(
        &self,
        t: &TurnCtx<'_>,
        decision: TurnDecision,
        iterations: u32,
        models: &[String],
        usage: Usage,
        duration: Duration,
    ) {
        let payload = AgentTurnCompleted {
            turn_id: t.turn_id,
            decision: decision.as_str().to_owned(),
            iterations,
            models: models.to_vec(),
            trigger: trigger_summary(t.trigger),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            total_tokens: usage.total(),
            duration_ms: ms(duration),
        };
        let summary = format!("{} finished a turn: {}", t.seat.handle, decision.as_str());
        self.emit(t, t.span, summary, &payload).await;
    }

    pub(super) async fn report_task_completed(
        &self,
        t: &TurnCtx<'_>,
        decision: TurnDecision,
        final_artifact: &str,
    ) {
        let payload = TaskCompleted {
            turn_id: t.turn_id,
            decision: decision.as_str().to_owned(),
            final_artifact: final_artifact.to_owned(),
        };
        let summary = format!("{} completed {}", t.seat.handle, t.trigger.task_id);
        self.emit(t, t.span, summary, &payload).await;
    }

    pub(super) async fn report_task_failed(&self, t: &TurnCtx<'_>, failure: &TurnFailure) {
        let payload = TaskFailed {
            turn_id: t.turn_id,
            reason: failure.reason.code().to_owned(),
            detail: failure.detail.clone(),
            will_retry: failure.reason.is_retryable(),
        };
        let summary = format!(
            "{} failed {}: {}",
            t.seat.handle,
            t.trigger.task_id,
            failure.reason.code()
        );
        self.emit(t, t.span, summary, &payload).await;
    }
}

/// Publishes `agent_turn_progress` (stream-only) for one phase.
pub(super) struct Progress<'p, 't, 'a> {
    pub engine: &'p TurnEngine,
    pub pc: &'p PhaseCtx<'t, 'a>,
}

#[async_trait]
impl ProgressObserver for Progress<'_, '_, '_> {
    async fn progress(&self, text: &str, tool_executions: &[ToolExecution]) {
        let (t, pc) = (self.pc.turn, self.pc);
        let payload = AgentTurnProgress {
            turn_id: t.turn_id,
            phase: pc.phase.as_str().to_owned(),
            iteration: pc.iteration,
            role: t.seat.role_name.clone(),
            response: text.to_owned(),
            tool_executions: tool_executions.to_vec(),
        };
        let summary = format!("{} {} in progress", t.seat.handle, pc.phase);
        self.engine.emit(t, pc.span, summary, &payload).await;
    }

    async fn notice(&self, notice: LoopNotice) {
        let (t, pc) = (self.pc.turn, self.pc);
        let (e, handle, phase) = (self.engine, &t.seat.handle, pc.phase.as_str());
        match notice {
            LoopNotice::SkillBlocked { tool, skills } => {
                let summary = format!("{handle} must load {} before {tool}", skills.join(", "));
                let payload = ToolSkillBlocked {
                    turn_id: t.turn_id,
                    phase: phase.to_owned(),
                    iteration: pc.iteration,
                    tool,
                    skills,
                };
                e.emit(t, pc.span, summary, &payload).await;
            }
            LoopNotice::ToolActivated { tool } => {
                let summary = format!("{handle} activated {tool} in {phase}");
                let payload = ToolActivated {
                    turn_id: t.turn_id,
                    phase: phase.to_owned(),
                    iteration: pc.iteration,
                    tool,
                };
                e.emit(t, pc.span, summary, &payload).await;
            }
            LoopNotice::MissingTool { tool } => {
                let summary = format!("{handle} called {tool}, which it does not have");
                let payload = ExecuteMissingTool {
                    turn_id: t.turn_id,
                    iteration: pc.iteration,
                    tool,
                };
                e.emit(t, pc.span, summary, &payload).await;
            }
            LoopNotice::EffectUncertain { tool, step } => {
                let summary = format!(
                    "{handle}: whether the interrupted call of {tool} took effect is unknown; it was not run again"
                );
                let payload = EffectUncertain {
                    turn_id: t.turn_id,
                    phase: phase.to_owned(),
                    iteration: pc.iteration,
                    tool,
                    step,
                };
                e.emit(t, pc.span, summary, &payload).await;
            }
        }
    }
}

/// The trigger as the turn events carry it (content cut to 200 characters).
fn trigger_summary(trigger: &Trigger) -> TriggerSummary {
    let mut summary: String = trigger.content.chars().take(200).collect();
    if trigger.content.chars().count() > 200 {
        summary.push_str("...");
    }
    TriggerSummary {
        source: trigger.source.clone(),
        sender: trigger.sender.clone(),
        channel: trigger.channel.clone(),
        task_id: trigger.task_id.clone(),
        delegation_depth: trigger.delegation_depth,
        summary,
    }
}

/// `used` as a percentage of `max` (0 for no cap).
fn percent(used: u64, max: u64) -> f64 {
    if max == 0 {
        return 0.0;
    }
    // Display only.
    #[allow(clippy::cast_precision_loss)]
    let p = used as f64 * 100.0 / max as f64;
    p
}
