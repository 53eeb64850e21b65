//! The env-name policy: which process variables a company's `${VAR}` may
//! read ([`CompanyEnv`]) and which a stdio MCP server may not be given.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::interpolate::references;
use crate::yaml::YamlPath;

/// Variables the company may read when `security.company_env.names` is not
/// set: the model keys the examples and the quick start use.
pub const DEFAULT_COMPANY_ENV_NAMES: &[&str] = &["OPENAI_API_KEY", "ANTHROPIC_API_KEY"];

/// Prefix of variables the company may read when
/// `security.company_env.prefixes` is not set. No Tier A override starts
/// with it (those are `CREWLET_DEBUG`, `CREWLET_PROVIDERS__...`,
/// `CREWLET_API__...`, `CREWLET_OBSERVABILITY__...`).
pub const DEFAULT_COMPANY_ENV_PREFIX: &str = "CREWLET_CO_";

/// Variables a company may not set for a stdio MCP server (in its `env` or a
/// role's `mcp_env`) unless `allow_any_mcp_command` is on: each one can make
/// an allowed program load or run other code.
pub const FORBIDDEN_MCP_ENV: &[&str] = &[
    "PATH",
    "BASH_ENV",
    "ENV",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PERL5LIB",
    "PERL5OPT",
    "RUBYLIB",
    "RUBYOPT",
    "JAVA_TOOL_OPTIONS",
    "GIT_SSH_COMMAND",
];

/// Prefixes of forbidden MCP server variables (dynamic loader settings).
pub const FORBIDDEN_MCP_ENV_PREFIXES: &[&str] = &["LD_", "DYLD_"];

/// Which variables of the process environment the company may read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompanyEnv {
    /// Variables by exact name. Setting it replaces the default list.
    #[serde(default = "default_env_names")]
    pub names: Vec<String>,
    /// Every variable whose name starts with one of these. Setting it
    /// replaces the default list.
    #[serde(default = "default_env_prefixes")]
    pub prefixes: Vec<String>,
}

impl Default for CompanyEnv {
    fn default() -> Self {
        Self {
            names: default_env_names(),
            prefixes: default_env_prefixes(),
        }
    }
}

fn default_env_names() -> Vec<String> {
    DEFAULT_COMPANY_ENV_NAMES
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

fn default_env_prefixes() -> Vec<String> {
    vec![DEFAULT_COMPANY_ENV_PREFIX.to_owned()]
}

impl CompanyEnv {
    /// Whether the company may read variable `name`.
    pub fn allows(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
            || self
                .prefixes
                .iter()
                .any(|p| !p.is_empty() && name.starts_with(p.as_str()))
    }
}

pub(super) fn forbidden_env(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    FORBIDDEN_MCP_ENV.contains(&upper.as_str())
        || FORBIDDEN_MCP_ENV_PREFIXES
            .iter()
            .any(|p| upper.starts_with(p))
}

/// Every `${NAME}` in the strings of `value`, with where it is.
pub(super) fn collect_references(
    value: &Value,
    path: &YamlPath,
    out: &mut Vec<(YamlPath, String)>,
) {
    match value {
        Value::String(s) => {
            for name in references(s) {
                out.push((path.clone(), name.to_owned()));
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_references(item, &path.index(i), out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                collect_references(v, &path.key(k), out);
            }
        }
        _ => {}
    }
}
