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
    /// The server's name, unique in `mcp_servers`; roles' `mcp_env` and
    /// tool events refer to it.
    #[schemars(length(min = 1))]
    pub name: String,
    /// How to reach the server.
    #[serde(default)]
    pub transport: McpTransport,
    /// `true`: one instance whose tools every agent seat gets. `false`: no
    /// company-wide instance; the entry is a template started once for each
    /// agent seat that has credentials for it in `mcp_env.<name>` (its own or
    /// its unit's), with those values as environment variables (stdio) or
    /// headers (http).
    #[serde(default = "default_true")]
    pub shared: bool,
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
    /// Prefix for this server's tool names as agents see them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "tool names are always the server's own"))]
    pub tool_prefix: Option<String>,
    /// Endpoint URL (`http` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// HTTP headers sent with every request (`http` only); values may use `${VAR}`.
    #[serde(default)]
    pub headers: IndexMap<String, String>,
    /// Per-tool behaviour hints (`read_only`, `destructive`, `open_world`)
    /// overriding what the server advertises, by bare tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "tool behaviour hints are not used yet"))]
    pub tool_annotations: Option<IndexMap<String, serde_json::Map<String, serde_json::Value>>>,
    /// Time allowed for the server to start and list its tools, in seconds.
    #[serde(default = "default_startup_timeout")]
    #[schemars(range(min = 0.001))]
    pub startup_timeout_seconds: f64,
    /// Time allowed for one tool call, in seconds.
    #[serde(default = "default_request_timeout")]
    #[schemars(range(min = 0.001))]
    pub request_timeout_seconds: f64,
}

fn default_true() -> bool {
    true
}

fn default_startup_timeout() -> f64 {
    120.0
}

fn default_request_timeout() -> f64 {
    300.0
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
