//! `providers`: the queue, the database and the knowledge store the engine
//! runs on.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// later is refused. At least the company's `providers.embeddings`
    /// width (384 for `type: local`, 1536 by default): narrower vectors are
    /// zero-padded, which leaves cosine similarity unchanged.
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
