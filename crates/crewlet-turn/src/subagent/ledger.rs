//! A child's token cap: a [`TokenLedger`] in front of the seat's own that
//! refuses a hold which would take the child past its share, and passes
//! everything else through (so the org, unit and agent budgets and the
//! usage ledger are charged exactly as for the parent's calls).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewlet_store::{
    BudgetCharge, BudgetRefusal, BudgetRow, BudgetType, BudgetWarning, ChargeOutcome,
    ReservationId, ReserveOutcome, StoreError, TokenLedger, UsageRow,
};
use parking_lot::Mutex;

#[derive(Default)]
struct Spent {
    used: u64,
    held: HashMap<ReservationId, u64>,
}

impl Spent {
    fn held(&self) -> u64 {
        self.held.values().sum()
    }
}

/// The seat's ledger with a cap of `cap` tokens on top.
pub(super) struct CappedLedger {
    inner: Arc<dyn TokenLedger>,
    cap: u64,
    spent: Mutex<Spent>,
    /// The cap (not a budget behind it) refused a hold.
    tripped: AtomicBool,
}

impl CappedLedger {
    pub fn new(inner: Arc<dyn TokenLedger>, cap: u64) -> Self {
        Self {
            inner,
            cap,
            spent: Mutex::new(Spent::default()),
            tripped: AtomicBool::new(false),
        }
    }

    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// Whether the cap refused a call.
    pub fn tripped(&self) -> bool {
        self.tripped.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl TokenLedger for CappedLedger {
    async fn charge(&self, charge: &BudgetCharge) -> Result<ChargeOutcome, StoreError> {
        let outcome = self.inner.charge(charge).await?;
        if outcome == ChargeOutcome::Charged {
            self.spent.lock().used += charge.tokens;
        }
        Ok(outcome)
    }

    async fn reserve(&self, charge: &BudgetCharge) -> Result<ReserveOutcome, StoreError> {
        {
            let spent = self.spent.lock();
            let held = spent.held();
            if spent
                .used
                .saturating_add(held)
                .saturating_add(charge.tokens)
                > self.cap
            {
                self.tripped.store(true, Ordering::Relaxed);
                // Shaped like the agent budget refusing: the gate shrinks the
                // call to the room left, or ends the loop as budget exhausted.
                return Ok(ReserveOutcome::Refused(BudgetRefusal {
                    budget_type: BudgetType::Agent,
                    used_tokens: spent.used,
                    max_tokens: self.cap,
                    reserved_tokens: held,
                    unit: None,
                }));
            }
        }
        let outcome = self.inner.reserve(charge).await?;
        if let ReserveOutcome::Reserved(id) = &outcome {
            self.spent.lock().held.insert(*id, charge.tokens);
        }
        Ok(outcome)
    }

    async fn settle(
        &self,
        id: ReservationId,
        actual: u64,
    ) -> Result<Vec<BudgetWarning>, StoreError> {
        let warnings = self.inner.settle(id, actual).await?;
        let mut spent = self.spent.lock();
        spent.held.remove(&id);
        spent.used = spent.used.saturating_add(actual);
        Ok(warnings)
    }

    async fn scope_rows(&self, scopes: &[String]) -> Result<Vec<BudgetRow>, StoreError> {
        self.inner.scope_rows(scopes).await
    }

    async fn release(&self, id: ReservationId) -> Result<(), StoreError> {
        self.inner.release(id).await?;
        self.spent.lock().held.remove(&id);
        Ok(())
    }

    async fn release_stale(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        self.inner.release_stale(before).await
    }

    async fn record_usage(&self, agent_handle: &str, tokens: u64) -> Result<(), StoreError> {
        self.inner.record_usage(agent_handle, tokens).await
    }

    async fn budgets(&self) -> Result<Vec<BudgetRow>, StoreError> {
        self.inner.budgets().await
    }

    async fn reset(&self, scope: &str) -> Result<(), StoreError> {
        self.inner.reset(scope).await
    }

    async fn usage(&self) -> Result<Vec<UsageRow>, StoreError> {
        self.inner.usage().await
    }
}
