//! Tier A: the bootstrap `config.yaml` (ops-owned, read at start).

use std::path::Path;

use figment::Figment;
use figment::providers::Format;
use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::check::{self, Finding};
use crate::env::{ENV_SOURCE, EnvOverrides};
use crate::error::{ConfigError, Problem};
use crate::figment_yaml::SaphyrYaml;
use crate::interpolate::{interpolate_all, process_env};
use crate::schema::Tier;
use crate::security::{Scope, Security};
use crate::yaml::YamlPath;

/// Prefix of the environment variables that override Tier A settings.
pub const ENV_PREFIX: &str = "CREWLET_";

/// How a variable name's nesting is written: `CREWLET_PROVIDERS__DATABASE__DSN`.
pub const ENV_SEPARATOR: &str = "__";

/// The process bootstrap: where the queue and the database are, the embedded
/// API, logging. Everything has a default: an empty file runs the embedded
/// single-process setup (memory queue and stores, nothing durable).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Crewlet bootstrap (config.yaml)")]
pub struct Bootstrap {
    /// DEBUG-level logs (same as `--debug`).
    #[serde(default)]
    pub debug: bool,
    /// Infrastructure the engine runs on.
    #[serde(default)]
    pub providers: BootstrapProviders,
    /// The HTTP API (dashboard, webhooks, reads, config).
    #[serde(default)]
    pub api: ApiConfig,
    /// Logs and traces.
    #[serde(default)]
    pub observability: Observability,
    /// What the company file (Tier B, replaceable through `PUT /config` by
    /// an `admin` token) may make the engine do: MCP programs, environment
    /// variables, outbound hosts.
    #[serde(default)]
    pub security: Security,
    /// The original engine's encrypted secret store (key material).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "the secret store is not built yet: secrets come from the environment"))]
    pub secrets: Option<SecretsConfig>,
    /// This process as a node of a fleet: its id, roles and labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "fleets are not built yet: one engine runs every seat"))]
    pub node: Option<NodeConfig>,
}

/// Encrypted secret store keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretsConfig {
    /// Id of the key new secrets are encrypted with.
    #[serde(default)]
    pub active_key_id: String,
    /// Key material, by id.
    #[serde(default)]
    pub keys: Vec<SecretKey>,
}

/// One key of the secret store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretKey {
    /// Key id.
    pub id: String,
    /// Key material (base64).
    pub material: String,
}

/// A fleet node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Node id; empty: derived from the host.
    #[serde(default)]
    pub id: String,
    /// What the node does: `ingress`, `seats`, `singletons`.
    #[serde(default)]
    pub roles: Vec<NodeRole>,
    /// Labels seats' `placement` matches.
    #[serde(default)]
    pub labels: IndexMap<String, String>,
}

/// What a fleet node does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeRole {
    Ingress,
    Seats,
    Singletons,
}

/// Infrastructure. A missing block means the in-memory stand-in.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BootstrapProviders {
    /// The event queue. Unset: the in-process memory broker (nothing survives
    /// a restart, one process only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueConfig>,
    /// PostgreSQL. Unset: memory stores (nothing survives a restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<DatabaseConfig>,
    /// The knowledge store (`pgvector` or `memory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "the knowledge system is not built yet"))]
    pub knowledge: Option<KnowledgeStore>,
}

/// The knowledge store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeStore {
    /// `pgvector` or `memory`.
    #[serde(rename = "type", default)]
    pub kind: KnowledgeStoreKind,
}

/// Knowledge store backends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KnowledgeStoreKind {
    #[default]
    Pgvector,
    Memory,
}

/// The event queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// Which broker.
    #[serde(rename = "type", default)]
    pub kind: QueueKind,
    /// Broker URL, `pulsar://HOST:6650` or `pulsar+ssl://HOST:6651`
    /// (required for `pulsar`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Pulsar tenant; it must exist (the engine never calls the admin API).
    #[serde(default = "default_tenant")]
    #[schemars(length(min = 1))]
    pub tenant: String,
    /// Pulsar namespace within the tenant; it must exist.
    #[serde(default = "default_namespace")]
    #[schemars(length(min = 1))]
    pub namespace: String,
    /// Pulsar admin (REST) URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "the engine never calls the Pulsar admin API: tenant and namespace must exist"))]
    pub admin_url: Option<String>,
    /// Pulsar token (JWT) for token authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_token: Option<String>,
    /// PEM file of CA certificates trusted for `pulsar+ssl://`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_trust_certs_path: Option<String>,
    /// How long connecting, subscribing and the first producer of a topic
    /// wait for a broker that is unreachable, still starting or still loading
    /// topics (retrying with backoff, each retry logged) before failing.
    /// `0` fails on the first error.
    #[serde(default = "default_startup_retry_seconds")]
    #[schemars(range(max = 3600))]
    pub startup_retry_seconds: u64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            kind: QueueKind::default(),
            url: None,
            tenant: default_tenant(),
            namespace: default_namespace(),
            auth_token: None,
            admin_url: None,
            tls_trust_certs_path: None,
            startup_retry_seconds: default_startup_retry_seconds(),
        }
    }
}

fn default_startup_retry_seconds() -> u64 {
    60
}

fn default_tenant() -> String {
    "public".into()
}

fn default_namespace() -> String {
    "default".into()
}

/// Which broker carries events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum QueueKind {
    /// Apache Pulsar: durable, several processes.
    #[default]
    Pulsar,
    /// The in-process broker: same semantics, nothing durable, one process.
    Memory,
}

/// PostgreSQL (with pgvector; TimescaleDB used when installed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// Connection string, e.g. `postgres://crewlet:crewlet@127.0.0.1:5432/crewlet`.
    #[schemars(length(min = 1))]
    pub dsn: String,
    /// Width of embedding vectors. Fixed by the first migration: changing it
    /// later is refused. Must equal the company's `providers.embeddings.dimensions`.
    #[serde(default = "default_embedding_dim")]
    #[schemars(range(min = 1, max = 16000))]
    pub embedding_dim: u32,
    /// Connections in the pool.
    #[serde(default = "default_max_connections")]
    #[schemars(range(min = 1))]
    pub max_connections: u32,
}

fn default_embedding_dim() -> u32 {
    1536
}

fn default_max_connections() -> u32 {
    16
}

/// The HTTP API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// Address to listen on.
    #[serde(default = "default_host")]
    #[schemars(length(min = 1))]
    pub host: String,
    /// Port of the API served inside the engine process; 0 = no embedded API
    /// (run `crewlet run api` separately).
    #[serde(default)]
    pub port: u16,
    /// Who may call the API.
    #[serde(default)]
    pub auth: ApiAuth,
    /// How the listener defends itself against slow and idle clients.
    #[serde(default)]
    pub connections: ApiConnections,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            host: default_host(),
            port: 0,
            auth: ApiAuth::default(),
            connections: ApiConnections::default(),
        }
    }
}

/// Limits of the HTTP listener (`api.connections`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiConnections {
    /// Time from a request's first byte to its last header; a slower client
    /// is disconnected.
    #[serde(default = "default_header_read_timeout")]
    #[schemars(range(min = 1))]
    pub header_read_timeout_seconds: u64,
    /// How long a connection may stay open with no request in flight.
    #[serde(default = "default_idle_timeout")]
    #[schemars(range(min = 1))]
    pub idle_timeout_seconds: u64,
    /// Most connections open at once; lowered at start to the open-file
    /// limit minus 128. At the cap the longest-idle connection is closed.
    #[serde(default = "default_api_max_connections")]
    #[schemars(range(min = 1))]
    pub max_connections: u32,
}

impl Default for ApiConnections {
    fn default() -> Self {
        Self {
            header_read_timeout_seconds: default_header_read_timeout(),
            idle_timeout_seconds: default_idle_timeout(),
            max_connections: default_api_max_connections(),
        }
    }
}

fn default_header_read_timeout() -> u64 {
    10
}

fn default_idle_timeout() -> u64 {
    60
}

fn default_api_max_connections() -> u32 {
    1000
}

fn default_host() -> String {
    "127.0.0.1".into()
}

/// API authentication. Webhooks are never behind bearer auth (each source
/// verifies its own signature).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiAuth {
    /// Bearer tokens; writes and `/config` always need one.
    #[serde(default)]
    pub tokens: Vec<ApiToken>,
    /// The original engine's switch to turn the token check off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "Crewlet always checks tokens on writes and /config"))]
    pub disabled: Option<bool>,
    /// Let reads through without a token.
    #[serde(default = "default_true")]
    pub allow_anonymous_read: bool,
    /// Origins allowed by CORS (e.g. `https://dash.example.com`); empty = same origin only.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
}

impl Default for ApiAuth {
    fn default() -> Self {
        Self {
            tokens: Vec::new(),
            disabled: None,
            allow_anonymous_read: true,
            allowed_origins: Vec::new(),
        }
    }
}

fn default_true() -> bool {
    true
}

/// One API bearer token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiToken {
    /// Who the token belongs to; recorded as the author of config revisions.
    #[schemars(length(min = 1))]
    pub id: String,
    /// The secret, usually a `${VAR}` reference or set through the environment.
    #[schemars(length(min = 1))]
    pub token: String,
    /// What the token may do: `read`, `operate` (tasks and budgets),
    /// `admin` (the company configuration). `operate` and `admin` include
    /// `read`. Unset: every scope, with a warning at start (deprecated; list
    /// the scopes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub scopes: Option<Vec<Scope>>,
}

impl ApiToken {
    /// A token with every scope (as a file without `scopes` gives).
    pub fn new(id: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            token: token.into(),
            scopes: None,
        }
    }

    /// The same token with these scopes.
    pub fn with_scopes(mut self, scopes: impl IntoIterator<Item = Scope>) -> Self {
        self.scopes = Some(scopes.into_iter().collect());
        self
    }

    /// Whether the token may do what `scope` covers.
    pub fn grants(&self, scope: Scope) -> bool {
        match &self.scopes {
            None => true,
            Some(list) => list.contains(&scope) || (scope == Scope::Read && !list.is_empty()),
        }
    }
}

/// Logs and traces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Observability {
    /// `service.name` of exported traces.
    #[serde(default = "default_service_name")]
    #[schemars(length(min = 1))]
    pub service_name: String,
    /// OTLP/HTTP endpoint for traces, e.g. `http://127.0.0.1:4318`. The
    /// standard `OTEL_EXPORTER_OTLP_ENDPOINT` variable is used when this is unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// Log line format.
    #[serde(default)]
    pub log_format: LogFormat,
    /// Log filter in `tracing` syntax, e.g. `info,crewlet_turn=debug`;
    /// `RUST_LOG` wins when set. Unset: `info` (`debug` with `debug: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_filter: Option<String>,
}

impl Default for Observability {
    fn default() -> Self {
        Self {
            service_name: default_service_name(),
            otlp_endpoint: None,
            log_format: LogFormat::default(),
            log_filter: None,
        }
    }
}

fn default_service_name() -> String {
    "crewlet".into()
}

/// How log lines look.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// JSON when stderr is not a terminal, text otherwise.
    #[default]
    Auto,
    /// One JSON object per line.
    Json,
    /// Human-readable text.
    Text,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Auto => "auto",
            LogFormat::Json => "json",
            LogFormat::Text => "text",
        }
    }
}

impl Bootstrap {
    /// Parses and validates a bootstrap file's text alone: no environment is
    /// read. `source` names the input in errors.
    pub fn from_yaml(source: &str, text: &str) -> Result<Bootstrap, ConfigError> {
        check_bootstrap(source, text).map_err(|problems| ConfigError::Invalid {
            file: source.to_owned(),
            problems,
        })
    }

    /// Reads `path` (or only defaults when `None`), applies `CREWLET_*`
    /// environment overrides, validates, and expands `${VAR}` references from
    /// the process environment. This is what a starting process calls.
    pub fn load(path: Option<&Path>) -> Result<Bootstrap, ConfigError> {
        Self::load_from(path, Self::figment(path), process_env)
    }

    /// Like [`Bootstrap::load`], with a caller-built figment (for instance
    /// [`Bootstrap::figment`] plus command-line overrides) and variable
    /// lookup. The file is first validated alone so its problems carry lines.
    pub fn load_from(
        path: Option<&Path>,
        figment: Figment,
        vars: impl Fn(&str) -> Option<String>,
    ) -> Result<Bootstrap, ConfigError> {
        let mut tree = None;
        let mut source = String::from("defaults");
        if let Some(path) = path {
            source = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
                path: path.to_owned(),
                source: e,
            })?;
            let parsed = check::structural::<Bootstrap>(&source, &text, Tier::Bootstrap);
            if !parsed.problems.is_empty() {
                return Err(ConfigError::Invalid {
                    file: source,
                    problems: parsed.problems,
                });
            }
            tree = parsed.tree;
        }
        let bootstrap: Bootstrap = figment
            .extract()
            .map_err(|e| figment_problems(&source, e))?;
        let problems = check::locate(&source, tree.as_ref(), bootstrap.findings());
        if !problems.is_empty() {
            return Err(ConfigError::Invalid {
                file: source,
                problems,
            });
        }
        interpolate_all(&bootstrap, vars)
    }

    /// The layered sources: defaults, the file (if any, read with
    /// serde-saphyr), then `CREWLET_*` variables (`__` nests:
    /// `CREWLET_PROVIDERS__DATABASE__DSN`).
    pub fn figment(path: Option<&Path>) -> Figment {
        let mut figment = Figment::new();
        if let Some(path) = path {
            figment = figment.merge(SaphyrYaml::file_exact(path));
        }
        figment.merge(EnvOverrides::from_process())
    }

    /// Problems of meaning (the types already hold the structure).
    pub(crate) fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        if let Some(q) = &self.providers.queue {
            let at = YamlPath::root().key("providers").key("queue");
            match (q.kind, q.url.as_deref()) {
                (QueueKind::Pulsar, None) => out.push(Finding::new(
                    at.key("url"),
                    "a pulsar queue needs `url` (pulsar://HOST:6650 or pulsar+ssl://HOST:6651)",
                )),
                (QueueKind::Pulsar, Some(url))
                    if !url.contains("${")
                        && !url.starts_with("pulsar://")
                        && !url.starts_with("pulsar+ssl://") =>
                {
                    out.push(Finding::new(
                        at.key("url"),
                        format!("queue url `{url}` must start with pulsar:// or pulsar+ssl://"),
                    ))
                }
                _ => {}
            }
        }
        let mut ids: Vec<&str> = Vec::new();
        for (i, t) in self.api.auth.tokens.iter().enumerate() {
            if ids.contains(&t.id.as_str()) {
                let at = YamlPath::root()
                    .key("api")
                    .key("auth")
                    .key("tokens")
                    .index(i)
                    .key("id");
                out.push(Finding::new(
                    at,
                    format!("token id `{}` is used twice", t.id),
                ));
            }
            ids.push(&t.id);
            if t.scopes.as_ref().is_some_and(Vec::is_empty) {
                let at = YamlPath::root()
                    .key("api")
                    .key("auth")
                    .key("tokens")
                    .index(i)
                    .key("scopes");
                out.push(Finding::new(
                    at,
                    format!(
                        "token `{}` has no scopes and could do nothing: list read, operate and/or admin",
                        t.id
                    ),
                ));
            }
        }
        out.extend(
            self.security
                .findings_of_block(&YamlPath::root().key("security")),
        );
        out
    }
}

/// Validates a bootstrap file's text alone (no environment) and returns every
/// problem found.
impl Bootstrap {
    /// Keys set in this file that have no effect yet, by YAML path (no
    /// lines): what the engine logs when it starts.
    pub fn warnings(&self) -> Vec<Problem> {
        crate::inert::warnings("config.yaml", Tier::Bootstrap, self, None)
    }
}

pub fn check_bootstrap(source: &str, text: &str) -> Result<Bootstrap, Vec<Problem>> {
    let parsed = check::structural::<Bootstrap>(source, text, Tier::Bootstrap);
    let mut problems = parsed.problems;
    match parsed.value {
        Some(b) if problems.is_empty() => {
            problems = check::locate(source, parsed.tree.as_ref(), b.findings());
            if problems.is_empty() {
                Ok(b)
            } else {
                Err(problems)
            }
        }
        Some(b) => {
            problems.extend(check::locate(source, parsed.tree.as_ref(), b.findings()));
            check::sort(&mut problems);
            Err(problems)
        }
        None => Err(problems),
    }
}

fn figment_problems(source: &str, error: figment::Error) -> ConfigError {
    let problems = error
        .into_iter()
        .map(|e| {
            let from_env = e.metadata.as_ref().is_some_and(|m| m.name == ENV_SOURCE);
            let path = e.path.join(".");
            let mut message = e.kind.to_string();
            if from_env {
                let var = format!(
                    "{ENV_PREFIX}{}",
                    e.path
                        .iter()
                        .map(|s| s.to_uppercase())
                        .collect::<Vec<_>>()
                        .join(ENV_SEPARATOR)
                );
                message = format!("{message} (set by environment variable {var})");
            }
            Problem {
                file: if from_env {
                    "environment".into()
                } else {
                    source.to_owned()
                },
                path,
                line: None,
                column: None,
                message: lower_first(&message),
            }
        })
        .collect();
    let file = source.to_owned();
    ConfigError::Invalid { file, problems }
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}
