//! The configuration reference (`docs/configuration.md`), rendered from the
//! JSON Schemas so that the docs cannot drift from the types.

use std::collections::{HashSet, VecDeque};
use std::fmt::Write;

use serde_json::Value;

use crate::schema::Tier;

const INTRO: &str = include_str!("docs_intro.md");

/// The whole `docs/configuration.md`: the hand-written intro, then every
/// field of both tiers.
pub fn configuration_markdown() -> String {
    let mut out = String::from(INTRO);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("\n## Reference: Tier A, `config.yaml`\n\n");
    out.push_str(&tier_markdown(Tier::Bootstrap));
    out.push_str("\n## Reference: Tier B, the company YAML\n\n");
    out.push_str(&tier_markdown(Tier::Company));
    out
}

/// Every field of one tier: a table per map, in the order a reader meets them.
pub fn tier_markdown(tier: Tier) -> String {
    let root = tier.schema();
    let mut r = Renderer {
        root,
        tier,
        queue: VecDeque::new(),
        seen: HashSet::new(),
        out: String::new(),
    };
    r.section(None, "top level", root);
    while let Some((name, path)) = r.queue.pop_front() {
        if let Some(schema) = root.pointer(&format!("/$defs/{name}")) {
            r.section(Some(&name), &path, schema);
        }
    }
    r.out
}

struct Renderer<'s> {
    root: &'s Value,
    tier: Tier,
    /// Definitions still to render: (name, YAML path where first met).
    queue: VecDeque<(String, String)>,
    seen: HashSet<String>,
    out: String,
}

impl<'s> Renderer<'s> {
    fn anchor(&self, def: &str) -> String {
        format!("{}-{}", self.tier.as_str(), def.to_lowercase())
    }

    fn resolve(&self, schema: &'s Value) -> (Option<String>, &'s Value) {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let name = r.rsplit('/').next().unwrap_or(r).to_owned();
                let target = r.strip_prefix('#').and_then(|p| self.root.pointer(p));
                (Some(name), target.unwrap_or(schema))
            }
            None => (None, schema),
        }
    }

    fn section(&mut self, def: Option<&str>, path: &str, schema: &'s Value) {
        match def {
            Some(def) => {
                let _ = writeln!(self.out, "<a id=\"{}\"></a>", self.anchor(def));
                let _ = writeln!(self.out, "### `{path}` ({def})\n");
            }
            None => {
                let _ = writeln!(self.out, "### Top level\n");
            }
        }
        if let Some(d) = description(schema) {
            let _ = writeln!(self.out, "{d}\n");
        }
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        self.out
            .push_str("| key | type | default | description |\n|---|---|---|---|\n");
        let base = if def.is_none() {
            String::new()
        } else {
            format!("{path}.")
        };
        for (key, prop) in props {
            let ty = self.type_of(prop, &format!("{base}{key}"));
            let default = match prop.get("default") {
                // A section's own table shows each of its keys' defaults.
                Some(v) if ty.starts_with('[') && v.as_object().is_some_and(|o| !o.is_empty()) => {
                    "see its keys".into()
                }
                Some(v) => format!("`{}`", cell(&v.to_string())),
                None if required.contains(&key.as_str()) => "**required**".into(),
                None => "unset".into(),
            };
            let mut text = description(prop).unwrap_or_default();
            if let Some(values) = self.variant_docs(prop) {
                if !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(&values);
            }
            let _ = writeln!(self.out, "| `{key}` | {ty} | {default} | {} |", cell(&text));
        }
        self.out.push('\n');
    }

    /// The type column: scalars, lists, maps, links to other sections.
    fn type_of(&mut self, schema: &'s Value, path: &str) -> String {
        let (name, s) = self.resolve(schema);
        if let Some(values) = enum_values(self, s) {
            return values.join(" \\| ");
        }
        if let Some(Value::Array(branches)) = s.get("anyOf").or_else(|| s.get("oneOf")) {
            let parts: Vec<String> = branches
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) != Some("null"))
                .map(|b| self.type_of(b, path))
                .collect();
            return parts.join(" or ");
        }
        let types: Vec<&str> = match s.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .filter_map(Value::as_str)
                .filter(|t| *t != "null")
                .collect(),
            _ => Vec::new(),
        };
        let ty = types.first().copied().unwrap_or("any");
        match ty {
            "object" if s.get("properties").is_some() => match name {
                Some(def) => {
                    if self.seen.insert(def.clone()) {
                        self.queue.push_back((def.clone(), path.to_owned()));
                    }
                    format!("[{def}](#{})", self.anchor(&def))
                }
                None => "map".into(),
            },
            "object" => match s.get("additionalProperties") {
                Some(v @ Value::Object(_)) => {
                    format!(
                        "map of name → {}",
                        self.type_of(v, &format!("{path}.<name>"))
                    )
                }
                _ => "map".into(),
            },
            "array" => match s.get("items") {
                Some(items) => format!("list of {}", self.type_of(items, &format!("{path}[]"))),
                None => "list".into(),
            },
            "integer" | "number" => {
                let word = if ty == "integer" { "integer" } else { "number" };
                match (s.get("minimum"), s.get("maximum")) {
                    (Some(lo), Some(hi)) => format!("{word} {lo}–{hi}"),
                    (Some(lo), None) if lo.as_f64() != Some(0.0) => format!("{word} ≥ {lo}"),
                    _ => word.into(),
                }
            }
            "string" if s.get("minLength").is_some() => "non-empty string".into(),
            other => other.into(),
        }
    }

    /// "`a`: what a means; `b`: ..." for enums whose values are documented.
    fn variant_docs(&self, schema: &'s Value) -> Option<String> {
        let (_, s) = self.resolve(schema);
        let s = match s.get("anyOf").and_then(Value::as_array) {
            // Option<Enum>: the non-null branch.
            Some(branches) => {
                let inner = branches
                    .iter()
                    .find(|b| b.get("type").and_then(Value::as_str) != Some("null"))?;
                self.resolve(inner).1
            }
            None => s,
        };
        let branches = s.get("oneOf")?.as_array()?;
        let parts: Vec<String> = branches
            .iter()
            .filter_map(|b| {
                let value = b.get("const")?;
                let text = description(b)?;
                Some(format!(
                    "`{}`: {}",
                    value.as_str().unwrap_or_default(),
                    text.trim_end_matches('.')
                ))
            })
            .collect();
        (!parts.is_empty()).then(|| format!("Values: {}.", parts.join("; ")))
    }
}

fn enum_values(r: &Renderer<'_>, schema: &Value) -> Option<Vec<String>> {
    if let Some(Value::Array(values)) = schema.get("enum") {
        return Some(
            values
                .iter()
                .map(|v| format!("`{}`", v.as_str().unwrap_or_default()))
                .collect(),
        );
    }
    let branches = schema
        .get("oneOf")
        .or_else(|| schema.get("anyOf"))?
        .as_array()?;
    let mut out = Vec::new();
    for b in branches {
        let (_, b) = r.resolve(b);
        if let Some(c) = b.get("const") {
            out.push(format!("`{}`", c.as_str().unwrap_or_default()));
        } else if let Some(Value::Array(values)) = b.get("enum") {
            out.extend(
                values
                    .iter()
                    .map(|v| format!("`{}`", v.as_str().unwrap_or_default())),
            );
        } else if b.get("type").and_then(Value::as_str) == Some("null") {
            continue;
        } else {
            return None;
        }
    }
    Some(out)
}

fn description(schema: &Value) -> Option<String> {
    let d = schema.get("description")?.as_str()?;
    Some(d.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_definition_gets_a_section() {
        for tier in [Tier::Bootstrap, Tier::Company] {
            let md = tier_markdown(tier);
            let defs = tier.schema().get("$defs").and_then(Value::as_object);
            for (name, def) in defs.into_iter().flatten() {
                if def.get("properties").is_some() {
                    assert!(
                        md.contains(&format!("({name})\n")),
                        "{tier}: no section for {name}"
                    );
                }
            }
        }
    }

    #[test]
    fn tables_show_types_defaults_and_requirements() {
        let md = tier_markdown(Tier::Company);
        assert!(
            md.contains("| `name` | non-empty string | **required** |"),
            "{md}"
        );
        assert!(
            md.contains("| `max_iterations` | integer ≥ 1 | `3` |"),
            "{md}"
        );
        assert!(
            md.contains("`openai` \\| `anthropic` \\| `openai-compatible`"),
            "{md}"
        );
        let md = tier_markdown(Tier::Bootstrap);
        assert!(md.contains("| `port` | integer 0–65535 | `0` |"), "{md}");
    }
}
