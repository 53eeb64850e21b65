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
    /// A unit's budget, shared by the seats of the unit and its sub-units.
    Unit,
    Agent,
}

impl BudgetType {
    /// The serde name: `org` or `agent`.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetType::Org => "org",
            BudgetType::Unit => "unit",
            BudgetType::Agent => "agent",
        }
    }
}

/// A unit's cap in a [`BudgetCharge`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitCap {
    /// The unit's name.
    pub unit: String,
    /// 0 = unlimited.
    pub max: u64,
}

/// One LLM completion's tokens, charged to the org, the seat's units and
/// the agent at once.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetCharge {
    pub agent_id: AgentId,
    pub agent_handle: String,
    pub tokens: u64,
    /// Org-wide cap; 0 = unlimited.
    pub org_max: u64,
    /// This agent's cap; 0 = unlimited.
    pub agent_max: u64,
    /// The caps of the units the seat sits in (its own and the ones above
    /// it) that have one.
    pub units: Vec<UnitCap>,
    /// The start of the current budget period (`budget_policy.period`);
    /// a row whose period started before it counts from 0 again. `None`:
    /// no period, usage accumulates until reset.
    pub window: Option<DateTime<Utc>>,
    /// The fraction of a cap at which a settlement claims the scope's
    /// warning (once per period); 0 = no warnings.
    pub warn_at: f64,
}

impl BudgetCharge {
    /// A charge against the org and agent caps only, no period, no warning.
    pub fn new(
        agent_id: AgentId,
        agent_handle: &str,
        tokens: u64,
        org_max: u64,
        agent_max: u64,
    ) -> Self {
        Self {
            agent_id,
            agent_handle: agent_handle.to_owned(),
            tokens,
            org_max,
            agent_max,
            units: Vec::new(),
            window: None,
            warn_at: 0.0,
        }
    }

    /// Every scope the charge touches, with its cap, in the one order all
    /// charges take their locks in: org, units by name, agent.
    pub(crate) fn scopes(&self) -> Vec<ScopeCap> {
        let mut units: Vec<&UnitCap> = self.units.iter().collect();
        units.sort_by(|a, b| a.unit.cmp(&b.unit));
        units.dedup_by(|a, b| a.unit == b.unit);
        let mut out = Vec::with_capacity(units.len() + 2);
        out.push(ScopeCap {
            scope: ORG_SCOPE.to_owned(),
            kind: BudgetType::Org,
            max: self.org_max,
        });
        out.extend(units.into_iter().map(|u| ScopeCap {
            scope: unit_scope(&u.unit),
            kind: BudgetType::Unit,
            max: u.max,
        }));
        out.push(ScopeCap {
            scope: agent_scope(&self.agent_id),
            kind: BudgetType::Agent,
            max: self.agent_max,
        });
        out
    }
}

/// One scope a charge touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScopeCap {
    pub scope: String,
    pub kind: BudgetType,
    pub max: u64,
}

/// Why a charge was refused: the budget, what it had used, and its cap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetRefusal {
    pub budget_type: BudgetType,
    pub used_tokens: u64,
    pub max_tokens: u64,
    /// Held by calls in flight when the reservation was refused: a
    /// refusal that only holds explain (`used + asked <= max`) passes
    /// once they settle.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reserved_tokens: u64,
    /// The unit, for a unit budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl BudgetRefusal {
    /// The ledger scope that refused (`agent_id` is the charging seat's).
    pub fn scope(&self, agent_id: &AgentId) -> String {
        match self.budget_type {
            BudgetType::Org => ORG_SCOPE.to_owned(),
            BudgetType::Unit => unit_scope(self.unit.as_deref().unwrap_or_default()),
            BudgetType::Agent => agent_scope(agent_id),
        }
    }

    /// True when the budget itself has no room for the call, as opposed to
    /// room taken only by calls still in flight.
    pub fn is_spent(&self, asked: u64) -> bool {
        self.max_tokens > 0 && self.used_tokens.saturating_add(asked) > self.max_tokens
    }
}

/// A scope whose warning a settlement claimed: it crossed
/// [`BudgetCharge::warn_at`] of its cap for the first time this period.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetWarning {
    pub scope: String,
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
    /// The start of the period `used_tokens` counts in, when the budget
    /// has a period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_start: Option<DateTime<Utc>>,
    /// When this period's warning was published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warned_at: Option<DateTime<Utc>>,
}

impl BudgetRow {
    /// The unit's name, for a unit budget.
    pub fn unit(&self) -> Option<&str> {
        self.scope.strip_prefix("unit:")
    }
}

/// Lifetime tokens of one agent (`token_usage`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRow {
    pub agent_handle: String,
    pub tokens_used: u64,
    pub updated_at: DateTime<Utc>,
}

/// A hold on budget taken before a model call ([`TokenLedger::reserve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReservationId(pub uuid::Uuid);

/// What [`TokenLedger::reserve`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReserveOutcome {
    Reserved(ReservationId),
    Refused(BudgetRefusal),
}

/// The scope key of the org budget.
pub const ORG_SCOPE: &str = "org";

/// The scope key of one agent's budget, `agent:{agent_id}`.
pub fn agent_scope(agent_id: &AgentId) -> String {
    format!("agent:{agent_id}")
}

/// The scope key of one unit's budget, `unit:{name}`.
pub fn unit_scope(unit: &str) -> String {
    format!("unit:{unit}")
}

/// Whether a row whose period started at `row_start` starts over in the
/// period that began at `window`.
pub fn new_period(row_start: Option<DateTime<Utc>>, window: Option<DateTime<Utc>>) -> bool {
    match (row_start, window) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(r), Some(w)) => r < w,
    }
}

fn scope_kind(scope: &str) -> Result<(BudgetType, Option<AgentId>), StoreError> {
    if scope == ORG_SCOPE {
        return Ok((BudgetType::Org, None));
    }
    if scope.strip_prefix("unit:").is_some_and(|u| !u.is_empty()) {
        return Ok((BudgetType::Unit, None));
    }
    let id = scope
        .strip_prefix("agent:")
        .and_then(|id| id.parse::<AgentId>().ok())
        .ok_or_else(|| {
            StoreError::invalid(
                "budget scope",
                format!("`{scope}` is not `org`, `unit:{{name}}` or `agent:{{agent id}}`"),
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
    /// (all of them, even past the hold: they were spent). Returns the
    /// scopes whose warning this settlement claimed (used reached the
    /// reservation's `warn_at` of the cap, first time this period: across
    /// processes exactly one settlement claims it). An unknown or already
    /// ended reservation is [`StoreError::NotFound`].
    async fn settle(
        &self,
        id: ReservationId,
        actual: u64,
    ) -> Result<Vec<BudgetWarning>, StoreError>;

    /// The rows of these scopes (those that exist), for the pause check
    /// before a turn.
    async fn scope_rows(&self, scopes: &[String]) -> Result<Vec<BudgetRow>, StoreError>;

    /// Ends a reservation without charging (the call was never made).
    async fn release(&self, id: ReservationId) -> Result<(), StoreError>;

    /// Releases the reservations taken before `before` (a process died
    /// holding them); how many.
    async fn release_stale(&self, before: DateTime<Utc>) -> Result<usize, StoreError>;

    /// Adds `tokens` to the agent's lifetime total (`token_usage` upsert).
    async fn record_usage(&self, agent_handle: &str, tokens: u64) -> Result<(), StoreError>;

    /// Every budget row, org first, then agents by scope.
    async fn budgets(&self) -> Result<Vec<BudgetRow>, StoreError>;

    /// Sets a scope's usage back to 0 and clears its refusal and warning.
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
