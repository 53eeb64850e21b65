//! [`TokenLedger`] in process memory.

use parking_lot::Mutex;
use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    BudgetCharge, BudgetRefusal, BudgetRow, BudgetType, ChargeOutcome, ORG_SCOPE, ReservationId,
    ReserveOutcome, TokenLedger, UsageRow, agent_scope, scope_kind,
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
    /// Open reservations: the scopes held, the tokens, when.
    reservations: HashMap<Uuid, (Vec<String>, u64, DateTime<Utc>)>,
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

impl MemoryLedgerState {
    /// Checks `charge` against both scopes (creating their rows) and, when
    /// it fits, adds it to each one's used (`hold` false) or held tokens.
    fn apply(&mut self, charge: &BudgetCharge, hold: bool) -> Result<Vec<String>, BudgetRefusal> {
        let now = Utc::now();
        let scopes = [
            (ORG_SCOPE.to_owned(), BudgetType::Org, charge.org_max),
            (
                agent_scope(&charge.agent_id),
                BudgetType::Agent,
                charge.agent_max,
            ),
        ];
        // Both rows exist afterwards, charged or not, so /budgets shows them.
        for (scope, kind, max) in &scopes {
            let row = self
                .budgets
                .entry(scope.clone())
                .or_insert_with(|| BudgetRow {
                    scope: scope.clone(),
                    budget_type: *kind,
                    agent_id: (*kind == BudgetType::Agent).then_some(charge.agent_id),
                    agent_handle: None,
                    used_tokens: 0,
                    reserved_tokens: 0,
                    max_tokens: *max,
                    refused_at: None,
                    updated_at: now,
                });
            row.max_tokens = *max;
            if *kind == BudgetType::Agent {
                row.agent_handle = Some(charge.agent_handle.clone());
            }
        }
        for (scope, kind, max) in &scopes {
            let Some(row) = self.budgets.get_mut(scope) else {
                continue;
            };
            let committed = row.used_tokens.saturating_add(row.reserved_tokens);
            if !fits(committed, charge.tokens, *max) {
                row.refused_at = Some(now);
                return Err(BudgetRefusal {
                    budget_type: *kind,
                    used_tokens: row.used_tokens,
                    max_tokens: *max,
                });
            }
        }
        for (scope, _, _) in &scopes {
            if let Some(row) = self.budgets.get_mut(scope) {
                let counter = if hold {
                    &mut row.reserved_tokens
                } else {
                    &mut row.used_tokens
                };
                *counter = counter.saturating_add(charge.tokens);
                row.updated_at = now;
            }
        }
        Ok(scopes.into_iter().map(|(scope, _, _)| scope).collect())
    }

    /// Ends reservation `id`, charging `actual`.
    fn finish(&mut self, id: ReservationId, actual: u64) -> Result<(), StoreError> {
        let (scopes, held, _) = self
            .reservations
            .remove(&id.0)
            .ok_or_else(|| StoreError::not_found("budget reservation", id.0))?;
        let now = Utc::now();
        for scope in scopes {
            if let Some(row) = self.budgets.get_mut(&scope) {
                row.reserved_tokens = row.reserved_tokens.saturating_sub(held);
                row.used_tokens = row.used_tokens.saturating_add(actual);
                row.updated_at = now;
            }
        }
        Ok(())
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
                state
                    .reservations
                    .insert(id, (scopes, charge.tokens, Utc::now()));
                ReserveOutcome::Reserved(ReservationId(id))
            }
            Err(refusal) => ReserveOutcome::Refused(refusal),
        })
    }

    async fn settle(&self, id: ReservationId, actual: u64) -> Result<(), StoreError> {
        self.lock().finish(id, actual)
    }

    async fn release(&self, id: ReservationId) -> Result<(), StoreError> {
        self.lock().finish(id, 0)
    }

    async fn release_stale(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        let mut state = self.lock();
        let stale: Vec<Uuid> = state
            .reservations
            .iter()
            .filter(|(_, (_, _, at))| *at < before)
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
        row.updated_at = Utc::now();
        Ok(())
    }

    async fn usage(&self) -> Result<Vec<UsageRow>, StoreError> {
        let mut rows: Vec<UsageRow> = self.lock().usage.values().cloned().collect();
        rows.sort_by(|a, b| a.agent_handle.cmp(&b.agent_handle));
        Ok(rows)
    }
}

/// `org` sorts first, then agent scopes by name.
fn scope_order(scope: &str) -> (bool, &str) {
    (scope != ORG_SCOPE, scope)
}
