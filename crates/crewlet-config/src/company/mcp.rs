//! MCP tool servers.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An MCP server: a child process speaking stdio, or a streamable HTTP
/// endpoint. A server that fails to start is skipped with an event; the seat
/// still runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// How to reach the server.
    #[serde(default)]
    pub transport: McpTransport,
    /// Who shares one running instance.
    #[serde(default)]
    pub scope: McpScope,
    /// Program to start (`stdio` only). It must be listed exactly in the
    /// bootstrap file's `security.mcp_commands` (unless
    /// `security.allow_any_mcp_command`); `env` may not set loader variables
    /// such as `PATH`, `LD_PRELOAD` or `NODE_OPTIONS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Arguments for `command`.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment for `command`; values may use `${VAR}` of the variables
    /// the bootstrap's `security.company_env` allows.
    #[serde(default)]
    pub env: IndexMap<String, String>,
    /// Endpoint URL (`http` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers sent with every request (`http` only); values may use `${VAR}`.
    #[serde(default)]
    pub headers: IndexMap<String, String>,
    /// Time allowed for the server to start and list its tools.
    #[serde(default = "default_startup_timeout")]
    #[schemars(range(min = 1))]
    pub startup_timeout_seconds: u64,
    /// Time allowed for one tool call.
    #[serde(default = "default_request_timeout")]
    #[schemars(range(min = 1))]
    pub request_timeout_seconds: u64,
}

fn default_startup_timeout() -> u64 {
    120
}

fn default_request_timeout() -> u64 {
    300
}

/// How an MCP server is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// A child process speaking JSON-RPC over stdin/stdout.
    #[default]
    Stdio,
    /// A streamable HTTP endpoint.
    Http,
}

/// Who shares one instance of an MCP server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpScope {
    /// One instance; every agent seat gets its tools.
    #[default]
    Shared,
    /// One instance per role that lists it in its `mcp_servers`, started with
    /// that role's `mcp_env` (the role's own credentials).
    PerRole,
}
