//! Finding roles and units in a company document: org-wide roles, then
//! units in order, a unit's own roles before its sub-units'. A unit is
//! named by its `name`; a role by its `handle` or the handle derived from
//! its `name` (the original engine's keys).

use crewlet_config::derive_handle;
use serde_json::{Map, Value};

use super::text_of;

/// A unit: its index in `units`, then in each `children` down to it.
pub(super) type UnitPath = Vec<usize>;

/// Where a role is: the unit whose `roles` hold it (empty: the company's
/// own `roles`) and its index there.
pub(super) struct RolePlace {
    pub unit: UnitPath,
    pub index: usize,
}

/// The list `key` of the unit at `path` (`units[p0].children[p1]...`), or
/// of the document itself for an empty path.
pub(super) fn list_in<'a>(
    doc: &'a mut Map<String, Value>,
    path: &[usize],
    key: &str,
) -> Option<&'a mut Vec<Value>> {
    let mut node = doc;
    let mut list = "units";
    for &i in path {
        node = node
            .get_mut(list)?
            .as_array_mut()?
            .get_mut(i)?
            .as_object_mut()?;
        list = "children";
    }
    node.get_mut(key)?.as_array_mut()
}

/// The list holding the unit at `path` (non-empty), and its index there.
pub(super) fn unit_slot<'a>(
    doc: &'a mut Map<String, Value>,
    path: &[usize],
) -> Option<(&'a mut Vec<Value>, usize)> {
    let (&index, parent) = path.split_last()?;
    let key = if parent.is_empty() {
        "units"
    } else {
        "children"
    };
    list_in(doc, parent, key).map(|list| (list, index))
}

fn list<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A role's handle: its `handle`, else the one derived from its `name`.
pub(super) fn role_handle(role: &Value) -> String {
    match text_of(role, "handle") {
        Some(h) if !h.is_empty() => h.to_owned(),
        _ => derive_handle(text_of(role, "name").unwrap_or_default()),
    }
}

/// Whether `key` names the role: its `handle`, or the handle its name derives to.
fn is_role(role: &Value, key: &str) -> bool {
    text_of(role, "handle").is_some_and(|h| h == key)
        || text_of(role, "name").is_some_and(|n| derive_handle(n) == key)
}

/// Every role, with its place, in seat order.
pub(super) fn roles(doc: &Map<String, Value>) -> Vec<(RolePlace, &Value)> {
    fn walk<'a>(units: &'a [Value], path: &mut UnitPath, out: &mut Vec<(RolePlace, &'a Value)>) {
        for (i, unit) in units.iter().enumerate() {
            path.push(i);
            for (index, role) in list(unit, "roles").iter().enumerate() {
                out.push((
                    RolePlace {
                        unit: path.clone(),
                        index,
                    },
                    role,
                ));
            }
            walk(list(unit, "children"), path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    let root = doc.get("roles").and_then(Value::as_array);
    for (index, role) in root.map_or(&[][..], Vec::as_slice).iter().enumerate() {
        out.push((
            RolePlace {
                unit: Vec::new(),
                index,
            },
            role,
        ));
    }
    let units = doc.get("units").and_then(Value::as_array);
    walk(
        units.map_or(&[][..], Vec::as_slice),
        &mut Vec::new(),
        &mut out,
    );
    out
}

/// The first role `key` names.
pub(super) fn find_role(doc: &Map<String, Value>, key: &str) -> Option<RolePlace> {
    roles(doc)
        .into_iter()
        .find(|(_, r)| is_role(r, key))
        .map(|(place, _)| place)
}

/// The role at `place`.
pub(super) fn role_mut<'a>(
    doc: &'a mut Map<String, Value>,
    place: &RolePlace,
) -> Option<&'a mut Value> {
    list_in(doc, &place.unit, "roles")?.get_mut(place.index)
}

/// Every unit, with its path, parents first.
pub(super) fn units(doc: &Map<String, Value>) -> Vec<(UnitPath, &Value)> {
    fn walk<'a>(units: &'a [Value], path: &mut UnitPath, out: &mut Vec<(UnitPath, &'a Value)>) {
        for (i, unit) in units.iter().enumerate() {
            path.push(i);
            out.push((path.clone(), unit));
            walk(list(unit, "children"), path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    let top = doc.get("units").and_then(Value::as_array);
    walk(
        top.map_or(&[][..], Vec::as_slice),
        &mut Vec::new(),
        &mut out,
    );
    out
}

/// The first unit named `name`.
pub(super) fn find_unit(doc: &Map<String, Value>, name: &str) -> Option<UnitPath> {
    units(doc)
        .into_iter()
        .find(|(_, u)| text_of(u, "name") == Some(name))
        .map(|(path, _)| path)
}

/// The names a unit's subtree makes referable: its units' names and its
/// roles' names and handles.
pub(super) fn subtree_names(unit: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(name) = text_of(unit, "name") {
        out.push(name.to_owned());
    }
    for role in list(unit, "roles") {
        out.extend(text_of(role, "name").map(str::to_owned));
        out.push(role_handle(role));
    }
    for child in list(unit, "children") {
        out.extend(subtree_names(child));
    }
    out
}
