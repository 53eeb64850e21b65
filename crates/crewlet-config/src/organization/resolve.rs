//! Resolving a [`Company`] into an [`Organization`]: handles, leads,
//! explicit and implicit managers, cycles, and every seat's manager chain.
//! Each step is one pass over the seats (or units), with the names it needs
//! indexed first, so a company of any shape resolves in linear time.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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

/// Resolves the org chart and reports every problem of structure found
/// (errors) and every reference that resolves to nothing (warnings: the
/// original engine accepts those files, and so do we).
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

    // Unit names: the first of a name is the one references reach.
    let mut unit_names: HashMap<&str, usize> = HashMap::new();
    for (i, u) in units.iter().enumerate() {
        if let Some(&first) = unit_names.get(u.unit.name.as_str()) {
            findings.push(Finding::warning(
                u.yaml.key("name"),
                format!(
                    "unit name `{}` is already used by the unit at {}; `lead`, `manages` and `unit` references reach only the first",
                    u.unit.name, units[first].yaml
                ),
            ));
        } else {
            unit_names.insert(&u.unit.name, i);
        }
    }

    // Seats in the original's order: org-wide roles, then unit by unit (its
    // own roles, then those placed in it with `unit:`, then its sub-units').
    let roles_at = YamlPath::root().key("roles");
    let mut root_seats: Vec<SeatDraft> = Vec::new();
    let mut placed: Vec<Vec<SeatDraft>> = (0..units.len()).map(|_| Vec::new()).collect();
    for (i, role) in company.roles.iter().enumerate() {
        let yaml = roles_at.index(i);
        let home = role.unit.as_deref().filter(|u| !u.trim().is_empty());
        match home.map(|u| (u, unit_names.get(u).copied())) {
            Some((_, Some(u))) => placed[u].push(SeatDraft {
                role,
                yaml,
                unit: Some(u),
                handle: String::new(),
            }),
            Some((name, None)) => {
                findings.push(Finding::warning(
                    yaml.key("unit"),
                    format!("`unit: {name}` names no unit; the role stays org-wide"),
                ));
                root_seats.push(SeatDraft {
                    role,
                    yaml,
                    unit: None,
                    handle: String::new(),
                });
            }
            None => root_seats.push(SeatDraft {
                role,
                yaml,
                unit: None,
                handle: String::new(),
            }),
        }
    }
    let mut seats: Vec<SeatDraft> = root_seats;
    for (u, extra) in placed.into_iter().enumerate() {
        for (i, role) in units[u].unit.roles.iter().enumerate() {
            units[u].seats.push(seats.len());
            let yaml = units[u].yaml.key("roles").index(i);
            seats.push(SeatDraft {
                role,
                yaml,
                unit: Some(u),
                handle: String::new(),
            });
        }
        for draft in extra {
            units[u].seats.push(seats.len());
            seats.push(draft);
        }
    }

    // Handles: explicit or derived, valid and unique.
    let mut by_handle: HashMap<String, usize> = HashMap::new();
    for i in 0..seats.len() {
        let role = seats[i].role;
        let yaml = seats[i].yaml.clone();
        let (handle, at) = match role.explicit_handle() {
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
                (h.to_owned(), yaml.key("handle"))
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
                let how = if role.explicit_handle().is_some() {
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

    // Seats by name, in seat order (names need not be unique): a lead is
    // the first of its name, as the original engine looks roles up, and
    // `manages` reaches every role of the name, as its `get_manager` does.
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, s) in seats.iter().enumerate() {
        by_name.entry(s.role.name.as_str()).or_default().push(i);
    }
    let seats_named = |name: &str| -> Vec<usize> {
        match by_name.get(name) {
            Some(all) => all.clone(),
            None => by_handle.get(name).copied().into_iter().collect(),
        }
    };
    let seat_named = |name: &str| -> Option<usize> { seats_named(name).first().copied() };

    // Leads: own, else inherited from the parent. Resolved among the unit's
    // own roles first, then anywhere in the company.
    let n = seats.len();
    let mut lead: Vec<Option<usize>> = vec![None; units.len()];
    let mut inherited = vec![false; units.len()];
    let mut lead_name: Vec<Option<&str>> = vec![None; units.len()];
    for u in 0..units.len() {
        let own = units[u].unit.explicit_lead();
        let name = match (own, units[u].parent) {
            (Some(l), _) => Some(l),
            (None, Some(p)) => {
                inherited[u] = lead_name[p].is_some();
                lead_name[p]
            }
            (None, None) => None,
        };
        lead_name[u] = name;
        let Some(name) = name else { continue };
        // The unit's own roles, then its sub-units', then the company's.
        let is = |s: &usize| seats[*s].role.name == name || seats[*s].handle == name;
        let direct = units[u].seats.iter().copied().find(is);
        let below = || subtree_seats(&units, u).into_iter().find(is);
        lead[u] = direct.or_else(below).or_else(|| seat_named(name));
        if lead[u].is_none() && own.is_some() {
            findings.push(Finding::warning(
                units[u].yaml.key("lead"),
                format!(
                    "lead `{name}` names no role; unit `{}` has no lead until a role of that name exists",
                    units[u].unit.name
                ),
            ));
        }
    }

    // Who manages whom: explicit `manages` (roles, or units meaning every
    // role of the unit and its sub-units), then each unit's lead over the
    // unit's own roles that no role of the unit manages.
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut edge_at: HashMap<(usize, usize), YamlPath> = HashMap::new();
    for s in 0..n {
        for (j, name) in seats[s].role.manages.iter().enumerate() {
            let at = seats[s].yaml.key("manages").index(j);
            let named = seats_named(name);
            let targets: Vec<usize> = match named.as_slice() {
                [t] if *t == s => {
                    findings.push(Finding::warning(
                        at,
                        format!("`{name}` is this seat itself; ignored"),
                    ));
                    continue;
                }
                [_, ..] => named.into_iter().filter(|&t| t != s).collect(),
                [] => match unit_names.get(name.as_str()) {
                    Some(&u) => subtree_seats(&units, u)
                        .into_iter()
                        .filter(|&t| t != s)
                        .collect(),
                    None => {
                        findings.push(Finding::warning(
                            at,
                            format!("manages `{name}`, which names no role and no unit; ignored"),
                        ));
                        continue;
                    }
                },
            };
            for t in targets {
                if !edges[s].contains(&t) {
                    edges[s].push(t);
                    edge_at.entry((s, t)).or_insert_with(|| at.clone());
                }
            }
        }
    }
    for u in 0..units.len() {
        let Some(l) = lead[u] else { continue };
        let own = &units[u].seats;
        // The original does not auto-manage for a lead that is inherited and
        // is one of the unit's own roles.
        if inherited[u] && own.contains(&l) {
            continue;
        }
        let mentioned: HashSet<&str> = own
            .iter()
            .flat_map(|&s| seats[s].role.manages.iter().map(String::as_str))
            .collect();
        let lead_names = [seats[l].role.name.as_str(), seats[l].handle.as_str()];
        for &r in own {
            let named = mentioned.contains(seats[r].role.name.as_str())
                || mentioned.contains(seats[r].handle.as_str());
            let manages_lead = seats[r]
                .role
                .manages
                .iter()
                .any(|m| lead_names.contains(&m.as_str()));
            if r != l && !named && !manages_lead && !edges[l].contains(&r) {
                edges[l].push(r);
            }
        }
    }

    // A seat's manager is the first seat, in seat order, that manages it.
    let mut manager: Vec<Option<usize>> = vec![None; n];
    let mut managers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (s, targets) in edges.iter().enumerate() {
        for &t in targets {
            managers[t].push(s);
            if manager[t].is_none() {
                manager[t] = Some(s);
            }
        }
    }

    // Cycles: reported once each as a warning, and cut (the original
    // engine's manager chains stop where they would repeat).
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
                        .find(|&x| manager[x].is_some_and(|mx| edge_at.contains_key(&(mx, x))))
                        .unwrap_or(m);
                    let at = manager[cut]
                        .and_then(|mc| edge_at.get(&(mc, cut)).cloned())
                        .unwrap_or_else(|| seats[cut].yaml.clone());
                    findings.push(Finding::warning(
                        at,
                        format!(
                            "management cycle: {names} (each seat reports to the next); `{}` is treated as having no manager",
                            seats[cut].handle
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
    let mut chains = manager_chains(&manager, |s| seats[s].handle.as_str());
    let out_seats: Vec<Arc<Seat>> = seats
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut mcp_env: IndexMap<String, IndexMap<String, String>> = s
                .unit
                .map(|u| units[u].unit.mcp_env.clone())
                .unwrap_or_default();
            for (server, vars) in &s.role.mcp_env {
                let merged = mcp_env.entry(server.clone()).or_default();
                merged.extend(vars.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            Arc::new(Seat {
                handle: s.handle.clone(),
                name: s.role.name.clone(),
                agent_id: AgentId::for_seat(&company.name, &s.handle),
                kind: s.role.kind,
                unit: s.unit,
                unit_path: s.unit.map(|u| units[u].path.clone()).unwrap_or_default(),
                yaml_path: s.yaml.to_string(),
                manager: manager[i].map(|m| seats[m].handle.clone()),
                managers: managers[i]
                    .iter()
                    .map(|&m| seats[m].handle.clone())
                    .collect(),
                manager_chain: std::mem::take(&mut chains[i]),
                reports: edges[i].iter().map(|&t| seats[t].handle.clone()).collect(),
                mcp_env,
                role: s.role.clone(),
            })
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
            token_budget: u.unit.token_budget,
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

/// Seats of unit `u` and of every unit below it.
fn subtree_seats(units: &[UnitDraft<'_>], u: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut stack = vec![u];
    while let Some(x) = stack.pop() {
        out.extend(units[x].seats.iter().copied());
        stack.extend(units[x].children.iter().rev().copied());
    }
    out
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
