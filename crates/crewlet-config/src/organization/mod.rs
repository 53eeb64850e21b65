//! The resolved org chart: every seat with its handle, agent id, unit,
//! manager chain and reports; every unit with its effective lead.
//!
//! Rules (SPEC §1): a unit's lead is inherited from the parent unit when
//! unset; the lead manages the unit's seats that nobody `manages` (a lead
//! itself reports to the nearest lead above it); `manages` may name a unit,
//! meaning that unit's own roles; unknown names, two managers for one seat
//! and cycles are errors.

use std::collections::HashMap;

use crewlet_core::AgentId;
use indexmap::IndexMap;
use serde::Serialize;

use crate::check::Finding;
use crate::company::{Company, Role, SeatKind, Unit};
use crate::yaml::YamlPath;

/// A resolved company.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Organization {
    company: String,
    units: Vec<OrgUnit>,
    seats: Vec<Seat>,
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
    /// Handle of the seat's manager.
    pub manager: Option<String>,
    /// Managers from the nearest up to the top of the company.
    pub manager_chain: Vec<String>,
    /// Handles of the seats this one manages directly.
    pub reports: Vec<String>,
    /// `mcp_env` of the enclosing units, top down, overlaid by the role's own.
    pub mcp_env: IndexMap<String, String>,
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
    pub fn seats(&self) -> &[Seat] {
        &self.seats
    }

    /// Agent seats only (the ones that run turns).
    pub fn agents(&self) -> impl Iterator<Item = &Seat> {
        self.seats.iter().filter(|s| s.is_agent())
    }

    pub fn seat(&self, handle: &str) -> Option<&Seat> {
        self.by_handle.get(handle).map(|&i| &self.seats[i])
    }

    pub fn seat_by_id(&self, id: AgentId) -> Option<&Seat> {
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
            out.extend(unit.seats.iter().filter_map(|h| self.seat(h)));
            stack.extend(unit.children.iter().rev());
        }
        out
    }
}

/// Lower case; every run of other characters becomes one `-`; no `-` at the ends.
pub fn derive_handle(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
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

struct UnitDraft<'a> {
    unit: &'a Unit,
    yaml: YamlPath,
    parent: Option<usize>,
    path: Vec<String>,
    children: Vec<usize>,
    seats: Vec<usize>,
}

struct SeatDraft<'a> {
    role: &'a Role,
    yaml: YamlPath,
    unit: Option<usize>,
    handle: String,
}

enum Target {
    Seat(usize),
    Unit(usize),
}

fn flatten_units<'a>(
    list: &'a [Unit],
    parent: Option<usize>,
    yaml: &YamlPath,
    parent_path: &[String],
    out: &mut Vec<UnitDraft<'a>>,
) {
    for (i, unit) in list.iter().enumerate() {
        let index = out.len();
        let at = yaml.index(i);
        let mut path = parent_path.to_vec();
        path.push(unit.name.clone());
        if let Some(p) = parent {
            out[p].children.push(index);
        }
        out.push(UnitDraft {
            unit,
            yaml: at.clone(),
            parent,
            path: path.clone(),
            children: Vec::new(),
            seats: Vec::new(),
        });
        flatten_units(&unit.children, Some(index), &at.key("children"), &path, out);
    }
}

/// Resolves the org chart and reports every problem of structure found.
pub(crate) fn resolve(company: &Company) -> (Organization, Vec<Finding>) {
    let mut findings = Vec::new();

    let mut units = Vec::new();
    flatten_units(
        &company.units,
        None,
        &YamlPath::root().key("units"),
        &[],
        &mut units,
    );

    let mut seats: Vec<SeatDraft> = Vec::new();
    let roles_at = YamlPath::root().key("roles");
    for (i, role) in company.roles.iter().enumerate() {
        seats.push(SeatDraft {
            role,
            yaml: roles_at.index(i),
            unit: None,
            handle: String::new(),
        });
    }
    for (u, draft) in units.iter_mut().enumerate() {
        for (i, role) in draft.unit.roles.iter().enumerate() {
            draft.seats.push(seats.len());
            let yaml = draft.yaml.key("roles").index(i);
            seats.push(SeatDraft {
                role,
                yaml,
                unit: Some(u),
                handle: String::new(),
            });
        }
    }

    // Handles: explicit or derived, valid and unique.
    let mut by_handle: HashMap<String, usize> = HashMap::new();
    for i in 0..seats.len() {
        let role = seats[i].role;
        let yaml = seats[i].yaml.clone();
        let (handle, at) = match &role.handle {
            Some(h) => {
                if !is_valid_handle(h) {
                    findings.push(Finding::new(
                        yaml.key("handle"),
                        format!(
                            "handle `{h}` must match [a-z0-9][a-z0-9-]* (lower case letters, digits, `-`); try `{}`",
                            derive_handle(h)
                        ),
                    ));
                }
                (h.clone(), yaml.key("handle"))
            }
            None => {
                let derived = derive_handle(&role.name);
                if derived.is_empty() {
                    findings.push(Finding::new(
                        yaml.key("name"),
                        format!(
                            "cannot derive a handle from name `{}`; set `handle`",
                            role.name
                        ),
                    ));
                }
                (derived, yaml.key("name"))
            }
        };
        if !handle.is_empty() {
            if let Some(&first) = by_handle.get(&handle) {
                let how = if role.handle.is_some() {
                    ""
                } else {
                    " (derived from the name)"
                };
                findings.push(Finding::new(
                    at,
                    format!(
                        "handle `{handle}`{how} is already used by the seat at {}; handles must be unique",
                        seats[first].yaml
                    ),
                ));
            } else {
                by_handle.insert(handle.clone(), i);
            }
        }
        seats[i].handle = handle;
    }

    // Unit names are unique (`manages` and routing refer to them).
    let mut unit_names: HashMap<&str, usize> = HashMap::new();
    for (i, u) in units.iter().enumerate() {
        if let Some(&first) = unit_names.get(u.unit.name.as_str()) {
            findings.push(Finding::new(
                u.yaml.key("name"),
                format!(
                    "unit name `{}` is already used by the unit at {}; unit names must be unique",
                    u.unit.name, units[first].yaml
                ),
            ));
        } else {
            unit_names.insert(&u.unit.name, i);
        }
    }

    let lookup = |name: &str| -> Result<Target, String> {
        if let Some(&i) = by_handle.get(name) {
            return Ok(Target::Seat(i));
        }
        let by_name: Vec<usize> = seats
            .iter()
            .enumerate()
            .filter(|(_, s)| s.role.name == name)
            .map(|(i, _)| i)
            .collect();
        match by_name.as_slice() {
            [one] => return Ok(Target::Seat(*one)),
            [_, _, ..] => {
                let handles: Vec<&str> =
                    by_name.iter().map(|&i| seats[i].handle.as_str()).collect();
                return Err(format!(
                    "`{name}` is the name of {} roles; use a handle: {}",
                    by_name.len(),
                    handles.join(", ")
                ));
            }
            [] => {}
        }
        if let Some(&u) = unit_names.get(name) {
            return Ok(Target::Unit(u));
        }
        Err(format!(
            "`{name}` names no role (by handle or name) and no unit"
        ))
    };

    // Leads: own, else inherited. Parents come before children in `units`.
    let mut lead: Vec<Option<usize>> = vec![None; units.len()];
    let mut inherited = vec![false; units.len()];
    for u in 0..units.len() {
        let own = units[u].unit.lead.as_deref().and_then(|name| {
            let found = units[u].seats.iter().copied().find(|&s| {
                seats[s].handle == name || seats[s].role.name == name
            });
            if found.is_none() {
                let at = units[u].yaml.key("lead");
                let mine: Vec<&str> =
                    units[u].seats.iter().map(|&s| seats[s].handle.as_str()).collect();
                let message = match lookup(name) {
                    Ok(Target::Seat(s)) => format!(
                        "lead `{name}` is not a role of unit `{}` but of {}; a lead must be one of the unit's own roles",
                        units[u].unit.name,
                        match seats[s].unit {
                            Some(other) => format!("unit `{}`", units[other].unit.name),
                            None => "the org-wide roles".into(),
                        }
                    ),
                    _ if mine.is_empty() => format!(
                        "lead `{name}` is not a role of unit `{}`, which has no roles of its own",
                        units[u].unit.name
                    ),
                    _ => format!(
                        "lead `{name}` is not a role of unit `{}` (its roles: {})",
                        units[u].unit.name,
                        mine.join(", ")
                    ),
                };
                findings.push(Finding::new(at, message));
            }
            found
        });
        match (own, units[u].parent) {
            (Some(s), _) => lead[u] = Some(s),
            (None, Some(p)) => {
                lead[u] = lead[p];
                inherited[u] = lead[p].is_some();
            }
            (None, None) => {}
        }
    }

    // Explicit management.
    let n = seats.len();
    let mut manager: Vec<Option<usize>> = vec![None; n];
    let mut edge_at: Vec<Option<YamlPath>> = vec![None; n];
    for s in 0..n {
        for (j, name) in seats[s].role.manages.iter().enumerate() {
            let at = seats[s].yaml.key("manages").index(j);
            let targets = match lookup(name) {
                Ok(Target::Seat(t)) if t == s => {
                    findings.push(Finding::new(at, format!("`{name}` is this seat itself")));
                    continue;
                }
                Ok(Target::Seat(t)) => vec![t],
                Ok(Target::Unit(u)) => units[u].seats.iter().copied().filter(|&t| t != s).collect(),
                Err(message) => {
                    findings.push(Finding::new(at, format!("manages {message}")));
                    continue;
                }
            };
            for t in targets {
                match manager[t] {
                    None => {
                        manager[t] = Some(s);
                        edge_at[t] = Some(at.clone());
                    }
                    Some(m) if m == s => {}
                    Some(m) => findings.push(Finding::new(
                        at.clone(),
                        format!(
                            "`{}` is already managed by `{}` ({}); a seat has one manager",
                            seats[t].handle,
                            seats[m].handle,
                            edge_at[t]
                                .as_ref()
                                .map(ToString::to_string)
                                .unwrap_or_default()
                        ),
                    )),
                }
            }
        }
    }

    // Implicit management: the nearest lead above that is not the seat itself.
    for t in 0..n {
        if manager[t].is_some() {
            continue;
        }
        let mut unit = seats[t].unit;
        while let Some(u) = unit {
            if let Some(l) = lead[u].filter(|&l| l != t) {
                manager[t] = Some(l);
                break;
            }
            unit = units[u].parent;
        }
    }

    // Cycles: report each once, at an explicit `manages` entry on it, and cut it.
    let mut state = vec![0u8; n];
    for start in 0..n {
        if state[start] != 0 {
            continue;
        }
        let mut stack = Vec::new();
        let mut cur = start;
        loop {
            state[cur] = 1;
            stack.push(cur);
            match manager[cur] {
                Some(m) if state[m] == 0 => cur = m,
                Some(m) if state[m] == 1 => {
                    let from = stack.iter().position(|&x| x == m).unwrap_or(0);
                    let cycle = &stack[from..];
                    let mut names: Vec<&str> =
                        cycle.iter().map(|&x| seats[x].handle.as_str()).collect();
                    names.push(&seats[m].handle);
                    let cut = cycle
                        .iter()
                        .copied()
                        .find(|&x| edge_at[x].is_some())
                        .unwrap_or(m);
                    let at = edge_at[cut]
                        .clone()
                        .unwrap_or_else(|| seats[cut].yaml.clone());
                    findings.push(Finding::new(
                        at,
                        format!(
                            "management cycle: {} (each seat reports to the next)",
                            names.join(" -> ")
                        ),
                    ));
                    manager[cut] = None;
                    break;
                }
                _ => break,
            }
        }
        for x in stack {
            state[x] = 2;
        }
    }

    // Seats out.
    let mut reports: Vec<Vec<String>> = vec![Vec::new(); n];
    for t in 0..n {
        if let Some(m) = manager[t] {
            reports[m].push(seats[t].handle.clone());
        }
    }
    let out_seats: Vec<Seat> = seats
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut chain = Vec::new();
            let mut cur = manager[i];
            while let Some(m) = cur {
                if chain.len() > n {
                    break;
                }
                chain.push(seats[m].handle.clone());
                cur = manager[m];
            }
            let mut mcp_env = IndexMap::new();
            if let Some(u) = s.unit {
                let mut line = vec![u];
                let mut p = units[u].parent;
                while let Some(x) = p {
                    line.push(x);
                    p = units[x].parent;
                }
                for x in line.into_iter().rev() {
                    mcp_env.extend(
                        units[x]
                            .unit
                            .mcp_env
                            .iter()
                            .map(|(k, v)| (k.clone(), v.clone())),
                    );
                }
            }
            mcp_env.extend(s.role.mcp_env.iter().map(|(k, v)| (k.clone(), v.clone())));
            Seat {
                handle: s.handle.clone(),
                name: s.role.name.clone(),
                agent_id: AgentId::for_seat(&company.name, &s.handle),
                kind: s.role.kind,
                unit: s.unit,
                unit_path: s.unit.map(|u| units[u].path.clone()).unwrap_or_default(),
                yaml_path: s.yaml.to_string(),
                manager: manager[i].map(|m| seats[m].handle.clone()),
                manager_chain: chain,
                reports: std::mem::take(&mut reports[i]),
                mcp_env,
                role: s.role.clone(),
            }
        })
        .collect();
    let out_units = units
        .iter()
        .enumerate()
        .map(|(i, u)| OrgUnit {
            name: u.unit.name.clone(),
            kind: u.unit.kind.clone(),
            path: u.path.clone(),
            yaml_path: u.yaml.to_string(),
            parent: u.parent,
            children: u.children.clone(),
            lead: lead[i].map(|l| seats[l].handle.clone()),
            lead_inherited: inherited[i],
            seats: u.seats.iter().map(|&s| seats[s].handle.clone()).collect(),
        })
        .collect();
    let org = Organization {
        company: company.name.clone(),
        units: out_units,
        seats: out_seats,
        by_handle,
    };
    (org, findings)
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
