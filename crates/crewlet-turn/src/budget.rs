//! Charging every completion to the org and agent budgets.

use crewlet_core::AgentId;
use crewlet_llm::Usage;
use crewlet_store::{BudgetCharge, ChargeOutcome, Patience, TokenLedger, retry_transient};

use crate::{TurnError, UsageTracker};

/// The caps a seat's calls are charged against; 0 = unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetLimits {
    /// The company's `token_budget`.
    pub org_max: u64,
    /// The role's `token_budget`.
    pub agent_max: u64,
}

/// What happens after every completion: count it in process, charge it
/// (org and agent at once, all or nothing), and on success add it to the
/// agent's lifetime `token_usage`.
#[derive(Clone, Copy)]
pub struct BudgetGate<'a> {
    pub ledger: &'a dyn TokenLedger,
    pub tracker: &'a UsageTracker,
    pub agent_id: AgentId,
    pub agent_handle: &'a str,
    pub limits: BudgetLimits,
    /// The turn's own running total, if the caller keeps one.
    pub turn_usage: Option<&'a parking_lot::Mutex<Usage>>,
    /// How long a charge is retried while the ledger's database is
    /// unavailable, before the turn fails as `store_unavailable` (and the
    /// engine puts its task back in the inbox).
    pub patience: Patience,
}

impl BudgetGate<'_> {
    /// Counts and charges one completion's tokens. A refusal is
    /// [`TurnError::BudgetExhausted`]: the turn must stop.
    pub async fn charge(&self, usage: &Usage) -> Result<(), TurnError> {
        self.tracker.record(self.agent_id, self.agent_handle, usage);
        if let Some(turn) = self.turn_usage {
            turn.lock().add(usage);
        }
        let tokens = usage.total();
        let charge = BudgetCharge {
            agent_id: self.agent_id,
            agent_handle: self.agent_handle.to_owned(),
            tokens,
            org_max: self.limits.org_max,
            agent_max: self.limits.agent_max,
        };
        // The completion is paid for: hold the charge through a database
        // blip rather than fail the turn and pay for it again.
        let never = || false;
        let outcome = retry_transient("charging a budget", self.patience, &never, || {
            self.ledger.charge(&charge)
        })
        .await?;
        match outcome {
            ChargeOutcome::Charged => {
                retry_transient("recording token usage", self.patience, &never, || {
                    self.ledger.record_usage(self.agent_handle, tokens)
                })
                .await?;
                Ok(())
            }
            ChargeOutcome::Refused(refusal) => Err(TurnError::BudgetExhausted { refusal }),
        }
    }
}

impl std::fmt::Debug for BudgetGate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetGate")
            .field("agent_id", &self.agent_id)
            .field("agent_handle", &self.agent_handle)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}
