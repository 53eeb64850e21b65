//! A tool as one short signature line for a small model's prompt:
//! `name(arg: string, opt?: [integer], mode: "a"|"b")` instead of its JSON
//! Schema. The schema's shape is still enforced while decoding (the answer
//! grammar is built from the full schema, see [`crate::grammar`]), so the
//! prompt only has to name the arguments and hint their types; a small model
//! reads the short form better, and every prompt token costs prefill time.
//! Argument descriptions are left out; the tool's own description is kept.

use serde_json::{Map, Value};

/// `name(arguments)`.
pub fn signature(name: &str, parameters: &Value) -> String {
    let mut seen = Vec::new();
    let args = match properties(parameters) {
        Some((props, required)) => fields(props, &required, "", &mut seen),
        None => String::new(),
    };
    format!("{name}({args})")
}

/// A string enum long enough to be worth naming once: its values and where
/// it was first written out.
struct SeenEnum {
    values: Vec<Value>,
    path: String,
}

/// Enums at most this long are written out wherever they appear.
const SHORT_ENUM: usize = 4;

fn properties(schema: &Value) -> Option<(&Map<String, Value>, Vec<&str>)> {
    let props = schema.get("properties")?.as_object()?;
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    Some((props, required))
}

fn fields(
    props: &Map<String, Value>,
    required: &[&str],
    prefix: &str,
    seen: &mut Vec<SeenEnum>,
) -> String {
    props
        .iter()
        .map(|(key, schema)| {
            let optional = if required.contains(&key.as_str()) {
                ""
            } else {
                "?"
            };
            let path = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            format!("{key}{optional}: {}", sketch(schema, &path, seen))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn sketch(schema: &Value, path: &str, seen: &mut Vec<SeenEnum>) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return enumeration(values, path, seen);
    }
    if let Some(value) = schema.get("const") {
        return value.to_string();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = schema.get(key).and_then(Value::as_array) {
            return options
                .iter()
                .map(|o| sketch(o, path, seen))
                .collect::<Vec<_>>()
                .join(" | ");
        }
    }
    match schema.get("type") {
        Some(Value::String(t)) => typed(t, schema, path, seen),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .map(|t| typed(t, schema, path, seen))
            .collect::<Vec<_>>()
            .join(" | "),
        _ if schema.get("properties").is_some() => typed("object", schema, path, seen),
        _ if schema.get("items").is_some() => typed("array", schema, path, seen),
        _ => "any".to_owned(),
    }
}

fn typed(kind: &str, schema: &Value, path: &str, seen: &mut Vec<SeenEnum>) -> String {
    match kind {
        "array" => match schema.get("items") {
            Some(items) => format!("[{}]", sketch(items, path, seen)),
            None => "[any]".to_owned(),
        },
        "object" => match properties(schema) {
            Some((props, required)) if !props.is_empty() => {
                format!("{{{}}}", fields(props, &required, path, seen))
            }
            _ => "object".to_owned(),
        },
        other => other.to_owned(),
    }
}

fn enumeration(values: &[Value], path: &str, seen: &mut Vec<SeenEnum>) -> String {
    if values.len() > SHORT_ENUM {
        if let Some(first) = seen.iter().find(|s| s.values == values) {
            return format!("one of {}", first.path);
        }
        seen.push(SeenEnum {
            values: values.to_vec(),
            path: path.to_owned(),
        });
    }
    values
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("|")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_in_order_with_optional_ones_marked() {
        let schema = json!({
            "type": "object",
            "properties": {
                "decision": {"type": "string", "enum": ["plan", "skip"], "description": "dropped"},
                "count": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "note": {"type": ["string", "null"]},
                "any": {}
            },
            "required": ["decision"]
        });
        assert_eq!(
            signature("submit", &schema),
            "submit(decision: \"plan\"|\"skip\", count?: integer, tags?: [string], \
             note?: string | null, any?: any)"
        );
    }

    #[test]
    fn nested_objects_and_a_long_enum_written_out_once() {
        let names = json!(["a", "b", "c", "d", "e"]);
        let schema = json!({
            "type": "object",
            "properties": {
                "steps": {"type": "array", "items": {"type": "object",
                    "properties": {"intent": {"type": "string"},
                                   "tools": {"type": "array", "items": {"type": "string", "enum": names}}},
                    "required": ["intent"]}},
                "tools_needed": {"type": "array", "items": {"type": "string", "enum": names}},
                "mode": {"anyOf": [{"const": 1}, {"type": "boolean"}]},
                "options": {"type": "object"}
            },
            "required": ["steps"]
        });
        assert_eq!(
            signature("plan", &schema),
            "plan(steps: [{intent: string, tools?: [\"a\"|\"b\"|\"c\"|\"d\"|\"e\"]}], \
             tools_needed?: [one of steps.tools], mode?: 1 | boolean, options?: object)"
        );
    }

    #[test]
    fn a_tool_without_arguments() {
        assert_eq!(signature("ping", &json!({"type": "object"})), "ping()");
        assert_eq!(signature("ping", &json!(null)), "ping()");
    }
}
