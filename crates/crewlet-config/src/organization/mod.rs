//! The resolved org chart: every seat with its handle, agent id, unit,
//! manager chain and reports; every unit with its effective lead.
//!
//! Rules (the original engine's organization model): a unit's lead is
//! inherited from the parent unit when unset, and may live anywhere in the
//! company; the lead manages the unit's own roles that no role of the unit
//! `manages`; `manages` names roles or units (every role of the unit and its
//! sub-units); a seat may have several managers, and its manager is the
//! first in seat order. Unknown names and cycles are warnings.

mod chain;
mod resolve;
mod schedules;

use std::collections::HashMap;
use std::sync::Arc;

use crewlet_core::AgentId;
use indexmap::IndexMap;
use serde::Serialize;

pub use chain::{ManagerChain, ManagerChainIter};
pub(crate) use resolve::resolve;
pub use schedules::ScheduleTargets;

use crate::company::{Company, Role, SeatKind};

/// A resolved company.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Organization {
    company: String,
    units: Vec<OrgUnit>,
    /// Shared: the engine's seat runtimes hold the same seats.
    seats: Vec<Arc<Seat>>,
    #[serde(skip)]
    by_handle: HashMap<String, usize>,
}

/// A unit with its place in the tree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrgUnit {
    pub name: String,
    /// The unit's `type`.
    pub kind: String,
    /// Names from the top-level unit down to this one.
    pub path: Vec<String>,
    /// Where the unit is in the company file, e.g. `units[0].children[1]`.
    pub yaml_path: String,
    /// Index of the parent in [`Organization::units`].
    pub parent: Option<usize>,
    /// Indexes of the sub-units in [`Organization::units`].
    pub children: Vec<usize>,
    /// Handle of the effective lead (own, or inherited from a parent unit).
    pub lead: Option<String>,
    /// True when `lead` comes from a parent unit.
    pub lead_inherited: bool,
    /// Handles of the unit's own seats (not those of sub-units).
    pub seats: Vec<String>,
    /// The unit's `token_budget`; 0 = unlimited.
    pub token_budget: u64,
}

/// One seat of the company.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Seat {
    pub handle: String,
    pub name: String,
    pub agent_id: AgentId,
    pub kind: SeatKind,
    /// Index of the seat's unit in [`Organization::units`]; `None` for
    /// org-wide roles.
    pub unit: Option<usize>,
    /// Unit names from the top down; empty for org-wide roles.
    pub unit_path: Vec<String>,
    /// Where the role is in the company file, e.g. `units[0].roles[2]`.
    pub yaml_path: String,
    /// Handle of the seat's manager: the first of `managers`.
    pub manager: Option<String>,
    /// Handles of every seat that manages this one, in seat order.
    pub managers: Vec<String>,
    /// Handles of the managers from the nearest up to the top of the
    /// company. Seats share the common part of their chains, so a company of
    /// n seats holds n links however deep it is.
    pub manager_chain: ManagerChain,
    /// Handles of the seats this one manages directly (some may have an
    /// earlier manager too).
    pub reports: Vec<String>,
    /// MCP credentials per server: the unit's `mcp_env`, overlaid by the
    /// role's own.
    pub mcp_env: IndexMap<String, IndexMap<String, String>>,
    /// The role as written in the company file.
    pub role: Role,
}

impl Seat {
    pub fn is_agent(&self) -> bool {
        self.kind == SeatKind::Agent
    }
}

impl Organization {
    /// Resolves `company`. For a company that passed validation this is
    /// exact; otherwise it is a best effort (see [`Company::validate`]).
    pub fn new(company: &Company) -> Organization {
        resolve(company).0
    }

    /// The company's name.
    pub fn company(&self) -> &str {
        &self.company
    }

    /// Every unit, parents before children, in file order.
    pub fn units(&self) -> &[OrgUnit] {
        &self.units
    }

    /// Top-level units.
    pub fn roots(&self) -> impl Iterator<Item = &OrgUnit> {
        self.units.iter().filter(|u| u.parent.is_none())
    }

    pub fn unit(&self, name: &str) -> Option<&OrgUnit> {
        self.units.iter().find(|u| u.name == name)
    }

    /// Every seat: org-wide roles first, then unit by unit in file order.
    pub fn seats(&self) -> &[Arc<Seat>] {
        &self.seats
    }

    /// Agent seats only (the ones that run turns).
    pub fn agents(&self) -> impl Iterator<Item = &Arc<Seat>> {
        self.seats.iter().filter(|s| s.is_agent())
    }

    pub fn seat(&self, handle: &str) -> Option<&Arc<Seat>> {
        self.by_handle.get(handle).map(|&i| &self.seats[i])
    }

    /// The units with a `token_budget` that `seat` spends from: its own
    /// unit and every unit above it, innermost first, as (name, cap).
    pub fn unit_budgets(&self, seat: &Seat) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let mut at = seat.unit;
        while let Some(i) = at {
            let Some(unit) = self.units.get(i) else { break };
            if unit.token_budget > 0 {
                out.push((unit.name.clone(), unit.token_budget));
            }
            at = unit.parent;
        }
        out
    }

    pub fn seat_by_id(&self, id: AgentId) -> Option<&Arc<Seat>> {
        self.seats.iter().find(|s| s.agent_id == id)
    }

    /// Seats of unit `index` and of all its sub-units.
    pub fn seats_under(&self, index: usize) -> Vec<&Seat> {
        let mut out = Vec::new();
        let mut stack = vec![index];
        while let Some(u) = stack.pop() {
            let Some(unit) = self.units.get(u) else {
                continue;
            };
            out.extend(
                unit.seats
                    .iter()
                    .filter_map(|h| self.seat(h))
                    .map(Arc::as_ref),
            );
            stack.extend(unit.children.iter().rev());
        }
        out
    }
}

/// Lower case; every run of other characters becomes one `-`; no `-` at the ends.
pub fn derive_handle(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    // Unicode lower case first, as the original engine's `str.lower()`:
    // `K` (Kelvin sign) becomes `k`, `İ` becomes `i` and a combining dot.
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// `[a-z0-9][a-z0-9-]*`.
pub fn is_valid_handle(handle: &str) -> bool {
    let mut bytes = handle.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_derive_from_names() {
        assert_eq!(
            derive_handle("Chief Technology Officer"),
            "chief-technology-officer"
        );
        assert_eq!(derive_handle("  Head of R&D!! "), "head-of-r-d");
        assert_eq!(derive_handle("CTO"), "cto");
        assert_eq!(derive_handle("Ünïcode Ops"), "n-code-ops");
        assert_eq!(derive_handle("日本"), "");
        // Python's `"\u212aelvin İzmir".lower()` then `[^a-z0-9]+` -> `-`.
        assert_eq!(derive_handle("\u{212a}elvin \u{130}zmir"), "kelvin-i-zmir");
    }

    #[test]
    fn handle_pattern() {
        for ok in ["eng", "0x", "a-b-", "cto2"] {
            assert!(is_valid_handle(ok), "{ok}");
        }
        for bad in ["", "-a", "Eng", "a_b", "a b", "é"] {
            assert!(!is_valid_handle(bad), "{bad}");
        }
    }
}
