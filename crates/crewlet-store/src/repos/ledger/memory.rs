//! [`TokenLedger`] in process memory.

use parking_lot::Mutex;
use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    BudgetCharge, BudgetRefusal, BudgetRow, BudgetType, BudgetWarning, ChargeOutcome, ORG_SCOPE,
    ReservationId, ReserveOutcome, TokenLedger, UsageRow, new_period, scope_kind,
};
use crate::error::StoreError;

/// The ledger in process memory: same semantics, nothing survives a restart.
#[derive(Debug, Default)]
pub struct MemoryTokenLedger {
    state: Mutex<MemoryLedgerState>,
}

#[derive(Debug, Default)]
struct MemoryLedgerState {
    budgets: HashMap<String, BudgetRow>,
    usage: HashMap<String, UsageRow>,
    reservations: HashMap<Uuid, Hold>,
}

impl MemoryTokenLedger {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, MemoryLedgerState> {
        // A panic while holding the lock cannot leave a half-charged ledger
        // (charges are applied after both checks), so poison is harmless.
        self.state.lock()
    }
}

pub(super) fn fits(used: u64, tokens: u64, max: u64) -> bool {
    max == 0 || used.checked_add(tokens).is_some_and(|total| total <= max)
}

/// Whether `used` has reached `warn_at` of a cap (never for no cap or no
/// warning).
pub(super) fn crosses(used: u64, max: u64, warn_at: f64) -> bool {
    if max == 0 || warn_at.is_nan() || warn_at <= 0.0 {
        return false;
    }
    // Caps are far below 2^53: the product is exact enough.
    #[allow(clippy::cast_precision_loss)]
    let threshold = (max as f64 * warn_at).ceil();
    #[allow(clippy::cast_precision_loss)]
    let used = used as f64;
    used >= threshold
}

/// An open reservation: the scopes held, the tokens, the warning
/// fraction, when.
#[derive(Debug)]
struct Hold {
    scopes: Vec<String>,
    tokens: u64,
    warn_at: f64,
    at: DateTime<Utc>,
}

impl MemoryLedgerState {
    /// Checks `charge` against every scope (creating their rows, starting
    /// a new period where one began) and, when it fits all, adds it to
    /// each one's used (`hold` false) or held tokens.
    fn apply(&mut self, charge: &BudgetCharge, hold: bool) -> Result<Vec<String>, BudgetRefusal> {
        let now = Utc::now();
        let scopes = charge.scopes();
        // Every row exists afterwards, charged or not, so /budgets shows them.
        for cap in &scopes {
            let row = self
                .budgets
                .entry(cap.scope.clone())
                .or_insert_with(|| BudgetRow {
                    scope: cap.scope.clone(),
                    budget_type: cap.kind,
                    agent_id: (cap.kind == BudgetType::Agent).then_some(charge.agent_id),
                    agent_handle: None,
                    used_tokens: 0,
                    reserved_tokens: 0,
                    max_tokens: cap.max,
                    refused_at: None,
                    updated_at: now,
                    period_start: None,
                    warned_at: None,
                });
            row.max_tokens = cap.max;
            if cap.kind == BudgetType::Agent {
                row.agent_handle = Some(charge.agent_handle.clone());
            }
            if new_period(row.period_start, charge.window) {
                row.used_tokens = 0;
                row.refused_at = None;
                row.warned_at = None;
                row.period_start = charge.window;
            }
        }
        for cap in &scopes {
            let Some(row) = self.budgets.get_mut(&cap.scope) else {
                continue;
            };
            let committed = row.used_tokens.saturating_add(row.reserved_tokens);
            if !fits(committed, charge.tokens, cap.max) {
                row.refused_at = Some(now);
                return Err(BudgetRefusal {
                    budget_type: cap.kind,
                    used_tokens: row.used_tokens,
                    max_tokens: cap.max,
                    reserved_tokens: row.reserved_tokens,
                    unit: row.unit().map(str::to_owned),
                });
            }
        }
        for cap in &scopes {
            if let Some(row) = self.budgets.get_mut(&cap.scope) {
                let counter = if hold {
                    &mut row.reserved_tokens
                } else {
                    &mut row.used_tokens
                };
                *counter = counter.saturating_add(charge.tokens);
                row.updated_at = now;
            }
        }
        Ok(scopes.into_iter().map(|c| c.scope).collect())
    }

    /// Ends reservation `id`, charging `actual`; the warnings it claims.
    fn finish(&mut self, id: ReservationId, actual: u64) -> Result<Vec<BudgetWarning>, StoreError> {
        let hold = self
            .reservations
            .remove(&id.0)
            .ok_or_else(|| StoreError::not_found("budget reservation", id.0))?;
        let now = Utc::now();
        let mut warnings = Vec::new();
        for scope in hold.scopes {
            if let Some(row) = self.budgets.get_mut(&scope) {
                row.reserved_tokens = row.reserved_tokens.saturating_sub(hold.tokens);
                row.used_tokens = row.used_tokens.saturating_add(actual);
                row.updated_at = now;
                if row.warned_at.is_none() && crosses(row.used_tokens, row.max_tokens, hold.warn_at)
                {
                    row.warned_at = Some(now);
                    warnings.push(BudgetWarning {
                        scope: row.scope.clone(),
                        budget_type: row.budget_type,
                        used_tokens: row.used_tokens,
                        max_tokens: row.max_tokens,
                    });
                }
            }
        }
        Ok(warnings)
    }
}

#[async_trait]
impl TokenLedger for MemoryTokenLedger {
    async fn charge(&self, charge: &BudgetCharge) -> Result<ChargeOutcome, StoreError> {
        Ok(match self.lock().apply(charge, false) {
            Ok(_) => ChargeOutcome::Charged,
            Err(refusal) => ChargeOutcome::Refused(refusal),
        })
    }

    async fn reserve(&self, charge: &BudgetCharge) -> Result<ReserveOutcome, StoreError> {
        let mut state = self.lock();
        Ok(match state.apply(charge, true) {
            Ok(scopes) => {
                let id = Uuid::new_v4();
                state.reservations.insert(
                    id,
                    Hold {
                        scopes,
                        tokens: charge.tokens,
                        warn_at: charge.warn_at,
                        at: Utc::now(),
                    },
                );
                ReserveOutcome::Reserved(ReservationId(id))
            }
            Err(refusal) => ReserveOutcome::Refused(refusal),
        })
    }

    async fn settle(
        &self,
        id: ReservationId,
        actual: u64,
    ) -> Result<Vec<BudgetWarning>, StoreError> {
        self.lock().finish(id, actual)
    }

    async fn release(&self, id: ReservationId) -> Result<(), StoreError> {
        self.lock().finish(id, 0).map(drop)
    }

    async fn scope_rows(&self, scopes: &[String]) -> Result<Vec<BudgetRow>, StoreError> {
        let state = self.lock();
        Ok(scopes
            .iter()
            .filter_map(|s| state.budgets.get(s).cloned())
            .collect())
    }

    async fn release_stale(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        let mut state = self.lock();
        let stale: Vec<Uuid> = state
            .reservations
            .iter()
            .filter(|(_, hold)| hold.at < before)
            .map(|(id, _)| *id)
            .collect();
        for id in &stale {
            state.finish(ReservationId(*id), 0)?;
        }
        Ok(stale.len())
    }

    async fn record_usage(&self, agent_handle: &str, tokens: u64) -> Result<(), StoreError> {
        let now = Utc::now();
        let mut state = self.lock();
        let row = state
            .usage
            .entry(agent_handle.to_owned())
            .or_insert_with(|| UsageRow {
                agent_handle: agent_handle.to_owned(),
                tokens_used: 0,
                updated_at: now,
            });
        row.tokens_used = row.tokens_used.saturating_add(tokens);
        row.updated_at = now;
        Ok(())
    }

    async fn budgets(&self) -> Result<Vec<BudgetRow>, StoreError> {
        let mut rows: Vec<BudgetRow> = self.lock().budgets.values().cloned().collect();
        rows.sort_by(|a, b| scope_order(&a.scope).cmp(&scope_order(&b.scope)));
        Ok(rows)
    }

    async fn reset(&self, scope: &str) -> Result<(), StoreError> {
        scope_kind(scope)?;
        let mut state = self.lock();
        let row = state
            .budgets
            .get_mut(scope)
            .ok_or_else(|| StoreError::not_found("budget scope", scope))?;
        row.used_tokens = 0;
        row.refused_at = None;
        row.warned_at = None;
        row.updated_at = Utc::now();
        Ok(())
    }

    async fn usage(&self) -> Result<Vec<UsageRow>, StoreError> {
        let mut rows: Vec<UsageRow> = self.lock().usage.values().cloned().collect();
        rows.sort_by(|a, b| a.agent_handle.cmp(&b.agent_handle));
        Ok(rows)
    }
}

/// `org` sorts first, then units, then agents, each by name.
fn scope_order(scope: &str) -> (bool, bool, &str) {
    (scope != ORG_SCOPE, scope.starts_with("agent:"), scope)
}
