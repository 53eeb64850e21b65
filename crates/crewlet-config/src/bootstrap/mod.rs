//! Tier A: the bootstrap `config.yaml` (ops-owned, read at start).

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::security::Security;

mod api;
mod load;
mod observability;
mod providers;

pub use api::{
    AnonymousAccess, AnonymousRead, ApiAuth, ApiConfig, ApiConnections, ApiToken, is_loopback_host,
};
pub use load::check_bootstrap;
pub use observability::{LogFormat, Observability};
pub use providers::{BootstrapProviders, DatabaseConfig, QueueConfig, QueueKind};
// Not named outside this module today, but they were `bootstrap::` paths
// before the split and stay paths.
#[allow(unused_imports)]
pub use providers::{KnowledgeStore, KnowledgeStoreKind};

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
    /// The keyring of the secret store (`crewlet secrets`): `${NAME}`
    /// resolve from the store first, the environment second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<SecretsConfig>,
    /// This process as a node of a fleet: its id, roles, labels and the
    /// timing of its leases (see `docs/fleet.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeConfig>,
}

/// The secret store's keys: AES-256-GCM, by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretsConfig {
    /// Id of the key new secrets are sealed with (one of `keys`).
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
    /// Key material: base64 of 32 bytes, usually a `${VAR}`
    /// (`crewlet secrets keygen` makes one).
    pub material: String,
}

/// A fleet node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// Stable node id, distinct per process (`CREWLET_NODE_ID` wins when
    /// set); empty: the host name.
    #[serde(default)]
    pub id: String,
    /// What the node does: `ingress` (the HTTP API), `seats` (runs agent
    /// seats), `duties` (the company-wide singleton duties: scheduler,
    /// maintenance, learning consolidation). Empty: all three.
    #[serde(default)]
    pub roles: Vec<NodeRole>,
    /// Labels seats' `placement` matches.
    #[serde(default)]
    pub labels: IndexMap<String, String>,
    /// How long a lease (a seat, a duty, the node's presence) lasts without
    /// renewal: a node that stops heartbeating loses its seats after this.
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl_seconds: u32,
    /// How often the node renews its leases and rebalances its seats;
    /// must be well under `lease_ttl_seconds`.
    #[serde(default = "default_heartbeat")]
    pub heartbeat_seconds: u32,
}

fn default_lease_ttl() -> u32 {
    45
}

fn default_heartbeat() -> u32 {
    15
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            id: String::new(),
            roles: Vec::new(),
            labels: IndexMap::new(),
            lease_ttl_seconds: default_lease_ttl(),
            heartbeat_seconds: default_heartbeat(),
        }
    }
}

/// What a fleet node does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NodeRole {
    /// Serves the HTTP API (webhooks, dashboard, reads).
    Ingress,
    /// Claims seat leases and runs the seats' turns.
    Seats,
    /// Runs the company-wide duties, each on one node at a time.
    #[serde(alias = "workers", alias = "singletons")]
    Duties,
}

impl NodeRole {
    pub const ALL: [NodeRole; 3] = [NodeRole::Ingress, NodeRole::Seats, NodeRole::Duties];

    pub fn as_str(self) -> &'static str {
        match self {
            NodeRole::Ingress => "ingress",
            NodeRole::Seats => "seats",
            NodeRole::Duties => "duties",
        }
    }

    /// `ingress`, `seats`, `duties` (and the original's `workers`).
    pub fn parse(s: &str) -> Option<NodeRole> {
        match s.trim() {
            "ingress" => Some(NodeRole::Ingress),
            "seats" => Some(NodeRole::Seats),
            "duties" | "workers" | "singletons" => Some(NodeRole::Duties),
            _ => None,
        }
    }
}
