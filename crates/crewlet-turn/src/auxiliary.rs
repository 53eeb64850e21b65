//! Auxiliary model calls: the cheap, tool-less completions that learning
//! and filtering workers make for a seat (`llm_auxiliary`, falling back to
//! the role's `llm`). Each one is charged to the org and agent budgets like
//! a phase's completion and reported as an `agent_phase_completed` event
//! with phase `auxiliary` and the worker's name in `auxiliary`, so
//! `/tokens/breakdown` shows it under `by_worker`.

use std::sync::Arc;
use std::time::Instant;

use crewlet_core::TraceContext;
use crewlet_core::payload::EventPayload;
use crewlet_core::payload::turn::AgentPhaseCompleted;
use crewlet_llm::{CompletionRequest, LlmError, LlmRegistry, Message, Phase, SystemBlock};
use crewlet_store::{Patience, TokenLedger};
use uuid::Uuid;

use crate::{
    BudgetGate, BudgetLimits, CompanyProfile, EventSink, SeatProfile, TurnError, UsageTracker,
};

/// One auxiliary completion.
#[derive(Clone, Debug)]
pub struct AuxCall<'a> {
    pub seat: &'a SeatProfile,
    /// Who asks, e.g. `persist_decider` (the `auxiliary` of the event).
    pub worker: &'a str,
    pub system: String,
    pub user: String,
    pub max_tokens: u32,
    /// The task and turn the call serves, when it serves one.
    pub task_id: Option<&'a str>,
    pub turn_id: Option<Uuid>,
    /// The span the call continues (a new trace when `None`).
    pub trace: Option<TraceContext>,
}

/// Makes auxiliary calls with the turn engine's models, ledger and sink.
#[derive(Clone)]
pub struct Auxiliary {
    pub(crate) company: CompanyProfile,
    pub(crate) llm: LlmRegistry,
    pub(crate) ledger: Arc<dyn TokenLedger>,
    pub(crate) sink: Arc<dyn EventSink>,
    pub(crate) usage: Arc<UsageTracker>,
    pub(crate) source: String,
    pub(crate) patience: std::time::Duration,
}

impl std::fmt::Debug for Auxiliary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auxiliary")
            .field("llm", &self.llm)
            .finish_non_exhaustive()
    }
}

impl Auxiliary {
    /// The text of one completion on the seat's auxiliary chain (the next
    /// provider is tried when one fails). A budget refusal or a ledger
    /// failure ends the call as an error; so does a chain where every
    /// provider failed.
    pub async fn complete(&self, call: AuxCall<'_>) -> Result<String, TurnError> {
        let chain = self.llm.resolve(&call.seat.llm, Phase::Auxiliary)?;
        let request = CompletionRequest {
            system: vec![SystemBlock::volatile(call.system.clone())],
            messages: vec![Message::user(call.user.clone())],
            tools: Vec::new(),
            tool_choice: crewlet_llm::ToolChoice::Auto,
            temperature: Some(0.0),
            max_tokens: Some(call.max_tokens.max(1)),
        };
        let limits = BudgetLimits::of(&self.company, call.seat);
        let warnings = parking_lot::Mutex::new(Vec::new());
        let gate = BudgetGate {
            ledger: self.ledger.as_ref(),
            tracker: &self.usage,
            agent_id: call.seat.agent_id,
            agent_handle: &call.seat.handle,
            limits: &limits,
            turn_usage: None,
            warnings: Some(&warnings),
            patience: Patience::at_most(self.patience),
        };
        let mut last: Option<LlmError> = None;
        for provider in chain.providers() {
            let started = Instant::now();
            // Held before the call, like a phase's: learning never spends
            // past a cap either.
            let hold = gate
                .reserve(
                    crate::budget::prompt_bound(&request),
                    crate::budget::output_bound(&request, provider.max_tokens()),
                )
                .await?;
            let mut request = request.clone();
            request.max_tokens = request
                .max_tokens
                .map(|m| m.min(u32::try_from(hold.output_cap()).unwrap_or(u32::MAX)));
            match provider.complete(&request).await {
                Ok(completion) => {
                    let charged = gate.settle(hold, &completion.usage).await;
                    self.report(
                        &call,
                        &completion.provider,
                        &completion.model,
                        completion.usage,
                        started,
                        charged.is_ok(),
                    )
                    .await;
                    let claimed = std::mem::take(&mut *warnings.lock());
                    self.report_warnings(&call, claimed).await;
                    charged?;
                    return Ok(completion.content);
                }
                Err(e) => {
                    gate.release(hold).await;
                    tracing::debug!(agent = %call.seat.handle, worker = call.worker,
                        provider = provider.name(), error = %e, "auxiliary call failed");
                    last = Some(e);
                }
            }
        }
        Err(TurnError::Llm(last.unwrap_or(LlmError::NoProviders)))
    }

    async fn report_warnings(
        &self,
        call: &AuxCall<'_>,
        warnings: Vec<crewlet_store::BudgetWarning>,
    ) {
        for w in warnings {
            let payload = crate::budget::warning_payload(&w, self.company.budget_warn_at);
            let trace = call
                .trace
                .map_or_else(TraceContext::new_root, |t| t.child());
            let event = payload
                .to_event(self.source.as_str())
                .with_summary(format!(
                    "{} token budget at {} of {}",
                    w.scope, w.used_tokens, w.max_tokens
                ))
                .with_agent(call.seat.agent_id, call.seat.role_name.as_str())
                .with_trace(trace)
                .with_agent_handle(call.seat.handle.as_str());
            self.sink.emit(event).await;
        }
    }

    async fn report(
        &self,
        call: &AuxCall<'_>,
        provider: &str,
        model: &str,
        usage: crewlet_llm::Usage,
        started: Instant,
        ok: bool,
    ) {
        let payload = AgentPhaseCompleted {
            phase: Phase::Auxiliary.as_str().to_owned(),
            model: model.to_owned(),
            provider: provider.to_owned(),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            calls: Some(1),
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            tool_executions: Vec::new(),
            turn_id: call.turn_id.map(|t| t.to_string()).unwrap_or_default(),
            iteration: 0,
            outcome: if ok { "ok" } else { "failed" }.to_owned(),
            auxiliary: Some(call.worker.to_owned()),
            prompt: None,
            response: None,
        };
        let trace = call
            .trace
            .map_or_else(TraceContext::new_root, |t| t.child());
        let mut event = payload
            .to_event(self.source.as_str())
            .with_summary(format!("{} auxiliary {}", call.seat.handle, call.worker))
            .with_agent(call.seat.agent_id, call.seat.role_name.as_str())
            .with_trace(trace)
            .with_agent_handle(call.seat.handle.as_str());
        if let Some(task) = call.task_id {
            event = event.with_task(task);
        }
        self.sink.emit(event).await;
    }
}
