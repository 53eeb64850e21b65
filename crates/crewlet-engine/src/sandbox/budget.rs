//! The coding agent's spend, charged after the fact. It calls its model
//! from inside the box, so the engine cannot hold budget before each call
//! as the turn engine does; what the agent reports (Claude Code's `usage`)
//! is charged to the seat's budgets and lifetime usage when its run is
//! collected. A budget already spent refuses the charge (the warning says
//! so); the lifetime usage still counts it.

use crewlet_store::{BudgetCharge, ReserveOutcome, SandboxRun, TokenLedger};
use crewlet_turn::BudgetLimits;
use serde_json::Value;
use tracing::{debug, warn};

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

/// Charges `tokens` of `run` to `payer`'s budgets and lifetime usage.
pub(super) async fn charge(ledger: &dyn TokenLedger, payer: &Payer, run: &SandboxRun, tokens: u64) {
    if tokens == 0 {
        return;
    }
    let l = &payer.limits;
    let mut c = BudgetCharge::new(payer.agent_id, &run.seat, 0, l.org_max, l.agent_max);
    c.units.clone_from(&l.units);
    c.window = l.period.window(chrono::Utc::now());
    c.warn_at = l.warn_at;
    // A zero hold settled with what was spent: the charge goes in whole,
    // even past a cap (it was spent), and claims the warnings as usual.
    match ledger.reserve(&c).await {
        Ok(ReserveOutcome::Reserved(id)) => {
            if let Err(e) = ledger.settle(id, tokens).await {
                warn!(agent = %run.seat, run = %run.id, error = %e, "cannot charge the coding agent's tokens to the seat's budgets");
            }
        }
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
}
