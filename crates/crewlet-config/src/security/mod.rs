//! What the company (Tier B) may make the engine do, decided by the operator
//! (Tier A `security`): which programs its stdio MCP servers may run, which
//! environment variables its `${VAR}` references may read, and which hosts
//! its model providers and MCP servers may be sent to. Plus the scopes an API
//! token carries (`api.auth.tokens[].scopes`).
//!
//! The company can be replaced by anyone holding an `admin` API token
//! (`PUT /config`), so nothing in it may reach further than this block says.
//! [`Security::company_problems`] is checked by `PUT /config`, by a revert,
//! and before the engine boots a company; [`Security::company_lookup`] is the
//! only environment a company's `${VAR}` is expanded from.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::company::Company;
use crate::error::Problem;
use crate::yaml;

mod env;
mod findings;
mod scope;

pub use env::{
    CompanyEnv, DEFAULT_COMPANY_ENV_NAMES, DEFAULT_COMPANY_ENV_PREFIX, FORBIDDEN_MCP_ENV,
    FORBIDDEN_MCP_ENV_PREFIXES,
};
pub use scope::Scope;

/// What the company may make the engine do. The defaults are the safe
/// ones: no MCP program, only the model-key variables, any host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Security {
    /// Programs the company's stdio MCP servers may run. A company `command`
    /// must equal an entry exactly: `npx` allows the bare command `npx`
    /// (found on the engine's `PATH`), never `/tmp/x/npx`; an entry with a
    /// `/` allows that one path. Empty: no stdio MCP server may start unless
    /// `allow_any_mcp_command` is on. Note that `npx`, `uvx` and the like
    /// run whatever package their arguments name.
    #[serde(default)]
    pub mcp_commands: Vec<String>,
    /// Let the company run any program as a stdio MCP server, with any
    /// environment. Whoever holds an `admin` token can then run code as the
    /// engine's user.
    #[serde(default)]
    pub allow_any_mcp_command: bool,
    /// The environment variables the company's `${VAR}` references may read
    /// (model keys, webhook secrets, MCP credentials). Nothing else of the
    /// process environment is visible to it.
    #[serde(default)]
    pub company_env: CompanyEnv,
    /// Hosts the company's model providers (`base_url`, or the provider's
    /// default host) and HTTP MCP servers (`url`) may be sent to: `host`
    /// exactly, or `*.example.com` for any subdomain of `example.com`.
    /// Empty: any host.
    #[serde(default)]
    pub outbound_hosts: Vec<String>,
}

/// Looks an environment variable up.
pub type Lookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

impl Security {
    /// Whether the company may run `command` as a stdio MCP server.
    pub fn allows_command(&self, command: &str) -> bool {
        self.allow_any_mcp_command || self.mcp_commands.iter().any(|c| c == command)
    }

    /// Whether the company may send requests to `host` (empty allowlist: any).
    pub fn allows_host(&self, host: &str) -> bool {
        if self.outbound_hosts.is_empty() {
            return true;
        }
        let host = normal_host(host);
        self.outbound_hosts.iter().any(|entry| {
            let entry = normal_host(entry);
            match entry.strip_prefix("*.") {
                Some(domain) => {
                    host.len() > domain.len() + 1
                        && host.ends_with(domain)
                        && host.as_bytes()[host.len() - domain.len() - 1] == b'.'
                }
                None => host == entry,
            }
        })
    }

    /// `lookup` restricted to the variables the company may read: every
    /// other name is unset. This is the environment of the company's
    /// `${VAR}` (model keys, MCP servers, webhook secrets).
    pub fn company_lookup(&self, lookup: Lookup) -> Lookup {
        let allowed = self.company_env.clone();
        Arc::new(move |name: &str| {
            if allowed.allows(name) {
                lookup(name)
            } else {
                None
            }
        })
    }

    /// [`company_lookup`](Self::company_lookup) over the process environment.
    pub fn company_process_env(&self) -> Lookup {
        self.company_lookup(Arc::new(crate::interpolate::process_env))
    }

    /// What in `company` this policy refuses, each with its YAML path (and
    /// its line, when `text` is the document the company was read from).
    /// `source` names the input, like validation problems do.
    pub fn company_problems(
        &self,
        source: &str,
        text: Option<&str>,
        company: &Company,
    ) -> Vec<Problem> {
        let findings = self.findings(company);
        if findings.is_empty() {
            return Vec::new();
        }
        // Parsed again only when there is something to locate.
        let tree = text.and_then(|t| yaml::parse(t).root);
        crate::check::locate(source, tree.as_ref(), findings)
    }
}

fn normal_host(host: &str) -> String {
    host.trim()
        .trim_end_matches('.')
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests;
