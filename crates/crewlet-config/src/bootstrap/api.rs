//! `api`: the HTTP listener, its connection limits and its bearer tokens.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiAuth {
    /// Bearer tokens; writes and `/config` always need one.
    #[serde(default)]
    pub tokens: Vec<ApiToken>,
    /// The original engine's switch to turn the token check off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "Crewlet always checks tokens on writes and /config"))]
    pub disabled: Option<bool>,
    /// Who may read without a token. Unset: metadata reads (no prompts,
    /// responses or other content) on a loopback listener, none on any
    /// other. `true`: the same, but a listener that is not loopback refuses
    /// to start. `false`: every read needs a token. `anyone_on_the_network`:
    /// metadata reads for anyone who can reach the port, on any listener.
    /// `content`: content too, without a token; loopback listeners only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_anonymous_read: Option<AnonymousRead>,
    /// Origins allowed by CORS (e.g. `https://dash.example.com`); empty = same origin only.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
}

/// `api.auth.allow_anonymous_read`: `true`, `false`,
/// `anyone_on_the_network` or `content`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnonymousRead {
    /// `false`: every read needs a token.
    Refused,
    /// `true`: metadata reads without a token, on a loopback listener only.
    Loopback,
    /// `anyone_on_the_network`: metadata reads without a token on any
    /// listener; the operator accepts that anyone who reaches the port sees
    /// the seats, their states, event types and token figures.
    AnyoneOnTheNetwork,
    /// `content`: prompts, responses and every other content without a
    /// token, on a loopback listener only (never on a public bind).
    Content,
}

impl AnonymousRead {
    const NETWORK: &'static str = "anyone_on_the_network";
    const CONTENT: &'static str = "content";

    /// How the value is written in the bootstrap.
    pub fn as_yaml(self) -> &'static str {
        match self {
            AnonymousRead::Refused => "false",
            AnonymousRead::Loopback => "true",
            AnonymousRead::AnyoneOnTheNetwork => Self::NETWORK,
            AnonymousRead::Content => Self::CONTENT,
        }
    }
}

impl Serialize for AnonymousRead {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            AnonymousRead::Refused => s.serialize_bool(false),
            AnonymousRead::Loopback => s.serialize_bool(true),
            other => s.serialize_str(other.as_yaml()),
        }
    }
}

impl<'de> Deserialize<'de> for AnonymousRead {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = AnonymousRead;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "true, false, `{}` or `{}`",
                    AnonymousRead::NETWORK,
                    AnonymousRead::CONTENT
                )
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<AnonymousRead, E> {
                Ok(if v {
                    AnonymousRead::Loopback
                } else {
                    AnonymousRead::Refused
                })
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<AnonymousRead, E> {
                match v {
                    "true" => Ok(AnonymousRead::Loopback),
                    "false" => Ok(AnonymousRead::Refused),
                    AnonymousRead::NETWORK => Ok(AnonymousRead::AnyoneOnTheNetwork),
                    AnonymousRead::CONTENT => Ok(AnonymousRead::Content),
                    other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for AnonymousRead {
    fn schema_name() -> Cow<'static, str> {
        "AnonymousRead".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Who may read without a token.",
            "oneOf": [
                {"type": "boolean", "description": "true: metadata reads without a token on a loopback listener (a listener that is not loopback refuses to start); false: every read needs a token"},
                {"const": AnonymousRead::NETWORK, "type": "string", "description": "metadata reads without a token for anyone who can reach the port, on any listener"},
                {"const": AnonymousRead::CONTENT, "type": "string", "description": "content too (prompts, responses, memory, ...) without a token; loopback listeners only"}
            ]
        })
    }
}

/// What a caller without a token may read on one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnonymousAccess {
    /// Nothing: reads need a token.
    None,
    /// Metadata: content fields are left out.
    Metadata,
    /// Everything a `read:content` token reads.
    Content,
}

/// Whether `host` (an address or `localhost`, brackets allowed) is a
/// loopback address.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim().trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl ApiAuth {
    /// What anonymous callers may read on a listener at `host`, or why this
    /// bootstrap must not serve there (the message names the fix).
    pub fn anonymous_access(&self, host: &str) -> Result<AnonymousAccess, String> {
        let loopback = is_loopback_host(host);
        match self.allow_anonymous_read {
            None if loopback => Ok(AnonymousAccess::Metadata),
            None => Ok(AnonymousAccess::None),
            Some(AnonymousRead::Refused) => Ok(AnonymousAccess::None),
            Some(AnonymousRead::Loopback) if loopback => Ok(AnonymousAccess::Metadata),
            Some(AnonymousRead::Loopback) => Err(format!(
                "`true` on `{host}`, which is not a loopback address: anyone who can reach the port would read without a token. Bind to 127.0.0.1, or set `allow_anonymous_read: {}` to accept that anyone on the network reads metadata (never content), or `false` and give readers tokens",
                AnonymousRead::NETWORK
            )),
            Some(AnonymousRead::AnyoneOnTheNetwork) => Ok(AnonymousAccess::Metadata),
            Some(AnonymousRead::Content) if loopback => Ok(AnonymousAccess::Content),
            Some(AnonymousRead::Content) => Err(format!(
                "`content` on `{host}`, which is not a loopback address, would give prompts, responses and memory to anyone who can reach the port; content is only ever anonymous on loopback. Give readers a token with `read:content`, or use `{}` for metadata only",
                AnonymousRead::NETWORK
            )),
        }
    }
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
    /// What the token may do: `read` (metadata reads), `read:content`
    /// (reads with prompts, responses, memory and other content), `operate`
    /// (tasks and budgets), `admin` (the company configuration). Scopes
    /// nest: `admin` includes `operate`, which includes `read:content`,
    /// which includes `read`. Unset: every scope, with a warning at start
    /// (deprecated; list the scopes).
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

    /// Whether the token may do what `scope` covers (scopes nest: see
    /// [`Scope::includes`]).
    pub fn grants(&self, scope: Scope) -> bool {
        match &self.scopes {
            None => true,
            Some(list) => list.iter().any(|held| held.includes(scope)),
        }
    }
}
