//! Checking a company against the policy: the commands, variables and hosts
//! it names that the operator's `security` block does not allow.

use super::Security;
use super::env::{collect_references, forbidden_env};
use super::normal_host;
use crate::check::Finding;
use crate::company::{Company, EmbeddingsKind, LlmKind, McpTransport, Unit};
use crate::yaml::YamlPath;

impl Security {
    pub(super) fn findings(&self, company: &Company) -> Vec<Finding> {
        let mut out = Vec::new();
        self.command_findings(company, &mut out);
        self.env_findings(company, &mut out);
        self.host_findings(company, &mut out);
        out
    }

    fn command_findings(&self, company: &Company, out: &mut Vec<Finding>) {
        if self.allow_any_mcp_command {
            return;
        }
        let servers = YamlPath::root().key("mcp_servers");
        for (i, server) in company.mcp_servers.iter().enumerate() {
            if server.transport != McpTransport::Stdio {
                continue;
            }
            let name = &server.name;
            let at = servers.index(i);
            if let Some(command) = &server.command
                && !self.allows_command(command)
            {
                out.push(Finding::new(
                    at.key("command"),
                    format!(
                        "MCP server `{name}` runs `{command}`, which the bootstrap file does not allow: an operator must add it to security.mcp_commands in config.yaml (or set security.allow_any_mcp_command: true)"
                    ),
                ));
            }
            for key in server.env.keys() {
                if forbidden_env(key) {
                    out.push(Finding::new(
                        at.key("env").key(key),
                        format!(
                            "`{key}` may not be set for stdio MCP server `{name}`: it can make the program run other code; only security.allow_any_mcp_command: true in config.yaml permits it"
                        ),
                    ));
                }
            }
        }
        // `mcp_env` (of units and roles) is the environment of per-role servers.
        let per_role_stdio = company
            .mcp_servers
            .iter()
            .any(|s| s.transport == McpTransport::Stdio && !s.shared);
        if !per_role_stdio {
            return;
        }
        type ServerEnv = indexmap::IndexMap<String, indexmap::IndexMap<String, String>>;
        let mut check = |env: &ServerEnv, at: YamlPath| {
            for (server, key) in env
                .iter()
                .flat_map(|(server, vars)| vars.keys().map(move |k| (server, k)))
                .filter(|(_, k)| forbidden_env(k))
            {
                out.push(Finding::new(
                    at.key("mcp_env").key(server).key(key),
                    format!(
                        "`{key}` may not be set in `mcp_env` for stdio MCP servers: it can make the program run other code; only security.allow_any_mcp_command: true in config.yaml permits it"
                    ),
                ));
            }
        };
        fn units<'a>(list: &'a [Unit], at: &YamlPath, out: &mut Vec<(&'a Unit, YamlPath)>) {
            for (i, u) in list.iter().enumerate() {
                let here = at.index(i);
                units(&u.children, &here.key("children"), out);
                out.push((u, here));
            }
        }
        for (i, role) in company.roles.iter().enumerate() {
            check(&role.mcp_env, YamlPath::root().key("roles").index(i));
        }
        let mut all = Vec::new();
        units(&company.units, &YamlPath::root().key("units"), &mut all);
        for (unit, at) in all {
            check(&unit.mcp_env, at.clone());
            for (i, role) in unit.roles.iter().enumerate() {
                check(&role.mcp_env, at.key("roles").index(i));
            }
        }
    }

    fn env_findings(&self, company: &Company, out: &mut Vec<Finding>) {
        let Ok(json) = serde_json::to_value(company) else {
            return;
        };
        let mut found = Vec::new();
        collect_references(&json, &YamlPath::root(), &mut found);
        for (path, name) in found {
            if !self.company_env.allows(&name) {
                out.push(Finding::new(
                    path,
                    format!(
                        "`${{{name}}}` reads environment variable `{name}`, which the bootstrap file does not let the company read: an operator must add it to security.company_env.names in config.yaml (or give it a prefix listed in security.company_env.prefixes)"
                    ),
                ));
            }
        }
    }

    fn host_findings(&self, company: &Company, out: &mut Vec<Finding>) {
        if self.outbound_hosts.is_empty() {
            return;
        }
        let llm = YamlPath::root().key("providers").key("llm");
        for (name, p) in company.llm_providers().iter() {
            let default = match p.kind {
                LlmKind::Openai | LlmKind::OpenaiCompatible => Some(OPENAI_URL),
                LlmKind::Anthropic => Some(ANTHROPIC_URL),
                LlmKind::CliAgent | LlmKind::Local => continue,
            };
            let at = llm.key(name);
            let what = format!("model provider `{name}`");
            self.check_url(p.base_url.as_deref(), default, &at, "base_url", &what, out);
        }
        if let Some(e) = &company.providers.embeddings {
            let default = match e.kind {
                EmbeddingsKind::Openai | EmbeddingsKind::OpenaiCompatible => Some(OPENAI_URL),
                // in-process: no host is called, `base_url` is ignored
                EmbeddingsKind::Local => None,
            };
            let at = YamlPath::root().key("providers").key("embeddings");
            let what = "the embeddings provider";
            if e.kind != EmbeddingsKind::Local {
                self.check_url(e.base_url.as_deref(), default, &at, "base_url", what, out);
            }
        }
        for (i, server) in company.mcp_servers.iter().enumerate() {
            if server.transport == McpTransport::Http {
                let at = YamlPath::root().key("mcp_servers").index(i);
                let what = format!("MCP server `{}`", server.name);
                self.check_url(server.url.as_deref(), None, &at, "url", &what, out);
            }
        }
    }

    /// `url` (or, unset, the provider's `default`) must name an allowed host.
    #[allow(clippy::too_many_arguments)]
    fn check_url(
        &self,
        url: Option<&str>,
        default: Option<&str>,
        at: &YamlPath,
        key_name: &str,
        what: &str,
        out: &mut Vec<Finding>,
    ) {
        let (url, path) = match (url, default) {
            (Some(u), _) => (u, at.key(key_name)),
            (None, Some(d)) => (d, at.key("type")),
            // Required, and validation says so.
            (None, None) => return,
        };
        if crate::interpolate::has_references(url) {
            out.push(Finding::new(
                path,
                format!(
                    "`{key_name}` of {what} must name its host without `${{VAR}}` while security.outbound_hosts is set in config.yaml"
                ),
            ));
            return;
        }
        let host = match url::Url::parse(url) {
            Ok(u) => u.host_str().map(str::to_owned),
            Err(_) => None,
        };
        let Some(host) = host else {
            out.push(Finding::new(
                path,
                format!("`{key_name}` of {what} is not a URL with a host"),
            ));
            return;
        };
        if !self.allows_host(&host) {
            out.push(Finding::new(
                path,
                format!(
                    "{what} would send requests to `{host}`, which is not in security.outbound_hosts of the bootstrap file: an operator must add it in config.yaml"
                ),
            ));
        }
    }

    /// Problems of the block itself, for the bootstrap file's validation.
    pub(crate) fn findings_of_block(&self, at: &YamlPath) -> Vec<Finding> {
        let mut out = Vec::new();
        for (i, c) in self.mcp_commands.iter().enumerate() {
            if c.trim().is_empty() || c.trim() != c {
                out.push(Finding::new(
                    at.key("mcp_commands").index(i),
                    "an MCP command must be a program name or path without surrounding spaces",
                ));
            }
        }
        for (i, p) in self.company_env.prefixes.iter().enumerate() {
            if p.is_empty() {
                out.push(Finding::new(
                    at.key("company_env").key("prefixes").index(i),
                    "an empty prefix would let the company read every environment variable; list names or a real prefix",
                ));
            }
        }
        for (i, h) in self.outbound_hosts.iter().enumerate() {
            let bare = h.strip_prefix("*.").unwrap_or(h);
            let bad = bare.is_empty()
                || bare.contains(['/', '*', ' ', '@', '?', '#'])
                || url::Url::parse(&format!("http://{bare}/")).map_or(true, |u| {
                    u.host_str().map(normal_host) != Some(normal_host(bare)) || u.port().is_some()
                });
            if bad {
                out.push(Finding::new(
                    at.key("outbound_hosts").index(i),
                    format!(
                        "`{h}` is not a host: write `api.example.com` or `*.example.com` (no scheme, port or path)"
                    ),
                ));
            }
        }
        out
    }
}

/// Where the providers go when `base_url` is unset (as in `crewlet-llm`).
const OPENAI_URL: &str = "https://api.openai.com/v1";
const ANTHROPIC_URL: &str = "https://api.anthropic.com";
