//! Resolving a [`Company`] into an [`Organization`]: handles, leads,
//! explicit and implicit managers, cycles, and every seat's manager chain.
//! Each step is one pass over the seats (or units), with the names it needs
//! indexed first, so a company of any shape resolves in linear time.

use std::collections::HashMap;

use crewlet_core::AgentId;
use indexmap::IndexMap;

use super::chain::ManagerChain;
use super::{OrgUnit, Organization, Seat, derive_handle, is_valid_handle};
use crate::check::Finding;
use crate::company::{Company, Role, Unit};
use crate::yaml::YamlPath;

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

    // Seats by role name, in seat order (names need not be unique).
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, s) in seats.iter().enumerate() {
        by_name.entry(s.role.name.as_str()).or_default().push(i);
    }
    let lookup = |name: &str| -> Result<Target, String> {
        if let Some(&i) = by_handle.get(name) {
            return Ok(Target::Seat(i));
        }
        let by_name = by_name.get(name).map_or(&[][..], Vec::as_slice);
        match by_name {
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
                    let names = cycle_names(&names);
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
                        format!("management cycle: {names} (each seat reports to the next)"),
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
    let mut chains = manager_chains(&manager, |s| seats[s].handle.as_str());
    let out_seats: Vec<Seat> = seats
        .iter()
        .enumerate()
        .map(|(i, s)| {
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
                manager_chain: std::mem::take(&mut chains[i]),
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

/// Every seat's manager chain, given each seat's manager (no cycles left).
/// Each seat's chain is built once, after its manager's: linear time, and
/// one shared link per seat with reports.
fn manager_chains<'a>(
    manager: &[Option<usize>],
    handle: impl Fn(usize) -> &'a str,
) -> Vec<ManagerChain> {
    let n = manager.len();
    // `above[s]`: the chain of a seat that `s` manages (s, then s's managers).
    let mut above: Vec<Option<ManagerChain>> = vec![None; n];
    let mut pending = Vec::new();
    for start in 0..n {
        let mut cur = start;
        // Up to the first seat whose link exists or that has no manager.
        while above[cur].is_none() && pending.len() <= n {
            pending.push(cur);
            match manager[cur] {
                Some(m) => cur = m,
                None => break,
            }
        }
        while let Some(s) = pending.pop() {
            let up = manager[s]
                .and_then(|m| above[m].clone())
                .unwrap_or_default();
            above[s] = Some(ManagerChain::under(handle(s).to_owned(), up));
        }
    }
    (0..n)
        .map(|s| {
            manager[s]
                .and_then(|m| above[m].clone())
                .unwrap_or_default()
        })
        .collect()
}

/// The handles of a cycle (the first repeated at the end), joined by `->`;
/// a long cycle shows its first and last seats and counts the rest.
fn cycle_names(names: &[&str]) -> String {
    const SHOWN: usize = 10;
    let total = names.len();
    if total <= 2 * SHOWN + 1 {
        return names.join(" -> ");
    }
    format!(
        "{} -> ... {} more ... -> {}",
        names[..SHOWN].join(" -> "),
        total - 2 * SHOWN,
        names[total - SHOWN..].join(" -> ")
    )
}
