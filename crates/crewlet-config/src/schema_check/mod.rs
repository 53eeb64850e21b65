//! Structural checks: a YAML [`Node`] tree walked against the JSON Schema
//! generated from the config types.
//!
//! Walking the schema instead of running serde lets one pass report every
//! unknown key, wrong type, bad enum value and missing key in the file, each
//! at its own line. The walk also converts the tree to JSON, typing plain
//! scalars by what the schema expects there (so `handle: 007` stays a string
//! and `port: 8000` becomes a number); nodes with problems are left out, so the
//! remaining document can still be deserialized and checked for meaning.

use serde_json::{Map, Value};

use crate::yaml::{Node, NodeKind, TreeProblem, YamlPath};

mod describe;
mod scalar;

use describe::{KnownKeys, is_null_schema, join_or, types_of};
use scalar::{any, scalar_any};

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
}

#[cfg(test)]
mod tests;
