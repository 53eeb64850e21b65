//! Typing and checking scalars: numbers within their bounds, enum values,
//! and the conversion of a node to JSON where no schema guides it.

use serde_json::{Number, Value};

use super::Walk;
use super::describe::show_value;
use crate::numbers::{Int, format_bounds, parse_float, parse_int};
use crate::suggest::closest;
use crate::yaml::{Node, NodeKind, Scalar, YamlPath};

impl<'s> Walk<'s> {
    pub(super) fn check_scalar(
        &mut self,
        node: &Node,
        s: &Scalar,
        schema: &'s Value,
        types: &[&str],
        path: &YamlPath,
    ) -> Option<Value> {
        if s.is_null() && types.contains(&"null") {
            return Some(Value::Null);
        }
        if s.plain && !s.is_null() {
            if types.contains(&"integer")
                && let Some(n) = parse_int(&s.text)
            {
                return self.int_in_range(node, schema, n, path);
            }
            if types.contains(&"number")
                && let Some(f) = parse_float(&s.text)
                && let Some(n) = Number::from_f64(f)
            {
                return self.in_range(node, schema, f, Value::Number(n), path);
            }
            if types.contains(&"boolean") {
                match s.text.as_str() {
                    "true" | "True" | "TRUE" => return Some(Value::Bool(true)),
                    "false" | "False" | "FALSE" => return Some(Value::Bool(false)),
                    _ => {}
                }
            }
        }
        if types.contains(&"string") && !s.is_null() {
            let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0);
            if (s.text.trim().chars().count() as u64) < min {
                self.problem(path, node, "must not be empty".into());
                return None;
            }
            return Some(Value::String(s.text.clone()));
        }
        let message = format!(
            "expected {}, found {}",
            self.describe(schema),
            node.describe()
        );
        self.problem(path, node, message);
        None
    }

    fn in_range(
        &mut self,
        node: &Node,
        schema: &Value,
        n: f64,
        value: Value,
        path: &YamlPath,
    ) -> Option<Value> {
        let bound = |k: &str| schema.get(k).and_then(Value::as_f64);
        if let Some(min) = bound("minimum")
            && n < min
        {
            self.problem(
                path,
                node,
                format!("{value} is below the minimum {}", show(min)),
            );
            return None;
        }
        if let Some(max) = bound("maximum")
            && n > max
        {
            self.problem(
                path,
                node,
                format!("{value} is above the maximum {}", show(max)),
            );
            return None;
        }
        Some(value)
    }

    /// A whole number within the schema's bounds and its `format`'s (`uint32`
    /// and the like: the Rust type's range), so a value too large for the
    /// field is reported here, at its line, and not by serde later.
    fn int_in_range(
        &mut self,
        node: &Node,
        schema: &Value,
        n: Int,
        path: &YamlPath,
    ) -> Option<Value> {
        let (type_min, type_max) = format_bounds(schema.get("format").and_then(Value::as_str));
        // `as` saturates, which is what a bound beyond i128 means.
        let bound = |k: &str| schema.get(k).and_then(Value::as_f64).map(|b| b as i128);
        let min = bound("minimum").map_or(type_min, |b| b.max(type_min));
        let max = bound("maximum").map_or(type_max, |b| b.min(type_max));
        let shown = n.to_string();
        if n.value < min {
            self.problem(path, node, format!("{shown} is below the minimum {min}"));
            return None;
        }
        if n.value > max {
            self.problem(path, node, format!("{shown} is above the maximum {max}"));
            return None;
        }
        match i64::try_from(n.value) {
            Ok(v) => Some(Value::Number(v.into())),
            Err(_) => u64::try_from(n.value).ok().map(|v| Value::Number(v.into())),
        }
    }

    pub(super) fn check_enum(
        &mut self,
        node: &Node,
        values: &[Value],
        path: &YamlPath,
    ) -> Option<Value> {
        if let NodeKind::Scalar(s) = &node.kind {
            for v in values {
                let matches = match v {
                    Value::String(text) => *text == s.text,
                    Value::Null => s.is_null(),
                    other => s.plain && *other == s.text,
                };
                if matches {
                    return Some(v.clone());
                }
            }
        }
        let allowed: Vec<String> = values.iter().map(show_value).collect();
        self.enum_problem(node, &allowed, path);
        None
    }

    pub(super) fn enum_problem(&mut self, node: &Node, allowed: &[String], path: &YamlPath) {
        let mut message = format!(
            "expected one of {}, found {}",
            allowed.join(", "),
            node.describe()
        );
        if let NodeKind::Scalar(s) = &node.kind {
            let names: Vec<&str> = allowed.iter().map(|a| a.trim_matches('`')).collect();
            if let Some(best) = closest(&s.text, &names) {
                message.push_str(&format!("; did you mean `{best}`?"));
            }
        }
        self.problem(path, node, message);
    }
}

fn show(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

pub(super) fn scalar_any(s: &Scalar) -> Value {
    if !s.plain {
        return Value::String(s.text.clone());
    }
    if s.is_null() {
        return Value::Null;
    }
    match s.text.as_str() {
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Some(n) = parse_int(&s.text).filter(|n| !n.saturated) {
        if let Ok(v) = i64::try_from(n.value) {
            return Value::Number(v.into());
        }
        if let Ok(v) = u64::try_from(n.value) {
            return Value::Number(v.into());
        }
    }
    if let Some(n) = parse_float(&s.text).and_then(Number::from_f64) {
        return Value::Number(n);
    }
    Value::String(s.text.clone())
}

/// A node as JSON with no schema to guide it.
pub(super) fn any(node: &Node) -> Value {
    match &node.kind {
        NodeKind::Scalar(s) => scalar_any(s),
        NodeKind::Seq(items) => Value::Array(items.iter().map(any).collect()),
        NodeKind::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|e| (e.key.clone(), any(&e.value)))
                .collect(),
        ),
    }
}
