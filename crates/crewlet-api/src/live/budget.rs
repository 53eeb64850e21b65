//! Budget state of the live view: what the token ledger has charged against
//! each cap. Budgets are enforced on the shared ledger (not by events), so
//! the API process reads the ledger every [`REFRESH`] and the hub turns a
//! change into seat and `budget` frames; a cap crossing 80% raises a
//! `budget_near` attention item once.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use crewlet_config::Organization;
use crewlet_store::{BudgetRow, ORG_SCOPE, agent_scope};
use serde::Serialize;

/// How often the API process reads the ledger.
pub const REFRESH: Duration = Duration::from_secs(2);

/// One budget: the cap of the active company and the ledger's counter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BudgetLive {
    pub used: u64,
    /// 0 = unlimited.
    pub max: u64,
    /// When the ledger last refused a charge (exhausted means refused).
    pub refused_at: Option<DateTime<Utc>>,
}

impl BudgetLive {
    /// At least 80% of a cap is used.
    pub fn near(&self) -> bool {
        self.max > 0 && self.used.saturating_mul(5) >= self.max.saturating_mul(4)
    }
}

/// Every budget of the active company, as last read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Budgets {
    pub org: BudgetLive,
    /// By seat handle (agent seats only).
    pub seats: HashMap<String, BudgetLive>,
}

impl Budgets {
    /// The caps of `org` (and the company cap `org_cap`) with the ledger
    /// `rows` charged against them.
    pub fn from_ledger(rows: &[BudgetRow], org: Option<&Organization>, org_cap: u64) -> Self {
        let by_scope: HashMap<&str, &BudgetRow> =
            rows.iter().map(|r| (r.scope.as_str(), r)).collect();
        let live = |max: u64, row: Option<&&BudgetRow>| BudgetLive {
            used: row.map_or(0, |r| r.used_tokens),
            max,
            refused_at: row.and_then(|r| r.refused_at),
        };
        let seats = org
            .map(|o| {
                o.agents()
                    .map(|s| {
                        let scope = agent_scope(&s.agent_id);
                        (
                            s.handle.clone(),
                            live(s.role.token_budget, by_scope.get(scope.as_str())),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            org: live(org_cap, by_scope.get(ORG_SCOPE)),
            seats,
        }
    }

    /// The `budget` object of the snapshot and of a `budget` frame.
    pub fn org_json(&self) -> serde_json::Value {
        serde_json::json!({ "org": self.org })
    }
}

/// What changed between two readings.
#[derive(Debug, Default)]
pub struct Change {
    pub org: bool,
    /// Seats whose budget moved.
    pub seats: Vec<String>,
    /// Scopes (`org` or a handle) that crossed 80% of their cap.
    pub near: Vec<String>,
}

/// Compares readings; `flagged` holds the scopes already reported near
/// (a scope leaves it when it falls back under 80%, after a reset).
pub fn diff(old: &Budgets, new: &Budgets, flagged: &mut HashSet<String>) -> Change {
    let mut change = Change {
        org: old.org != new.org,
        ..Change::default()
    };
    let mut check = |scope: &str, b: &BudgetLive| {
        if b.near() {
            if flagged.insert(scope.to_owned()) {
                change.near.push(scope.to_owned());
            }
        } else {
            flagged.remove(scope);
        }
    };
    check(ORG_SCOPE, &new.org);
    let mut handles: Vec<&String> = new.seats.keys().collect();
    handles.sort();
    for handle in handles {
        let b = &new.seats[handle];
        check(handle, b);
        // A seat never read before showed 0 used: only a real move is news.
        let before = old.seats.get(handle);
        if before.map_or(0, |o| o.used) != b.used
            || before.and_then(|o| o.refused_at) != b.refused_at
        {
            change.seats.push(handle.clone());
        }
    }
    change
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(used: u64, max: u64) -> BudgetLive {
        BudgetLive {
            used,
            max,
            refused_at: None,
        }
    }

    #[test]
    fn near_is_eighty_percent_of_a_cap() {
        assert!(!b(79, 100).near());
        assert!(b(80, 100).near());
        assert!(b(150, 100).near());
        assert!(!b(1_000, 0).near(), "no cap is never near");
    }

    #[test]
    fn a_crossing_is_reported_once_until_the_budget_falls_back() {
        let mut flagged = HashSet::new();
        let at = |used| Budgets {
            org: b(0, 0),
            seats: HashMap::from([("eng".to_owned(), b(used, 100))]),
        };
        let c = diff(&at(10), &at(85), &mut flagged);
        assert_eq!(c.near, vec!["eng".to_owned()]);
        assert_eq!(c.seats, vec!["eng".to_owned()]);
        assert!(!c.org);
        let c = diff(&at(85), &at(90), &mut flagged);
        assert!(c.near.is_empty(), "already reported");
        assert_eq!(c.seats, vec!["eng".to_owned()]);
        let c = diff(&at(90), &at(90), &mut flagged);
        assert!(c.seats.is_empty() && c.near.is_empty());
        // A reset brings it back under 80%; the next crossing is news again.
        diff(&at(90), &at(0), &mut flagged);
        let c = diff(&at(0), &at(95), &mut flagged);
        assert_eq!(c.near, vec!["eng".to_owned()]);
    }
}
