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

use std::fmt;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::check::Finding;
use crate::company::{Company, EmbeddingsKind, LlmKind, McpTransport, Unit};
use crate::error::Problem;
use crate::interpolate::references;
use crate::yaml::{self, YamlPath};

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

/// What an API token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The reads: agents, org, tools, events, tokens, budgets.
    Read,
    /// Running work: tasks and budgets (every write that is not `/config`).
    Operate,
    /// The company configuration: `GET`/`PUT /config`, revisions, reverts.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Read, Scope::Operate, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Operate => "operate",
            Scope::Admin => "admin",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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

    fn findings(&self, company: &Company) -> Vec<Finding> {
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
                LlmKind::CliAgent => continue,
            };
            let at = llm.key(name);
            let what = format!("model provider `{name}`");
            self.check_url(p.base_url.as_deref(), default, &at, "base_url", &what, out);
        }
        if let Some(e) = &company.providers.embeddings {
            let default = match e.kind {
                EmbeddingsKind::Openai | EmbeddingsKind::OpenaiCompatible => Some(OPENAI_URL),
            };
            let at = YamlPath::root().key("providers").key("embeddings");
            let what = "the embeddings provider";
            self.check_url(e.base_url.as_deref(), default, &at, "base_url", what, out);
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

fn normal_host(host: &str) -> String {
    host.trim()
        .trim_end_matches('.')
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

fn forbidden_env(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    FORBIDDEN_MCP_ENV.contains(&upper.as_str())
        || FORBIDDEN_MCP_ENV_PREFIXES
            .iter()
            .any(|p| upper.starts_with(p))
}

/// Every `${NAME}` in the strings of `value`, with where it is.
fn collect_references(value: &Value, path: &YamlPath, out: &mut Vec<(YamlPath, String)>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn company(yaml: &str) -> Company {
        Company::from_yaml("t", yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    fn messages(s: &Security, yaml: &str) -> Vec<String> {
        s.company_problems("company.yaml", Some(yaml), &company(yaml))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    const SHELL: &str =
        "name: T\nmcp_servers:\n  - name: x\n    command: /bin/sh\n    args: [-c, id]\n";

    #[test]
    fn commands_must_be_listed_exactly() {
        let s = Security {
            mcp_commands: vec!["npx".into(), "/usr/local/bin/srv".into()],
            ..Security::default()
        };
        assert!(s.allows_command("npx"));
        assert!(s.allows_command("/usr/local/bin/srv"));
        for refused in [
            "/tmp/x/npx",
            "./npx",
            "srv",
            "/usr/local/bin/../bin/srv",
            "sh",
        ] {
            assert!(!s.allows_command(refused), "{refused}");
        }
        let found = messages(&s, SHELL);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("company.yaml:4:14: mcp_servers[0].command:")
                && found[0].contains("`/bin/sh`")
                && found[0].contains("security.mcp_commands"),
            "{found:?}"
        );
        let any = Security {
            allow_any_mcp_command: true,
            ..Security::default()
        };
        assert!(messages(&any, SHELL).is_empty());
    }

    #[test]
    fn loader_variables_are_refused_for_stdio_servers() {
        let s = Security {
            mcp_commands: vec!["srv".into()],
            ..Security::default()
        };
        let yaml = "name: T\nmcp_servers:\n  - name: x\n    shared: false\n    command: srv\n    env: {LD_PRELOAD: /tmp/x.so, OK: '1'}\nroles:\n  - name: A\n    handle: a\n    mcp_env: {x: {NODE_OPTIONS: --require /tmp/x.js}}\nunits:\n  - name: U\n    mcp_env: {x: {Path: /tmp}}\n";
        let found = messages(&s, yaml);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0].contains("mcp_servers[0].env.LD_PRELOAD"),
            "{found:?}"
        );
        assert!(
            found[1].contains("roles[0].mcp_env.x.NODE_OPTIONS"),
            "{found:?}"
        );
        assert!(found[2].contains("units[0].mcp_env.x.Path"), "{found:?}");
    }

    #[test]
    fn variables_outside_the_allowlist_are_named_with_their_path() {
        let s = Security::default();
        let yaml = "name: T\nproviders:\n  llm:\n    main:\n      type: openai\n      model: m\n      api_keys: [\"${OPENAI_API_KEY}\", \"${CREWLET_CO_KEY2}\", \"${PULSAR_TOKEN}\"]\nmcp_servers:\n  - name: h\n    transport: http\n    url: https://mcp.example.com/${DATABASE_URL}\n";
        let found = messages(&s, yaml);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].contains("providers.llm.main.api_keys[2]")
                && found[0].contains("`PULSAR_TOKEN`"),
            "{found:?}"
        );
        assert!(
            found[1].contains("mcp_servers[0].url") && found[1].contains("`DATABASE_URL`"),
            "{found:?}"
        );
        let env = CompanyEnv::default();
        assert!(env.allows("OPENAI_API_KEY") && env.allows("CREWLET_CO_X"));
        assert!(!env.allows("CREWLET_PROVIDERS__DATABASE__DSN") && !env.allows("HOME"));
    }

    #[test]
    fn the_company_lookup_hides_everything_else() {
        let s = Security::default();
        let lookup = s.company_lookup(Arc::new(|name: &str| Some(format!("value-of-{name}"))));
        assert_eq!(
            lookup("OPENAI_API_KEY").as_deref(),
            Some("value-of-OPENAI_API_KEY")
        );
        assert_eq!(
            lookup("CREWLET_CO_GH").as_deref(),
            Some("value-of-CREWLET_CO_GH")
        );
        assert_eq!(lookup("ACME_OPS_API_TOKEN"), None);
        assert_eq!(lookup("PATH"), None);
    }

    #[test]
    fn hosts_match_exactly_or_by_subdomain() {
        let s = Security {
            outbound_hosts: vec![
                "api.openai.com".into(),
                "*.anthropic.com".into(),
                "127.0.0.1".into(),
            ],
            ..Security::default()
        };
        for ok in [
            "api.openai.com",
            "API.OpenAI.com.",
            "api.anthropic.com",
            "a.b.anthropic.com",
            "127.0.0.1",
        ] {
            assert!(s.allows_host(ok), "{ok}");
        }
        for refused in [
            "anthropic.com",
            "evilanthropic.com",
            "api.openai.com.evil.com",
            "evil.com",
            "127.0.0.2",
        ] {
            assert!(!s.allows_host(refused), "{refused}");
        }
        assert!(Security::default().allows_host("anything.example"));
    }

    #[test]
    fn provider_and_mcp_hosts_are_checked_with_the_real_url_parser() {
        let s = Security {
            outbound_hosts: vec!["api.openai.com".into(), "mcp.example.com".into()],
            ..Security::default()
        };
        let yaml = "name: T\nproviders:\n  llm:\n    a:\n      type: openai\n      model: m\n      api_keys: [k]\n    b:\n      type: openai\n      model: m\n      api_keys: [k]\n      base_url: https://api.openai.com@evil.example/v1\n    c:\n      type: anthropic\n      model: m\n      api_keys: [k]\n    d:\n      type: openai-compatible\n      model: m\n      base_url: \"https://evil.example\\\\@api.openai.com/v1\"\nmcp_servers:\n  - name: h\n    transport: http\n    url: https://mcp.example.com/mcp\n";
        let found = messages(&s, yaml);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0].contains("providers.llm.b.base_url") && found[0].contains("`evil.example`"),
            "{found:?}"
        );
        assert!(
            found[1].contains("providers.llm.c.type") && found[1].contains("`api.anthropic.com`"),
            "{found:?}"
        );
        assert!(
            found[2].contains("providers.llm.d.base_url") && found[2].contains("`evil.example`"),
            "{found:?}"
        );
    }

    #[test]
    fn the_examples_pass_their_own_security_block() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        for (config, company_file) in [
            ("acme/config.yaml", "acme/company.yaml"),
            ("quickstart/config.yaml", "quickstart/company.yaml"),
        ] {
            let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap_or_default();
            let bootstrap = crate::check_bootstrap(config, &read(config))
                .unwrap_or_else(|p| panic!("{config}: {p:?}"));
            let text = read(company_file);
            let company = company(&text);
            let problems = bootstrap
                .security
                .company_problems(company_file, Some(&text), &company);
            assert!(problems.is_empty(), "{company_file}: {problems:#?}");
        }
    }

    #[test]
    fn the_block_itself_is_checked() {
        let s = Security {
            mcp_commands: vec![" npx".into()],
            company_env: CompanyEnv {
                names: vec![],
                prefixes: vec![String::new()],
            },
            outbound_hosts: vec![
                "https://x.com".into(),
                "x.com:443".into(),
                "*.ok.com".into(),
                "a.b".into(),
            ],
            ..Security::default()
        };
        let found = s.findings_of_block(&YamlPath::root().key("security"));
        let paths: Vec<String> = found.iter().map(|f| f.path.to_string()).collect();
        assert_eq!(
            paths,
            [
                "security.mcp_commands[0]",
                "security.company_env.prefixes[0]",
                "security.outbound_hosts[0]",
                "security.outbound_hosts[1]"
            ]
        );
    }
}
