//! `${NAME}` references, expanded from the environment when providers are
//! built, never during validation.
//!
//! Only `${NAME}` with `NAME` matching `[A-Za-z_][A-Za-z0-9_]*` is a
//! reference. Everything else passes through unchanged: `$NAME`, `$$`,
//! `${1:-x}`, a lone `$` or an unclosed `${`.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ConfigError;
use crate::yaml::YamlPath;

/// Expands every `${NAME}` in `input` with `env(NAME)`; the error names the
/// first variable that `env` does not know.
pub fn interpolate(
    input: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    expand(input, &env, "")
}

/// The process environment, for [`interpolate`] and [`interpolate_all`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// True when `input` holds at least one `${NAME}` reference.
pub fn has_references(input: &str) -> bool {
    let mut rest = input;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        if let Some(end) = after.find('}')
            && is_name(&after[..end])
        {
            return true;
        }
        rest = &rest[i + 1..];
    }
    false
}

/// The names of every `${NAME}` reference in `input`, in order.
pub fn references(input: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = input;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        match after.find('}') {
            Some(end) if is_name(&after[..end]) => {
                out.push(&after[..end]);
                rest = &after[end + 1..];
            }
            _ => rest = &rest[i + 1..],
        }
    }
    out
}

/// Expands every string inside `value` (a provider entry, an integration
/// block, an MCP server, ...); the error names the missing variable and where
/// it was referenced.
pub fn interpolate_all<T: Serialize + DeserializeOwned>(
    value: &T,
    env: impl Fn(&str) -> Option<String>,
) -> Result<T, ConfigError> {
    let what = std::any::type_name::<T>()
        .rsplit("::")
        .next()
        .unwrap_or("value")
        .to_owned();
    let mut json = serde_json::to_value(value).map_err(|e| ConfigError::Expand {
        what: what.clone(),
        message: e.to_string(),
    })?;
    walk(&mut json, &env, &YamlPath::root())?;
    serde_json::from_value(json).map_err(|e| ConfigError::Expand {
        what,
        message: e.to_string(),
    })
}

fn walk(
    value: &mut Value,
    env: &dyn Fn(&str) -> Option<String>,
    path: &YamlPath,
) -> Result<(), ConfigError> {
    match value {
        Value::String(s) if has_references(s) => {
            *s = expand(s, env, &path.to_string())?;
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                walk(item, env, &path.index(i))?;
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                walk(v, env, &path.key(k))?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// True for exactly one `${NAME}` and nothing else.
pub(crate) fn is_whole_reference(value: &str) -> bool {
    value
        .strip_prefix("${")
        .and_then(|v| v.strip_suffix('}'))
        .is_some_and(is_name)
}

fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn expand(
    input: &str,
    env: &dyn Fn(&str) -> Option<String>,
    at: &str,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        match after.find('}') {
            Some(end) if is_name(&after[..end]) => {
                let name = &after[..end];
                let value = env(name).ok_or_else(|| ConfigError::UndefinedVariable {
                    name: name.to_owned(),
                    at: at.to_owned(),
                })?;
                out.push_str(&value);
                rest = &after[end + 1..];
            }
            _ => {
                out.push('$');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "KEY" => Some("sk-123".into()),
            "_A1" => Some("a".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn references_are_replaced() {
        assert_eq!(interpolate("${KEY}", env).ok(), Some("sk-123".into()));
        assert_eq!(
            interpolate("x-${_A1}-${KEY}-y", env).ok(),
            Some("x-a-sk-123-y".into())
        );
        assert_eq!(interpolate("[${EMPTY}]", env).ok(), Some("[]".into()));
    }

    #[test]
    fn other_dollar_forms_pass_through() {
        for s in [
            "$KEY", "${1:-x}", "$", "${", "${KEY", "$${", "cost: $5", "${}", "${a-b}",
        ] {
            assert_eq!(interpolate(s, env).ok().as_deref(), Some(s), "{s}");
        }
        assert_eq!(interpolate("$${KEY}", env).ok(), Some("$sk-123".into()));
    }

    #[test]
    fn a_missing_variable_is_named() {
        let err = interpolate("Bearer ${NOPE}", env)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("environment variable `NOPE` is not set")
        );
    }

    #[test]
    fn whole_blocks_expand_and_name_the_path() {
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct Block {
            keys: Vec<String>,
            url: String,
        }
        let b = Block {
            keys: vec!["${KEY}".into()],
            url: "http://h/${_A1}".into(),
        };
        let out = interpolate_all(&b, env).ok();
        assert_eq!(
            out,
            Some(Block {
                keys: vec!["sk-123".into()],
                url: "http://h/a".into()
            })
        );
        let bad = Block {
            keys: vec!["ok".into(), "${MISSING}".into()],
            url: String::new(),
        };
        let err = interpolate_all(&bad, env).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("environment variable `MISSING` is not set (referenced at keys[1])")
        );
    }

    #[test]
    fn detects_references() {
        assert!(has_references("a ${B} c"));
        assert!(!has_references("a $B ${1:-x}"));
        assert_eq!(references("${A}-${1}-$${B_2}${"), ["A", "B_2"]);
        assert!(references("$A ${} ${a-b}").is_empty());
    }
}
