//! `api`: the HTTP listener, its connection limits and its bearer tokens.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::security::Scope;

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
