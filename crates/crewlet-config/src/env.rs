//! `CREWLET_*` environment overrides of Tier A, as a figment provider.
//!
//! The variables are found by figment's own `Env::prefixed("CREWLET_")
//! .split("__")`. Unlike `Env`, which parses every value (so a token
//! `12345` would become a number and fail where text is expected), a value
//! is kept as text wherever the bootstrap schema says the setting is text;
//! elsewhere it is parsed as figment does (`8000`, `true`, `[a, b]`).

use figment::providers::Env;
use figment::value::{Dict, Map, Value};
use figment::{Error, Metadata, Profile, Provider};

use crate::bootstrap::{ENV_PREFIX, ENV_SEPARATOR};
use crate::schema::Tier;

/// Top-level keys the environment may override; other `CREWLET_*` variables
/// (used by tools and tests) are not configuration and are left alone.
const ENV_KEYS: [&str; 4] = ["debug", "providers", "api", "observability"];

/// The name figment errors carry for values from here.
pub(crate) const ENV_SOURCE: &str = "environment variables CREWLET_*";

/// `CREWLET_*` overrides: from the process environment, or from given pairs
/// (for tests and embedding, without touching the process environment).
#[derive(Debug, Clone)]
pub struct EnvOverrides {
    vars: Option<Vec<(String, String)>>,
}

impl EnvOverrides {
    /// Reads the process environment when figment asks for the data.
    pub fn from_process() -> Self {
        Self { vars: None }
    }

    /// Uses these `(NAME, value)` pairs instead of the process environment.
    pub fn from_vars<K: Into<String>, V: Into<String>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self {
            vars: Some(
                vars.into_iter()
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect(),
            ),
        }
    }

    /// `(path segments, raw value)` of every override, in lower case.
    fn pairs(&self) -> Vec<(Vec<String>, String)> {
        let raw: Vec<(String, String)> = match &self.vars {
            None => Env::prefixed(ENV_PREFIX)
                .split(ENV_SEPARATOR)
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), v))
                .collect(),
            Some(vars) => vars
                .iter()
                .filter_map(|(k, v)| {
                    let prefixed = k.get(..ENV_PREFIX.len())?.eq_ignore_ascii_case(ENV_PREFIX);
                    prefixed.then(|| (k[ENV_PREFIX.len()..].replace(ENV_SEPARATOR, "."), v.clone()))
                })
                .collect(),
        };
        raw.into_iter()
            .map(|(k, v)| {
                (
                    k.split('.')
                        .map(str::to_ascii_lowercase)
                        .collect::<Vec<_>>(),
                    v,
                )
            })
            .filter(|(path, _)| {
                path.iter().all(|s| !s.is_empty())
                    && path
                        .first()
                        .is_some_and(|top| ENV_KEYS.contains(&top.as_str()))
            })
            .collect()
    }
}

impl Provider for EnvOverrides {
    fn metadata(&self) -> Metadata {
        Metadata::named(ENV_SOURCE)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, Error> {
        let mut dict = Dict::new();
        for (path, raw) in self.pairs() {
            let value = if is_text(&path) {
                Value::from(raw)
            } else {
                match raw.parse::<Value>() {
                    Ok(v) => v,
                    Err(never) => match never {},
                }
            };
            insert(&mut dict, &path, value);
        }
        Ok(Profile::Default.collect(dict))
    }
}

fn insert(dict: &mut Dict, path: &[String], value: Value) {
    match path {
        [] => {}
        [last] => {
            dict.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            let entry = dict
                .entry(first.clone())
                .or_insert_with(|| Value::from(Dict::new()));
            if !matches!(entry, Value::Dict(..)) {
                *entry = Value::from(Dict::new());
            }
            if let Value::Dict(_, inner) = entry {
                insert(inner, rest, value);
            }
        }
    }
}

/// Whether the bootstrap schema says the setting at `path` is text only.
fn is_text(path: &[String]) -> bool {
    let root = Tier::Bootstrap.schema();
    let resolve = |mut s: &'static serde_json::Value| {
        for _ in 0..8 {
            if let Some(r) = s.get("$ref").and_then(|r| r.as_str()) {
                match r.strip_prefix('#').and_then(|p| root.pointer(p)) {
                    Some(t) => s = t,
                    None => break,
                }
            } else if let Some(branches) = s.get("anyOf").and_then(|b| b.as_array()) {
                // Option<Block>: the branch that is not null.
                match branches
                    .iter()
                    .find(|b| b.get("type").and_then(|t| t.as_str()) != Some("null"))
                {
                    Some(b) => s = b,
                    None => break,
                }
            } else {
                break;
            }
        }
        s
    };
    let mut schema = resolve(root);
    for seg in path {
        match schema.get("properties").and_then(|p| p.get(seg)) {
            Some(next) => schema = resolve(next),
            None => return false,
        }
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(serde_json::Value::String(t)) => vec![t.as_str()],
        Some(serde_json::Value::Array(ts)) => ts.iter().filter_map(|t| t.as_str()).collect(),
        _ => return false,
    };
    types.contains(&"string") && types.iter().all(|t| matches!(*t, "string" | "null"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(path: &str) -> Vec<String> {
        path.split('.').map(String::from).collect()
    }

    #[test]
    fn text_settings_are_known_from_the_schema() {
        assert!(is_text(&s("providers.database.dsn")));
        assert!(is_text(&s("providers.queue.auth_token")));
        assert!(is_text(&s("observability.otlp_endpoint")));
        assert!(!is_text(&s("api.port")));
        assert!(!is_text(&s("debug")));
        assert!(
            !is_text(&s("providers.queue.type")),
            "an enum is parsed, then checked"
        );
        assert!(!is_text(&s("api.nope")));
    }

    #[test]
    fn given_pairs_are_filtered_and_nested() {
        let env = EnvOverrides::from_vars([
            ("CREWLET_API__PORT", "9000"),
            ("crewlet_providers__database__dsn", "12345"),
            ("CREWLET_LOG", "x"),
            ("OTHER_API__PORT", "1"),
        ]);
        let mut pairs = env.pairs();
        pairs.sort();
        assert_eq!(
            pairs,
            [
                (s("api.port"), "9000".to_string()),
                (s("providers.database.dsn"), "12345".to_string()),
            ]
        );
        let data = env
            .data()
            .ok()
            .and_then(|m| m.get(&Profile::Default).cloned());
        let dsn = data
            .as_ref()
            .and_then(|d| d.get("providers"))
            .and_then(|p| p.find_ref("database.dsn"))
            .and_then(|v| v.as_str().map(String::from));
        assert_eq!(dsn.as_deref(), Some("12345"));
    }
}
