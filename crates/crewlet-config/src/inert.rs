//! Keys that configure something Crewlet has not built yet. Their schema
//! carries `x-crewlet-inert` (the reason); a document that sets one is
//! accepted and gets one warning per such key, naming it.

use serde_json::Value;

use crate::yaml::YamlPath;

/// The schema keyword that marks a key with no effect yet.
pub(crate) const MARK: &str = "x-crewlet-inert";

/// Every key set in `value` whose schema (under `root`) is marked, with the
/// reason; the walk does not descend below a marked key.
pub(crate) fn inert_keys(root: &Value, value: &Value) -> Vec<(YamlPath, String)> {
    let mut out = Vec::new();
    walk(root, root, value, &YamlPath::root(), &mut out);
    out
}

fn resolve<'s>(root: &'s Value, mut schema: &'s Value) -> &'s Value {
    for _ in 0..16 {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => match r.strip_prefix('#').and_then(|p| root.pointer(p)) {
                Some(target) => schema = target,
                None => return schema,
            },
            None => break,
        }
    }
    schema
}

fn walk(
    root: &Value,
    schema: &Value,
    value: &Value,
    path: &YamlPath,
    out: &mut Vec<(YamlPath, String)>,
) {
    let schema = resolve(root, schema);
    if let Some(branches) = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array)
    {
        // The branch of the value's kind: objects into object schemas,
        // arrays into array schemas.
        for branch in branches {
            let b = resolve(root, branch);
            let fits = match value {
                Value::Object(_) => {
                    b.get("properties").is_some()
                        || b.get("additionalProperties").is_some_and(Value::is_object)
                }
                Value::Array(_) => b.get("items").is_some(),
                _ => false,
            };
            if fits {
                walk(root, b, value, path, out);
                return;
            }
        }
        return;
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for part in all {
            walk(root, part, value, path, out);
        }
    }
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, v) in map {
                let at = path.key(key);
                let Some(prop) = props.and_then(|p| p.get(key)).or(additional) else {
                    continue;
                };
                if let Some(reason) = prop.get(MARK).and_then(Value::as_str) {
                    // A nested struct serializes every field: a marked field
                    // still at its default was not set by the document.
                    if prop.get("default") != Some(v) {
                        out.push((at, reason.to_owned()));
                    }
                    continue;
                }
                walk(root, prop, v, &at, out);
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    walk(root, item, v, &path.index(i), out);
                }
            }
        }
        _ => {}
    }
}

/// The warning text for a marked key.
pub(crate) fn message(path: &YamlPath, reason: &str) -> String {
    let _ = path;
    format!("has no effect yet: {reason}")
}

/// The marked keys set in `value` (a document of `tier`) as warnings,
/// located in `tree` when there is one.
pub(crate) fn warnings<T: serde::Serialize>(
    source: &str,
    tier: crate::schema::Tier,
    value: &T,
    tree: Option<&crate::yaml::Node>,
) -> Vec<crate::error::Problem> {
    let Ok(json) = serde_json::to_value(value) else {
        return Vec::new();
    };
    inert_keys(tier.schema(), &json)
        .into_iter()
        .map(|(path, reason)| {
            let loc = tree.and_then(|t| t.key_loc(&path));
            let message = message(&path, &reason);
            crate::error::Problem::new(source, &path, loc, message)
        })
        .collect()
}
