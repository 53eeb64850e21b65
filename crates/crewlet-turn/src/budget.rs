//! Holding, then charging, every completion against the org, unit and
//! agent budgets.
//!
//! Before a model call the gate reserves what the call can cost at most
//! (its prompt, estimated generously, plus its output cap) on every budget
//! the seat spends from; after it, the hold goes and the real tokens are
//! charged. Concurrent turns, across processes, therefore never spend past
//! a cap. A refusal that only calls still in flight explain (the budget
//! itself has room) waits for them to settle; a refusal of a spent budget
//! ends the turn as `budget_exhausted`.

use std::time::Duration;

use chrono::Utc;
use crewlet_core::{AgentId, BudgetPeriod};
use crewlet_llm::{CompletionRequest, Usage};
use crewlet_store::{
    BudgetCharge, BudgetWarning, Patience, ReservationId, ReserveOutcome, TokenLedger, UnitCap,
    retry_transient,
};

use crate::{CompanyProfile, SeatProfile, TurnError, UsageTracker};

/// The output bound of a call whose request and provider name none.
pub const DEFAULT_OUTPUT_BOUND: u64 = 8192;

/// How long a reservation refused only because of other calls' holds
/// waits for them, in all, before the turn gives up as `budget_exhausted`.
const HOLD_WAIT: Duration = Duration::from_secs(120);

/// The caps a seat's calls are charged against; 0 = unlimited.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BudgetLimits {
    /// The company's `token_budget`.
    pub org_max: u64,
    /// The role's `token_budget`.
    pub agent_max: u64,
    /// The seat's units' `token_budget`s.
    pub units: Vec<UnitCap>,
    /// The window the budgets count in.
    pub period: BudgetPeriod,
    /// The fraction of a cap that warns; 0 = never.
    pub warn_at: f64,
}

impl BudgetLimits {
    /// The limits `seat` of `company` spends under.
    pub fn of(company: &CompanyProfile, seat: &SeatProfile) -> Self {
        Self {
            org_max: company.token_budget,
            agent_max: seat.token_budget,
            units: seat.unit_budgets.clone(),
            period: company.budget_period,
            warn_at: company.budget_warn_at,
        }
    }

    /// A charge of `tokens` for the seat `agent_id` (`handle`) against
    /// these caps, in the current period.
    pub fn charge(&self, agent_id: AgentId, handle: &str, tokens: u64) -> BudgetCharge {
        let mut c = BudgetCharge::new(agent_id, handle, tokens, self.org_max, self.agent_max);
        c.units.clone_from(&self.units);
        c.window = self.period.window(Utc::now());
        c.warn_at = self.warn_at;
        c
    }
}

/// The `budget_warning` payload of a warning a settlement claimed.
pub fn warning_payload(w: &BudgetWarning, warn_at: f64) -> crewlet_core::payload::BudgetWarning {
    crewlet_core::payload::BudgetWarning {
        budget_type: w.budget_type.as_str().to_owned(),
        scope: w.scope.clone(),
        used_tokens: w.used_tokens,
        max_tokens: w.max_tokens,
        warn_at,
    }
}

/// The least output a hold shrunk to a budget's room still allows; below
/// it the budget counts as spent.
pub const MIN_OUTPUT: u64 = 64;

/// What a call's prompt can cost at most: a character counts as a token,
/// which over-counts every tokenizer in use.
pub fn prompt_bound(request: &CompletionRequest) -> u64 {
    let mut chars = 0usize;
    for block in &request.system {
        chars += block.text.len();
    }
    for message in &request.messages {
        chars += message.text_len();
    }
    for tool in &request.tools {
        chars += tool.name.len() + tool.description.len() + tool.parameters.to_string().len();
    }
    u64::try_from(chars).unwrap_or(u64::MAX)
}

/// What a call's output can cost at most: the request's cap, else the
/// provider's, else [`DEFAULT_OUTPUT_BOUND`].
pub fn output_bound(request: &CompletionRequest, provider_max_tokens: Option<u32>) -> u64 {
    request
        .max_tokens
        .or(provider_max_tokens)
        .map_or(DEFAULT_OUTPUT_BOUND, u64::from)
}

/// A hold taken by [`BudgetGate::reserve`]; end it with
/// [`BudgetGate::settle`] or [`BudgetGate::release`].
#[derive(Debug)]
#[must_use = "a hold must be settled or released"]
pub struct Hold {
    id: ReservationId,
    output_cap: u64,
}

impl Hold {
    /// The output cap the hold covers (smaller than asked when the budget
    /// had less room).
    pub fn output_cap(&self) -> u64 {
        self.output_cap
    }
}

/// What happens around every completion: hold its bound, count it in
/// process, charge it (org, units and agent at once, all or nothing), add
/// it to the agent's lifetime `token_usage`, and collect the warnings the
/// charge claimed.
#[derive(Clone)]
pub struct BudgetGate<'a> {
    pub ledger: &'a dyn TokenLedger,
    pub tracker: &'a UsageTracker,
    pub agent_id: AgentId,
    pub agent_handle: &'a str,
    pub limits: &'a BudgetLimits,
    /// The turn's own running total, if the caller keeps one.
    pub turn_usage: Option<&'a parking_lot::Mutex<Usage>>,
    /// Where the warnings a settlement claimed go (the caller publishes
    /// them as `budget_warning`).
    pub warnings: Option<&'a parking_lot::Mutex<Vec<BudgetWarning>>>,
    /// How long a charge is retried while the ledger's database is
    /// unavailable, before the turn fails as `store_unavailable` (and the
    /// engine puts its task back in the inbox).
    pub patience: Patience,
}

impl BudgetGate<'_> {
    fn charge_of(&self, tokens: u64) -> BudgetCharge {
        self.limits.charge(self.agent_id, self.agent_handle, tokens)
    }

    /// Holds what a call can cost before it is made: `prompt` (its
    /// estimated input) plus `output` (its output cap). When a budget has
    /// less room than that but more than the prompt and
    /// [`MIN_OUTPUT`] tokens, the hold shrinks to the room and
    /// [`Hold::output_cap`] tells the caller the smaller output cap to send.
    /// Waits (up to two minutes) while only other calls' holds stand in the
    /// way; a budget without room is [`TurnError::BudgetExhausted`].
    pub async fn reserve(&self, prompt: u64, output: u64) -> Result<Hold, TurnError> {
        let never = || false;
        let deadline = tokio::time::Instant::now() + HOLD_WAIT;
        let mut pause = Duration::from_millis(50);
        let mut output = output;
        loop {
            let bound = prompt.saturating_add(output);
            let charge = self.charge_of(bound);
            let outcome = retry_transient("reserving a budget", self.patience, &never, || {
                self.ledger.reserve(&charge)
            })
            .await?;
            let refusal = match outcome {
                ReserveOutcome::Reserved(id) => {
                    return Ok(Hold {
                        id,
                        output_cap: output,
                    });
                }
                ReserveOutcome::Refused(refusal) => refusal,
            };
            if refusal.is_spent(bound) {
                // What the budget has left, once the holds settle.
                let room = refusal.max_tokens.saturating_sub(refusal.used_tokens);
                let fits = room.saturating_sub(prompt);
                if fits >= MIN_OUTPUT && fits < output {
                    output = fits;
                    continue;
                }
                return Err(TurnError::BudgetExhausted { refusal });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(TurnError::BudgetExhausted { refusal });
            }
            tracing::debug!(
                agent = self.agent_handle,
                budget = refusal.budget_type.as_str(),
                held = refusal.reserved_tokens,
                "budget held by calls in flight; waiting"
            );
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }

    /// Ends a hold whose call was never answered: nothing is charged.
    pub async fn release(&self, hold: Hold) {
        let never = || false;
        if let Err(e) = retry_transient("releasing a budget hold", self.patience, &never, || {
            self.ledger.release(hold.id)
        })
        .await
        {
            // The hold is released by the ledger's stale sweep.
            tracing::warn!(agent = self.agent_handle, error = %e, "cannot release a budget hold; the stale sweep will");
        }
    }

    /// Counts and charges one completion's tokens against its hold.
    pub async fn settle(&self, hold: Hold, usage: &Usage) -> Result<(), TurnError> {
        self.count(usage);
        let tokens = usage.total();
        // The completion is paid for: hold the charge through a database
        // blip rather than fail the turn and pay for it again.
        let never = || false;
        let warnings = retry_transient("settling a budget hold", self.patience, &never, || {
            self.ledger.settle(hold.id, tokens)
        })
        .await?;
        if let Some(out) = self.warnings {
            out.lock().extend(warnings);
        }
        self.record(tokens).await
    }

    fn count(&self, usage: &Usage) {
        self.tracker.record(self.agent_id, self.agent_handle, usage);
        if let Some(turn) = self.turn_usage {
            turn.lock().add(usage);
        }
    }

    async fn record(&self, tokens: u64) -> Result<(), TurnError> {
        let never = || false;
        retry_transient("recording token usage", self.patience, &never, || {
            self.ledger.record_usage(self.agent_handle, tokens)
        })
        .await?;
        Ok(())
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
