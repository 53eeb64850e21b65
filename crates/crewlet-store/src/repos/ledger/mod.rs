//! The token budget ledger (`token_budget_usage`) and lifetime usage
//! (`token_usage`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewlet_core::AgentId;
use serde::{Deserialize, Serialize};

use crate::error::StoreError;

mod memory;
mod postgres;

pub use memory::MemoryTokenLedger;
pub use postgres::PostgresTokenLedger;

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
    /// Held by model calls in flight ([`TokenLedger::reserve`]).
    pub reserved_tokens: u64,
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
/// A hold on budget taken before a model call ([`TokenLedger::reserve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReservationId(pub uuid::Uuid);

/// What [`TokenLedger::reserve`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReserveOutcome {
    Reserved(ReservationId),
    Refused(BudgetRefusal),
}

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
    /// a conditional update (`used + held + n <= max`, or max 0 = unlimited). If
    /// either refuses, nothing is charged and the refusal names the budget.
    async fn charge(&self, charge: &BudgetCharge) -> Result<ChargeOutcome, StoreError>;

    /// Holds `charge.tokens` on the org and agent scopes before a model
    /// call, when used plus held plus `tokens` fits every cap; otherwise
    /// holds nothing and stamps the refusal like [`charge`](Self::charge).
    /// `tokens` must bound what the call can cost (prompt plus its output
    /// cap): then concurrent calls, across processes, never spend past a
    /// cap. Every reservation ends in [`settle`](Self::settle) or
    /// [`release`](Self::release).
    async fn reserve(&self, charge: &BudgetCharge) -> Result<ReserveOutcome, StoreError>;

    /// Ends a reservation: its hold goes and `actual` tokens are charged
    /// (all of them, even past the hold: they were spent). An unknown or
    /// already ended reservation is [`StoreError::NotFound`].
    async fn settle(&self, id: ReservationId, actual: u64) -> Result<(), StoreError>;

    /// Ends a reservation without charging (the call was never made).
    async fn release(&self, id: ReservationId) -> Result<(), StoreError>;

    /// Releases the reservations taken before `before` (a process died
    /// holding them); how many.
    async fn release_stale(&self, before: DateTime<Utc>) -> Result<usize, StoreError>;

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

#[cfg(test)]
mod tests {
    use super::*;
    use memory::fits;

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
