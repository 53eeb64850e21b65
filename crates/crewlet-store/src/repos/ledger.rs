//! The token budget ledger (`token_budget_usage`) and lifetime usage
//! (`token_usage`).

use parking_lot::Mutex;
use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewlet_core::AgentId;
use serde::{Deserialize, Serialize};

use crate::db::Database;
use crate::error::{StoreError, describe, query_err};
use crate::sql::{from_i64, to_i64};

/// Which budget refused a charge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetType {
    Org,
    Agent,
}

impl BudgetType {
    /// The serde name: `org` or `agent`.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetType::Org => "org",
            BudgetType::Agent => "agent",
        }
    }
}

/// One LLM completion's tokens, charged to the org and the agent at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetCharge {
    pub agent_id: AgentId,
    pub agent_handle: String,
    pub tokens: u64,
    /// Org-wide cap; 0 = unlimited.
    pub org_max: u64,
    /// This agent's cap; 0 = unlimited.
    pub agent_max: u64,
}

/// Why a charge was refused: the budget, what it had used, and its cap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetRefusal {
    pub budget_type: BudgetType,
    pub used_tokens: u64,
    pub max_tokens: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChargeOutcome {
    Charged,
    Refused(BudgetRefusal),
}

/// One ledger row, for `GET /budgets` and `crewlet budgets show`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetRow {
    /// `org` or `agent:{agent_id}`.
    pub scope: String,
    pub budget_type: BudgetType,
    pub agent_id: Option<AgentId>,
    pub agent_handle: Option<String>,
    pub used_tokens: u64,
    /// 0 = unlimited.
    pub max_tokens: u64,
    pub refused_at: Option<DateTime<Utc>>,
    pub updated_at: DateTime<Utc>,
}

/// Lifetime tokens of one agent (`token_usage`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRow {
    pub agent_handle: String,
    pub tokens_used: u64,
    pub updated_at: DateTime<Utc>,
}

/// The scope key of the org budget.
pub const ORG_SCOPE: &str = "org";

/// The scope key of one agent's budget, `agent:{agent_id}`.
pub fn agent_scope(agent_id: &AgentId) -> String {
    format!("agent:{agent_id}")
}

fn scope_kind(scope: &str) -> Result<(BudgetType, Option<AgentId>), StoreError> {
    if scope == ORG_SCOPE {
        return Ok((BudgetType::Org, None));
    }
    let id = scope
        .strip_prefix("agent:")
        .and_then(|id| id.parse::<AgentId>().ok())
        .ok_or_else(|| {
            StoreError::invalid(
                "budget scope",
                format!("`{scope}` is neither `org` nor `agent:{{agent id}}`"),
            )
        })?;
    Ok((BudgetType::Agent, Some(id)))
}

/// Budgets and lifetime usage. The turn engine charges after every LLM
/// completion; the API and CLI read and reset.
#[async_trait]
pub trait TokenLedger: Send + Sync {
    /// Charges the org scope and the agent scope in one transaction, each with
    /// a conditional update (`used + n <= max`, or max 0 = unlimited). If
    /// either refuses, nothing is charged and the refusal names the budget.
    async fn charge(&self, charge: &BudgetCharge) -> Result<ChargeOutcome, StoreError>;

    /// Adds `tokens` to the agent's lifetime total (`token_usage` upsert).
    async fn record_usage(&self, agent_handle: &str, tokens: u64) -> Result<(), StoreError>;

    /// Every budget row, org first, then agents by scope.
    async fn budgets(&self) -> Result<Vec<BudgetRow>, StoreError>;

    /// Sets a scope's usage back to 0 and clears its refusal.
    /// An unknown scope is [`StoreError::NotFound`].
    async fn reset(&self, scope: &str) -> Result<(), StoreError>;

    /// Lifetime totals of every agent, by handle.
    async fn usage(&self) -> Result<Vec<UsageRow>, StoreError>;
}

/// The ledger in process memory: same semantics, nothing survives a restart.
#[derive(Debug, Default)]
pub struct MemoryTokenLedger {
    state: Mutex<MemoryLedgerState>,
}

#[derive(Debug, Default)]
struct MemoryLedgerState {
    budgets: HashMap<String, BudgetRow>,
    usage: HashMap<String, UsageRow>,
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

fn fits(used: u64, tokens: u64, max: u64) -> bool {
    max == 0 || used.checked_add(tokens).is_some_and(|total| total <= max)
}

#[async_trait]
impl TokenLedger for MemoryTokenLedger {
    async fn charge(&self, charge: &BudgetCharge) -> Result<ChargeOutcome, StoreError> {
        let now = Utc::now();
        let mut state = self.lock();
        let agent_key = agent_scope(&charge.agent_id);
        let scopes = [
            (ORG_SCOPE.to_owned(), BudgetType::Org, charge.org_max),
            (agent_key, BudgetType::Agent, charge.agent_max),
        ];
        // Both rows exist afterwards, charged or not, so /budgets shows them.
        for (scope, kind, max) in &scopes {
            let row = state
                .budgets
                .entry(scope.clone())
                .or_insert_with(|| BudgetRow {
                    scope: scope.clone(),
                    budget_type: *kind,
                    agent_id: (*kind == BudgetType::Agent).then_some(charge.agent_id),
                    agent_handle: None,
                    used_tokens: 0,
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
            let Some(row) = state.budgets.get_mut(scope) else {
                continue;
            };
            if !fits(row.used_tokens, charge.tokens, *max) {
                row.refused_at = Some(now);
                return Ok(ChargeOutcome::Refused(BudgetRefusal {
                    budget_type: *kind,
                    used_tokens: row.used_tokens,
                    max_tokens: *max,
                }));
            }
        }
        for (scope, _, _) in &scopes {
            if let Some(row) = state.budgets.get_mut(scope) {
                row.used_tokens = row.used_tokens.saturating_add(charge.tokens);
                row.updated_at = now;
            }
        }
        Ok(ChargeOutcome::Charged)
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

/// The ledger in PostgreSQL (`token_budget_usage`, `token_usage`).
#[derive(Clone, Debug)]
pub struct PostgresTokenLedger {
    db: Database,
}

impl PostgresTokenLedger {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

const ENSURE_SCOPE: &str = "INSERT INTO token_budget_usage (scope, agent_handle, max_tokens)
     VALUES ($1, $2::text, $3::int8)
     ON CONFLICT (scope) DO NOTHING";

const CHARGE_SCOPE: &str = "UPDATE token_budget_usage
     SET used_tokens = used_tokens + $2::int8,
         max_tokens = $3::int8,
         agent_handle = coalesce($4::text, agent_handle),
         updated_at = now()
     WHERE scope = $1 AND ($3::int8 = 0 OR used_tokens + $2::int8 <= $3::int8)
     RETURNING used_tokens";

const REFUSED_SCOPE: &str = "UPDATE token_budget_usage
     SET refused_at = now(), max_tokens = $2::int8
     WHERE scope = $1
     RETURNING used_tokens";

#[async_trait]
impl TokenLedger for PostgresTokenLedger {
    async fn charge(&self, charge: &BudgetCharge) -> Result<ChargeOutcome, StoreError> {
        let tokens = to_i64("tokens", charge.tokens)?;
        let org_max = to_i64("org budget", charge.org_max)?;
        let agent_max = to_i64("agent budget", charge.agent_max)?;
        let agent_key = agent_scope(&charge.agent_id);
        let handle = Some(charge.agent_handle.as_str());
        let mut client = self.db.client().await?;
        // Org first, then agent: every charge locks in the same order, so
        // concurrent charges cannot deadlock.
        let scopes: [(&str, Option<&str>, i64, BudgetType); 2] = [
            (ORG_SCOPE, None, org_max, BudgetType::Org),
            (&agent_key, handle, agent_max, BudgetType::Agent),
        ];
        // Both rows exist afterwards, charged or not, so /budgets shows them.
        for (scope, handle, max, _) in &scopes {
            client
                .execute(ENSURE_SCOPE, &[scope, handle, max])
                .await
                .map_err(query_err(format!("creating budget scope `{scope}`")))?;
        }
        let tx = client
            .transaction()
            .await
            .map_err(query_err("starting a budget charge"))?;
        let mut refused = None;
        for (scope, handle, max, kind) in &scopes {
            let row = tx
                .query_opt(CHARGE_SCOPE, &[scope, &tokens, max, handle])
                .await
                .map_err(query_err(format!("charging budget scope `{scope}`")))?;
            if row.is_none() {
                refused = Some((*scope, *max, *kind));
                break;
            }
        }
        let Some((scope, max, kind)) = refused else {
            tx.commit()
                .await
                .map_err(query_err("committing a budget charge"))?;
            return Ok(ChargeOutcome::Charged);
        };
        // Nothing is charged: roll back, then stamp the refusal on its own.
        tx.rollback()
            .await
            .map_err(query_err("rolling back a refused budget charge"))?;
        let row = client
            .query_opt(REFUSED_SCOPE, &[&scope, &max])
            .await
            .map_err(query_err(format!("recording a refusal on `{scope}`")))?;
        let used = match row {
            Some(r) => from_i64(
                "token_budget_usage.used_tokens",
                r.try_get(0)
                    .map_err(|e| StoreError::decode("token_budget_usage", describe(&e)))?,
            )?,
            None => 0,
        };
        Ok(ChargeOutcome::Refused(BudgetRefusal {
            budget_type: kind,
            used_tokens: used,
            max_tokens: charge_max(kind, charge),
        }))
    }

    async fn record_usage(&self, agent_handle: &str, tokens: u64) -> Result<(), StoreError> {
        let tokens = to_i64("tokens", tokens)?;
        let client = self.db.client().await?;
        client
            .execute(
                "INSERT INTO token_usage (agent_handle, tokens_used) VALUES ($1, $2)
                 ON CONFLICT (agent_handle) DO UPDATE
                 SET tokens_used = token_usage.tokens_used + EXCLUDED.tokens_used,
                     updated_at = now()",
                &[&agent_handle, &tokens],
            )
            .await
            .map_err(query_err(format!(
                "recording token usage of `{agent_handle}`"
            )))?;
        Ok(())
    }

    async fn budgets(&self) -> Result<Vec<BudgetRow>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT scope, agent_handle, used_tokens, max_tokens, refused_at, updated_at
                 FROM token_budget_usage
                 ORDER BY scope <> 'org', scope",
                &[],
            )
            .await
            .map_err(query_err("reading budgets"))?;
        rows.iter()
            .map(|r| {
                let d = |e: tokio_postgres::Error| {
                    StoreError::decode("token_budget_usage", describe(&e))
                };
                let scope: String = r.try_get(0).map_err(d)?;
                let (budget_type, agent_id) = scope_kind(&scope)?;
                Ok(BudgetRow {
                    budget_type,
                    agent_id,
                    agent_handle: r.try_get(1).map_err(d)?,
                    used_tokens: from_i64("used_tokens", r.try_get(2).map_err(d)?)?,
                    max_tokens: from_i64("max_tokens", r.try_get(3).map_err(d)?)?,
                    refused_at: r.try_get(4).map_err(d)?,
                    updated_at: r.try_get(5).map_err(d)?,
                    scope,
                })
            })
            .collect()
    }

    async fn reset(&self, scope: &str) -> Result<(), StoreError> {
        scope_kind(scope)?;
        let client = self.db.client().await?;
        let n = client
            .execute(
                "UPDATE token_budget_usage
                 SET used_tokens = 0, refused_at = NULL, updated_at = now()
                 WHERE scope = $1",
                &[&scope],
            )
            .await
            .map_err(query_err(format!("resetting budget scope `{scope}`")))?;
        if n == 0 {
            return Err(StoreError::not_found("budget scope", scope));
        }
        Ok(())
    }

    async fn usage(&self) -> Result<Vec<UsageRow>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT agent_handle, tokens_used, updated_at FROM token_usage ORDER BY agent_handle",
                &[],
            )
            .await
            .map_err(query_err("reading token usage"))?;
        rows.iter()
            .map(|r| {
                let d = |e: tokio_postgres::Error| StoreError::decode("token_usage", describe(&e));
                Ok(UsageRow {
                    agent_handle: r.try_get(0).map_err(d)?,
                    tokens_used: from_i64("tokens_used", r.try_get(1).map_err(d)?)?,
                    updated_at: r.try_get(2).map_err(d)?,
                })
            })
            .collect()
    }
}

fn charge_max(kind: BudgetType, charge: &BudgetCharge) -> u64 {
    match kind {
        BudgetType::Org => charge.org_max,
        BudgetType::Agent => charge.agent_max,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_type_is_lower_case_on_the_wire() {
        assert_eq!(
            serde_json::to_string(&BudgetType::Org).ok().as_deref(),
            Some("\"org\"")
        );
        assert_eq!(
            serde_json::to_string(&BudgetType::Agent).ok().as_deref(),
            Some("\"agent\"")
        );
    }

    #[test]
    fn scopes_are_read_back() {
        let id = AgentId::for_seat("Acme", "eng");
        assert_eq!(scope_kind("org").ok(), Some((BudgetType::Org, None)));
        assert_eq!(
            scope_kind(&agent_scope(&id)).ok(),
            Some((BudgetType::Agent, Some(id)))
        );
        assert!(scope_kind("team:x").is_err());
        assert!(scope_kind("agent:not-a-uuid").is_err());
    }

    #[test]
    fn zero_max_is_unlimited() {
        assert!(fits(u64::MAX - 1, 1, 0));
        assert!(fits(5, 5, 10));
        assert!(!fits(6, 5, 10));
        assert!(!fits(u64::MAX, 1, u64::MAX));
    }
}
