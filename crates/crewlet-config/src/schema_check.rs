//! Structural checks: a YAML [`Node`] tree walked against the JSON Schema
//! generated from the config types.
//!
//! Walking the schema instead of running serde lets one pass report every
//! unknown key, wrong type, bad enum value and missing key in the file, each
//! at its own line. The walk also converts the tree to JSON, typing plain
//! scalars by what the schema expects there (so `handle: 007` stays a string
//! and `port: 8000` becomes a number); nodes with problems are left out, so the
//! remaining document can still be deserialized and checked for meaning.

use serde_json::{Map, Number, Value};

use crate::numbers::{Int, format_bounds, parse_float, parse_int};
use crate::suggest::closest;
use crate::yaml::{Node, NodeKind, Scalar, TreeProblem, YamlPath};

pub(crate) struct Walk<'s> {
    root: &'s Value,
    pub problems: Vec<TreeProblem>,
}

impl<'s> Walk<'s> {
    pub fn new(root: &'s Value) -> Self {
        Self {
            root,
            problems: Vec::new(),
        }
    }

    /// Checks `node` against the root schema and returns it as JSON.
    pub fn run(&mut self, node: &Node) -> Option<Value> {
        let root = self.root;
        self.check(node, root, &YamlPath::root())
    }

    fn problem(&mut self, path: &YamlPath, node: &Node, message: String) {
        self.problems.push(TreeProblem {
            path: path.clone(),
            loc: node.loc,
            message,
        });
    }

    fn resolve(&self, schema: &'s Value) -> &'s Value {
        let mut schema = schema;
        // A chain of $refs is short; the bound guards against a self-reference.
        for _ in 0..16 {
            match schema.get("$ref").and_then(Value::as_str) {
                Some(r) => match r.strip_prefix('#').and_then(|p| self.root.pointer(p)) {
                    Some(target) => schema = target,
                    None => return &Value::Bool(true),
                },
                None => break,
            }
        }
        schema
    }

    fn check(&mut self, node: &Node, schema: &'s Value, path: &YamlPath) -> Option<Value> {
        let schema = self.resolve(schema);
        let Some(obj) = schema.as_object() else {
            return match schema {
                Value::Bool(false) => {
                    self.problem(path, node, "no value is allowed here".into());
                    None
                }
                _ => Some(any(node)),
            };
        };
        if let Some(branches) = obj.get("anyOf").or_else(|| obj.get("oneOf"))
            && let Some(branches) = branches.as_array()
        {
            return self.check_union(node, branches, path);
        }
        if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
            let mut first = None;
            for (i, part) in all.iter().enumerate() {
                let v = self.check(node, part, path);
                if i == 0 {
                    first = v;
                }
            }
            return first;
        }
        if let Some(c) = obj.get("const") {
            return self.check_enum(node, std::slice::from_ref(c), path);
        }
        if let Some(Value::Array(values)) = obj.get("enum") {
            return self.check_enum(node, values, path);
        }
        let types = types_of(schema);
        match &node.kind {
            NodeKind::Map(_) if types.is_empty() || types.contains(&"object") => {
                self.check_object(node, schema, path)
            }
            NodeKind::Seq(items) if types.is_empty() || types.contains(&"array") => {
                let item_schema = obj.get("items").unwrap_or(&Value::Bool(true));
                let out = items
                    .iter()
                    .enumerate()
                    .filter_map(|(i, item)| self.check(item, item_schema, &path.index(i)))
                    .collect();
                Some(Value::Array(out))
            }
            NodeKind::Scalar(s) if types.is_empty() => Some(scalar_any(s)),
            NodeKind::Scalar(s) => self.check_scalar(node, s, schema, &types, path),
            _ => {
                let message = format!(
                    "expected {}, found {}",
                    self.describe(schema),
                    node.describe()
                );
                self.problem(path, node, message);
                None
            }
        }
    }

    fn check_object(&mut self, node: &Node, schema: &'s Value, path: &YamlPath) -> Option<Value> {
        let NodeKind::Map(entries) = &node.kind else {
            return None;
        };
        let props = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = Map::new();
        let mut complete = true;
        let mut known: Option<KnownKeys> = None;
        let mut valueless: Vec<&str> = Vec::new();
        for entry in entries {
            let p = path.key(&entry.key);
            // A key written with no value (`lead:`) is unset, as in the
            // original engine: its default applies.
            if matches!(&entry.value.kind, NodeKind::Scalar(sc) if sc.is_null())
                && props.is_some_and(|props| props.contains_key(&entry.key))
            {
                valueless.push(&entry.key);
                continue;
            }
            let value_schema = match props.and_then(|props| props.get(&entry.key)) {
                Some(s) => s,
                None => match additional {
                    Some(Value::Bool(false)) => {
                        let message = known
                            .get_or_insert_with(|| KnownKeys::of(props))
                            .unknown(&entry.key);
                        self.problems.push(TreeProblem {
                            path: p,
                            loc: entry.key_loc,
                            message,
                        });
                        continue;
                    }
                    Some(s) => s,
                    None => &Value::Bool(true),
                },
            };
            match self.check(&entry.value, value_schema, &p) {
                Some(v) => {
                    out.insert(entry.key.clone(), v);
                }
                None if required.contains(&entry.key.as_str()) => complete = false,
                None => {}
            }
        }
        for key in required {
            if valueless.contains(&key) {
                self.problem(&path.key(key), node, format!("`{key}` needs a value"));
                complete = false;
            } else if !entries.iter().any(|e| e.key == key) {
                self.problem(path, node, format!("missing required key `{key}`"));
                complete = false;
            }
        }
        complete.then_some(Value::Object(out))
    }

    fn check_scalar(
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

    fn check_enum(&mut self, node: &Node, values: &[Value], path: &YamlPath) -> Option<Value> {
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

    fn enum_problem(&mut self, node: &Node, allowed: &[String], path: &YamlPath) {
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

    fn check_union(
        &mut self,
        node: &Node,
        branches: &'s [Value],
        path: &YamlPath,
    ) -> Option<Value> {
        let mut tries = Vec::with_capacity(branches.len());
        for branch in branches {
            let mut sub = Walk::new(self.root);
            let value = sub.check(node, branch, path);
            if sub.problems.is_empty()
                && let Some(v) = value
            {
                return Some(v);
            }
            tries.push((branch, sub.problems));
        }
        // Every branch failed. An enum written as `oneOf` consts (or an
        // optional enum) gets one message listing all values.
        let mut allowed = Vec::new();
        if branches.iter().all(|b| self.enum_values(b, &mut allowed)) {
            self.enum_problem(node, &allowed, path);
            return None;
        }
        // Otherwise report the first branch that takes this kind of node, and
        // keep what it could read (as for any map with an unknown key).
        if let Some((branch, problems)) =
            tries.into_iter().find(|(b, _)| self.accepts_kind(b, node))
        {
            self.problems.extend(problems);
            let mut again = Walk::new(self.root);
            return again.check(node, branch, path);
        }
        let expected: Vec<String> = branches
            .iter()
            .filter(|b| !is_null_schema(self.resolve(b)))
            .map(|b| self.describe(b))
            .collect();
        let message = format!("expected {}, found {}", join_or(&expected), node.describe());
        self.problem(path, node, message);
        None
    }

    /// Adds the values of an enum-like schema to `out`; false if it is not one.
    fn enum_values(&self, schema: &Value, out: &mut Vec<String>) -> bool {
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
        if let Some(Value::Array(branches)) = schema.get("anyOf").or_else(|| schema.get("oneOf")) {
            return branches.iter().all(|b| self.enum_values(b, out));
        }
        false
    }

    fn accepts_kind(&self, schema: &Value, node: &Node) -> bool {
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
    fn describe(&self, schema: &Value) -> String {
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

fn types_of(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ if schema.get("properties").is_some() => vec!["object"],
        _ => Vec::new(),
    }
}

fn is_null_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

fn join_or(parts: &[String]) -> String {
    match parts {
        [] => "a value".into(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

fn show(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

fn show_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("`{s}`"),
        other => format!("`{other}`"),
    }
}

/// The keys a map allows, worked out once per map for its unknown keys.
struct KnownKeys<'s> {
    keys: Vec<&'s str>,
    /// The end of a message without a suggestion.
    otherwise: String,
}

impl<'s> KnownKeys<'s> {
    fn of(props: Option<&'s Map<String, Value>>) -> Self {
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

    fn unknown(&self, key: &str) -> String {
        match closest(key, &self.keys) {
            Some(best) => format!("unknown key `{key}`; did you mean `{best}`?"),
            None => format!("unknown key `{key}`{}", self.otherwise),
        }
    }
}

fn scalar_any(s: &Scalar) -> Value {
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
fn any(node: &Node) -> Value {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::yaml;

    fn run(schema: Value, text: &str) -> (Option<Value>, Vec<String>) {
        let parsed = yaml::parse(text);
        let root = parsed.root.unwrap_or(Node {
            kind: NodeKind::Map(Vec::new()),
            loc: yaml::Loc { line: 1, column: 1 },
        });
        let mut walk = Walk::new(&schema);
        let v = walk.run(&root);
        let msgs = walk
            .problems
            .iter()
            .map(|p| format!("{}@{}: {}", p.path, p.loc.line, p.message))
            .collect();
        (v, msgs)
    }

    fn object_schema() -> Value {
        serde_json::json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "port": {"type": "integer", "minimum": 0, "maximum": 65535},
                "ratio": {"type": ["number", "null"]},
                "on": {"type": "boolean"},
                "kind": {"oneOf": [{"const": "a", "type": "string"}, {"const": "b", "type": "string"}]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
                "llm": {"anyOf": [
                    {"type": "string"},
                    {"type": "array", "items": {"type": "string"}},
                    {"type": "object", "additionalProperties": false,
                     "properties": {"plan": {"type": "string"}}}
                ]}
            }
        })
    }

    #[test]
    fn plain_scalars_are_typed_by_the_schema() {
        let (v, problems) = run(
            object_schema(),
            "name: 007\nport: 0x1F\nratio: 1.5\non: true\ntags: [1, yes]\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            v,
            Some(serde_json::json!({
                "name": "007", "port": 31, "ratio": 1.5, "on": true, "tags": ["1", "yes"]
            }))
        );
    }

    #[test]
    fn every_problem_is_reported_once_with_its_line() {
        let text = "nme: x\nport: 70000\nratio: lots\nkind: c\nllm: {plann: y}\nenv: {A: [1]}\n";
        let (v, problems) = run(object_schema(), text);
        assert_eq!(v, None, "name is missing, so the object is incomplete");
        assert_eq!(
            problems,
            [
                "nme@1: unknown key `nme`; did you mean `name`?",
                "port@2: 70000 is above the maximum 65535",
                "ratio@3: expected a number, found `lots`",
                "kind@4: expected one of `a`, `b`, found `c`",
                "llm.plann@5: unknown key `plann`; did you mean `plan`?",
                "env.A@6: expected a string, found a list",
                "@1: missing required key `name`",
            ]
        );
    }

    #[test]
    fn quoted_numbers_are_strings_and_nulls_need_null() {
        let (_, problems) = run(object_schema(), "name: ''\nport: '80'\nratio:\non: 1\n");
        assert_eq!(
            problems,
            [
                "name@1: must not be empty",
                "port@2: expected a whole number, found `80`",
                "on@4: expected true or false, found `1`",
            ]
        );
    }

    #[test]
    fn unions_pick_the_branch_for_the_node_kind() {
        let (v, problems) = run(object_schema(), "name: n\nllm: [a, b]\n");
        assert!(problems.is_empty());
        assert_eq!(
            v.and_then(|v| v.get("llm").cloned()),
            Some(serde_json::json!(["a", "b"]))
        );
        let (_, problems) = run(object_schema(), "name: n\nllm: 3\n");
        assert!(
            problems.is_empty(),
            "a plain 3 is also a string: {problems:?}"
        );
    }
}
