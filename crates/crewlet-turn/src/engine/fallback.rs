//! Running one phase over the seat's provider chain: the phase restarts on
//! the next provider when the current one fails; when none is left the turn
//! fails with `llm_unavailable`. Every other error ends the phase and the
//! turn (budget exhausted, the store unavailable, an unhandled error).
//!
//! Each phase runs in a `phase` span; its events (via `report.rs`) carry
//! that span's ids.

use std::time::Instant;

use crewlet_llm::{LlmError, LlmProvider, ProviderChain};
use tracing::Instrument;

use super::ctx::{PhaseCtx, TurnCtx};
use super::phases::PhaseWork;
use super::{FailureReason, GuardKind, PhaseRecord, TurnEngine, TurnFailure, i64_of};
use crate::{LoopStats, TurnError};

impl TurnEngine {
    /// Runs `work` as the phase of `iteration`, in its own `phase` span.
    pub(super) async fn run_phase<W: PhaseWork>(
        &self,
        t: &TurnCtx<'_>,
        iteration: u32,
        work: &W,
    ) -> Result<W::Output, TurnFailure> {
        let phase_span = crewlet_telemetry::phase_span(W::PHASE.as_str());
        phase_span.record("iteration", i64::from(iteration));
        let pc = PhaseCtx {
            turn: t,
            span: crewlet_telemetry::trace_context_of(&phase_span)
                .unwrap_or_else(|| t.span.child()),
            phase: W::PHASE,
            iteration,
        };
        let mut stats = LoopStats::default();
        let result = self
            .run_on_chain(&pc, work, &mut stats)
            .instrument(phase_span.clone())
            .await;
        phase_span.record("llm_input_tokens", i64_of(stats.usage.input_tokens));
        phase_span.record("llm_output_tokens", i64_of(stats.usage.output_tokens));
        result
    }

    /// The phase on each provider of the chain in turn, until one finishes
    /// it or fails with something other than a provider error.
    async fn run_on_chain<W: PhaseWork>(
        &self,
        pc: &PhaseCtx<'_, '_>,
        work: &W,
        stats: &mut LoopStats,
    ) -> Result<W::Output, TurnFailure> {
        let chain = match self.llm.resolve(&pc.turn.seat.llm, pc.phase) {
            Ok(chain) => chain,
            Err(e) => return Err(self.unavailable(pc, &[], &e).await),
        };
        let mut providers = chain.providers().iter();
        let Some(mut provider) = providers.next() else {
            return Err(self.unavailable(pc, &[], &LlmError::NoProviders).await);
        };
        self.report_phase_started(pc, provider.as_ref()).await;
        let started = Instant::now();
        loop {
            let attempt = self.attempt(pc, work, provider.as_ref(), stats).await;
            match (attempt, providers.as_slice().first()) {
                // A provider that fails with a next one in the chain hands
                // the phase over.
                (Err(TurnError::Llm(e)), Some(next)) => {
                    self.report_fallback(pc, provider.as_ref(), next.as_ref(), &e)
                        .await;
                    provider = next;
                    providers.next();
                }
                // Every other ending completes the phase here, once.
                (attempt, _) => {
                    let ok = attempt.is_ok();
                    self.phase_completed(pc, provider.as_ref(), stats, started, ok)
                        .await;
                    return match attempt {
                        Ok(output) => Ok(output),
                        Err(e) => Err(self.failure(pc, &chain, e).await),
                    };
                }
            }
        }
    }

    /// Reports the phase's end and records it in the turn.
    async fn phase_completed(
        &self,
        pc: &PhaseCtx<'_, '_>,
        provider: &dyn LlmProvider,
        stats: &LoopStats,
        started: Instant,
        ok: bool,
    ) {
        self.report_budget_warnings(pc).await;
        let duration = started.elapsed();
        let model = stats
            .models
            .last()
            .cloned()
            .unwrap_or_else(|| provider.model().to_owned());
        self.report_phase_completed(pc, provider, &model, stats, duration, ok)
            .await;
        pc.turn.state().phases.push(PhaseRecord {
            phase: pc.phase,
            iteration: pc.iteration,
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

    /// How the error that ended the phase fails the turn (reported first
    /// when it has an event of its own).
    async fn failure(
        &self,
        pc: &PhaseCtx<'_, '_>,
        chain: &ProviderChain,
        error: TurnError,
    ) -> TurnFailure {
        match error {
            // The prompt outgrew every model of the chain: the turn's own
            // context failure, not an unavailable model.
            TurnError::Llm(e @ LlmError::ContextOverflow { .. }) => TurnFailure {
                reason: FailureReason::ContextOverflow { phase: pc.phase },
                detail: e.to_string(),
            },
            TurnError::Llm(e) => self.unavailable(pc, &chain.names(), &e).await,
            TurnError::BudgetExhausted { refusal } => {
                self.report_budget_exhausted(pc, &refusal).await;
                let detail = TurnError::BudgetExhausted {
                    refusal: refusal.clone(),
                }
                .to_string();
                TurnFailure {
                    reason: FailureReason::BudgetExhausted(refusal),
                    detail,
                }
            }
            TurnError::Ledger(e) if e.is_transient() => {
                tracing::warn!(agent = %pc.turn.seat.handle, phase = %pc.phase, error = %e, "the budget ledger stayed unavailable; the task will be retried");
                TurnFailure {
                    reason: FailureReason::StoreUnavailable,
                    detail: e.to_string(),
                }
            }
            TurnError::Fenced => TurnFailure {
                reason: FailureReason::Fenced,
                detail: TurnError::Fenced.to_string(),
            },
            TurnError::Suspended { tool } => TurnFailure {
                detail: TurnError::Suspended { tool: tool.clone() }.to_string(),
                reason: FailureReason::Suspended { tool },
            },
            TurnError::JournalEnded { step } => TurnFailure {
                reason: FailureReason::JournalEnded { step },
                detail: TurnError::JournalEnded { step }.to_string(),
            },
            other => TurnFailure::guard(GuardKind::Unhandled, other.to_string()),
        }
    }

    /// `llm_unavailable`, and the failure it is.
    async fn unavailable(
        &self,
        pc: &PhaseCtx<'_, '_>,
        providers: &[String],
        error: &LlmError,
    ) -> TurnFailure {
        self.report_unavailable(pc, providers, error).await;
        TurnFailure {
            reason: FailureReason::LlmUnavailable { phase: pc.phase },
            detail: error.to_string(),
        }
    }
}
