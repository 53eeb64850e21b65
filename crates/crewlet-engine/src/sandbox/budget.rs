//! The coding agent's spend. A run whose calls go through the engine's
//! model proxy is charged call by call as the answers come (see
//! `model_proxy`); its own report is kept in its event and not charged
//! again. Any other run calls its model from inside the box, so the engine
//! cannot hold budget before each call as the turn engine does: what the
//! agent reports (Claude Code's `usage`) is charged to the seat's budgets
//! and lifetime usage when its run is collected. A budget already spent
//! refuses the charge (the warning says so); the lifetime usage still
//! counts it.

use crewlet_core::payload::EventPayload as _;
use crewlet_queue::EventQueue;
use crewlet_store::{BudgetWarning, ReserveOutcome, SandboxRun, TokenLedger};
use crewlet_turn::BudgetLimits;
use serde_json::Value;
use tracing::{debug, info, warn};

use super::SandboxService;
use super::llm_env::ModelAccess;

/// Tokens a run reports: input (cache reads and writes included) plus output.
pub(super) fn reported_tokens(usage: &Value) -> u64 {
    [
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "output_tokens",
    ]
    .iter()
    .filter_map(|k| usage.get(*k).and_then(Value::as_u64))
    .sum()
}

/// Who pays for a seat's runs.
#[derive(Clone, Debug)]
pub(super) struct Payer {
    pub agent_id: crewlet_core::AgentId,
    pub limits: BudgetLimits,
}

/// Charges `tokens` of `run` to `payer`'s budgets and lifetime usage;
/// returns the budget warnings the charge claimed (to publish).
pub(super) async fn charge(
    ledger: &dyn TokenLedger,
    payer: &Payer,
    run: &SandboxRun,
    tokens: u64,
) -> Vec<BudgetWarning> {
    if tokens == 0 {
        return Vec::new();
    }
    // A zero hold settled with what was spent: the charge goes in whole,
    // even past a cap (it was spent), and claims the warnings as usual.
    let mut warnings = Vec::new();
    match ledger
        .reserve(&payer.limits.charge(payer.agent_id, &run.seat, 0))
        .await
    {
        Ok(ReserveOutcome::Reserved(id)) => match ledger.settle(id, tokens).await {
            Ok(w) => warnings = w,
            Err(e) => {
                warn!(agent = %run.seat, run = %run.id, error = %e, "cannot charge the coding agent's tokens to the seat's budgets")
            }
        },
        Ok(ReserveOutcome::Refused(r)) => {
            warn!(agent = %run.seat, run = %run.id, tokens, budget = r.budget_type.as_str(),
                  "the seat's budget was already spent; the coding agent's tokens are counted in its usage only");
        }
        Err(e) => {
            warn!(agent = %run.seat, run = %run.id, error = %e, "cannot charge the coding agent's tokens to the seat's budgets")
        }
    }
    if let Err(e) = ledger.record_usage(&run.seat, tokens).await {
        warn!(agent = %run.seat, run = %run.id, error = %e, "cannot record the coding agent's tokens");
    }
    debug!(agent = %run.seat, run = %run.id, tokens, "coding agent's tokens charged");
    warnings
}

/// Publishes the budget warnings a charge claimed, as the turn does.
pub(super) async fn publish_warnings(
    queue: &dyn EventQueue,
    seat: &str,
    task_id: &str,
    warn_at: f64,
    warnings: Vec<BudgetWarning>,
) {
    for w in warnings {
        let payload = crewlet_turn::warning_payload(&w, warn_at);
        let mut event = payload
            .to_event("engine")
            .with_summary(format!(
                "{} token budget at {} of {}",
                w.scope, w.used_tokens, w.max_tokens
            ))
            .with_agent_handle(seat);
        event.task_id = Some(task_id.to_owned());
        crate::sink::publish_event(queue, event).await;
    }
}

impl SandboxService {
    /// A run left `running` (collected, lost or parked): its proxy token
    /// ends, and what it reports it spent is charged unless its calls went
    /// through the proxy, which charged them already. Called once per run:
    /// the caller won the run's transition.
    pub(super) async fn charge(&self, run: &SandboxRun) {
        let proxied = self.revoke_model_token(run);
        let Some(seat) = self.seats.get(&run.seat) else {
            return;
        };
        let usage = run
            .result
            .as_ref()
            .map_or(&serde_json::Value::Null, |r| &r["usage"]);
        if proxied || matches!(seat.llm, Ok(ModelAccess::Proxy(_))) {
            debug!(agent = %run.seat, run = %run.id, reported = reported_tokens(usage),
                   "the run's model calls went through the proxy and were charged there; its own report is not charged again");
            return;
        }
        let warnings = charge(
            self.ledger.as_ref(),
            &seat.payer,
            run,
            reported_tokens(usage),
        )
        .await;
        publish_warnings(
            self.queue.as_ref(),
            &run.seat,
            &run.task_id,
            seat.payer.limits.warn_at,
            warnings,
        )
        .await;
    }

    /// Ends `run`'s model proxy token, if it has one; true when it had.
    pub(super) fn revoke_model_token(&self, run: &SandboxRun) -> bool {
        let Some(grant) = self.proxy.get().and_then(|p| p.revoke(run.id)) else {
            return false;
        };
        let (calls, tokens) = grant.spent();
        info!(agent = %run.seat, run = %run.id, calls, tokens, "the run's model proxy token is revoked");
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_reported_token_counts() {
        let usage = serde_json::json!({"input_tokens": 100, "cache_read_input_tokens": 40,
            "cache_creation_input_tokens": 10, "output_tokens": 25, "service_tier": "standard"});
        assert_eq!(reported_tokens(&usage), 175);
        assert_eq!(reported_tokens(&Value::Null), 0);
    }

    #[tokio::test]
    async fn a_charge_past_the_warning_line_claims_the_warning_once_and_over_the_cap_still_counts()
    {
        let ledger = crewlet_store::MemoryTokenLedger::new();
        let payer = Payer {
            agent_id: crewlet_core::AgentId::for_seat("Code Co", "eng"),
            limits: BudgetLimits {
                agent_max: 100,
                warn_at: 0.8,
                ..BudgetLimits::default()
            },
        };
        let run = SandboxRun {
            id: uuid::Uuid::now_v7(),
            seat: "eng".into(),
            task_id: "t".into(),
            turn_id: uuid::Uuid::nil(),
            call_id: "c".into(),
            trigger_event: Value::Null,
            conversation: None,
            backend: "local".into(),
            box_id: String::new(),
            run_id: String::new(),
            coding_agent: "command".into(),
            status: crewlet_store::SandboxRunStatus::Completed,
            question: None,
            answer: None,
            result: None,
            paused_at: None,
            created_at: chrono::Utc::now(),
            updated_at: chrono::Utc::now(),
        };
        let first = charge(&ledger, &payer, &run, 90).await;
        assert_eq!(first.len(), 1, "{first:?}");
        assert_eq!(first[0].used_tokens, 90);
        // Over the cap: spent, so charged; the warning is not claimed again.
        assert!(charge(&ledger, &payer, &run, 20).await.is_empty());
        let usage = ledger.usage().await.unwrap_or_default();
        assert_eq!(usage.first().map(|u| u.tokens_used), Some(110));
    }
}
