//! Reading a schema for messages: what it wants (`a string`, `one of ...`),
//! which kinds of node it takes, and the keys a map allows.

use serde_json::{Map, Value};

use super::Walk;
use crate::suggest::closest;
use crate::yaml::{Node, NodeKind};

impl Walk<'_> {
    /// Adds the values of an enum-like schema to `out`; false if it is not one.
    pub(super) fn enum_values(&self, schema: &Value, out: &mut Vec<String>) -> bool {
        let schema = self.resolve(schema);
        if is_null_schema(schema) {
            return true;
        }
        if let Some(c) = schema.get("const") {
            out.push(show_value(c));
            return true;
        }
        if let Some(Value::Array(values)) = schema.get("enum") {
            out.extend(values.iter().filter(|v| !v.is_null()).map(show_value));
            return true;
        }
        // A plain boolean beside string values (`true`, `false`, `word`):
        // its two values are listed with theirs.
        if schema.get("type").and_then(Value::as_str) == Some("boolean") {
            out.extend([true, false].map(|b| show_value(&Value::Bool(b))));
            return true;
        }
        if let Some(Value::Array(branches)) = schema.get("anyOf").or_else(|| schema.get("oneOf")) {
            return branches.iter().all(|b| self.enum_values(b, out));
        }
        false
    }

    pub(super) fn accepts_kind(&self, schema: &Value, node: &Node) -> bool {
        let schema = self.resolve(schema);
        if let Some(Value::Array(branches)) = schema.get("anyOf").or_else(|| schema.get("oneOf")) {
            return branches.iter().any(|b| self.accepts_kind(b, node));
        }
        let types = types_of(schema);
        match &node.kind {
            NodeKind::Map(_) => types.contains(&"object"),
            NodeKind::Seq(_) => types.contains(&"array"),
            NodeKind::Scalar(s) if s.is_null() => types.contains(&"null"),
            NodeKind::Scalar(_) => {
                schema.get("const").is_some()
                    || schema.get("enum").is_some()
                    || types
                        .iter()
                        .any(|t| matches!(*t, "string" | "integer" | "number" | "boolean"))
            }
        }
    }

    /// What a schema wants, for messages: `a string`, `a list or a map`, ...
    pub(super) fn describe(&self, schema: &Value) -> String {
        let schema = self.resolve(schema);
        if let Some(Value::Array(branches)) = schema.get("anyOf").or_else(|| schema.get("oneOf")) {
            let mut allowed = Vec::new();
            if branches.iter().all(|b| self.enum_values(b, &mut allowed)) {
                return format!("one of {}", allowed.join(", "));
            }
            let parts: Vec<String> = branches
                .iter()
                .filter(|b| !is_null_schema(self.resolve(b)))
                .map(|b| self.describe(b))
                .collect();
            return join_or(&parts);
        }
        if let Some(Value::Array(values)) = schema.get("enum") {
            let shown: Vec<String> = values.iter().map(show_value).collect();
            return format!("one of {}", shown.join(", "));
        }
        let parts: Vec<String> = types_of(schema)
            .into_iter()
            .filter(|t| *t != "null")
            .map(|t| {
                match t {
                    "string" => "a string",
                    "integer" => "a whole number",
                    "number" => "a number",
                    "boolean" => "true or false",
                    "array" => "a list",
                    "object" => "a map",
                    _ => "a value",
                }
                .to_owned()
            })
            .collect();
        if parts.is_empty() {
            "a value".into()
        } else {
            join_or(&parts)
        }
    }
}

pub(super) fn types_of(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ if schema.get("properties").is_some() => vec!["object"],
        _ => Vec::new(),
    }
}

pub(super) fn is_null_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

pub(super) fn join_or(parts: &[String]) -> String {
    match parts {
        [] => "a value".into(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

pub(super) fn show_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("`{s}`"),
        other => format!("`{other}`"),
    }
}

/// The keys a map allows, worked out once per map for its unknown keys.
pub(super) struct KnownKeys<'s> {
    keys: Vec<&'s str>,
    /// The end of a message without a suggestion.
    otherwise: String,
}

impl<'s> KnownKeys<'s> {
    pub(super) fn of(props: Option<&'s Map<String, Value>>) -> Self {
        let keys: Vec<&str> = props
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let otherwise = if keys.is_empty() {
            "; no keys are allowed here".to_owned()
        } else {
            format!("; expected one of: {}", keys.join(", "))
        };
        Self { keys, otherwise }
    }

    pub(super) fn unknown(&self, key: &str) -> String {
        match closest(key, &self.keys) {
            Some(best) => format!("unknown key `{key}`; did you mean `{best}`?"),
            None => format!("unknown key `{key}`{}", self.otherwise),
        }
    }
}
