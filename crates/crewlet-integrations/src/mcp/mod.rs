//! A Model Context Protocol client.
//!
//! - [`McpClient`]: one connected server, over stdio (a child process,
//!   newline-delimited JSON-RPC) or streamable HTTP (JSON-RPC POSTed to one
//!   URL, answered as JSON or as an event stream, `Mcp-Session-Id` carried).
//!   Requests are multiplexed by id, each with its own timeout.
//! - [`McpHub`]: the servers of one company, shared ones and per-role ones
//!   (launched with the role's `mcp_env`), started concurrently; a server that
//!   fails is reported, never fatal to the others.
//!
//! Adapting MCP tools to the turn engine's `Tool` trait is the engine's job.

mod client;
mod hub;
mod protocol;
mod spec;
mod sse;
mod stdio;
mod streamable_http;

use std::time::Duration;

pub use client::McpClient;
pub use hub::{McpHub, McpHubPlan, McpScope, McpStartFailure, RoleMcpServers};
pub use protocol::{
    CallToolResult, ContentBlock, McpTool, PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS,
    ServerInfo, ToolAnnotations,
};
pub use spec::{
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_STARTUP_TIMEOUT, INHERITED_ENV, McpServerSpec, McpTransport,
};

/// The largest single JSON-RPC message accepted from a server.
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Why talking to an MCP server failed. Every message names the server.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The spec cannot work as written; nothing was started.
    #[error("mcp server `{server}` is misconfigured: {reason}")]
    Config { server: String, reason: String },
    /// The process could not be run, or exited before finishing `initialize`.
    #[error("mcp server `{server}` failed to start: {reason}{}", stderr_suffix(.stderr))]
    StartFailed {
        server: String,
        reason: String,
        /// The last lines the process wrote to stderr.
        stderr: String,
    },
    /// `initialize` was not answered within the startup timeout.
    #[error("mcp server `{server}` did not answer initialize within {after:?}{}", stderr_suffix(.stderr))]
    StartupTimeout {
        server: String,
        after: Duration,
        stderr: String,
    },
    /// A request was not answered within the request timeout (the server was
    /// sent `notifications/cancelled`; the connection stays usable).
    #[error("mcp server `{server}` did not answer {method} within {after:?}")]
    Timeout {
        server: String,
        method: String,
        after: Duration,
    },
    /// The connection ended (the process exited, the stream closed).
    #[error("mcp server `{server}` closed the connection during {method}: {reason}{}", stderr_suffix(.stderr))]
    Closed {
        server: String,
        method: String,
        reason: String,
        stderr: String,
    },
    /// The server answered with a JSON-RPC error.
    #[error("mcp server `{server}` answered {method} with error {code}: {message}")]
    Rpc {
        server: String,
        method: String,
        code: i64,
        message: String,
        /// The error's `data`, as sent.
        data: Option<Box<serde_json::Value>>,
    },
    /// The server's answer is not what the protocol says.
    #[error("mcp server `{server}` sent an invalid answer to {method}: {reason}")]
    Protocol {
        server: String,
        method: String,
        reason: String,
    },
    #[error(
        "mcp server `{server}` speaks protocol version {version}; crewlet supports {}",
        SUPPORTED_PROTOCOL_VERSIONS.join(", ")
    )]
    UnsupportedProtocol { server: String, version: String },
    /// An HTTP status other than success (401/403: check the credentials).
    #[error("mcp server `{server}` at {url} answered {method} with http {status}: {body}")]
    Http {
        server: String,
        url: String,
        method: String,
        status: u16,
        body: String,
    },
    #[error("mcp server `{server}` at {url} could not be reached for {method}: {reason}")]
    Unreachable {
        server: String,
        url: String,
        method: String,
        reason: String,
    },
    /// The HTTP server no longer knows our `Mcp-Session-Id` (404); the client
    /// starts a new session and retries once before returning this.
    #[error("mcp server `{server}` at {url} no longer knows this session")]
    SessionExpired { server: String, url: String },
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!("; its stderr ends with: {}", stderr.trim())
    }
}

impl McpError {
    /// The name of the server the error is about.
    pub fn server(&self) -> &str {
        match self {
            McpError::Config { server, .. }
            | McpError::StartFailed { server, .. }
            | McpError::StartupTimeout { server, .. }
            | McpError::Timeout { server, .. }
            | McpError::Closed { server, .. }
            | McpError::Rpc { server, .. }
            | McpError::Protocol { server, .. }
            | McpError::UnsupportedProtocol { server, .. }
            | McpError::Http { server, .. }
            | McpError::Unreachable { server, .. }
            | McpError::SessionExpired { server, .. } => server,
        }
    }

    /// A request or startup timeout.
    pub fn is_timeout(&self) -> bool {
        matches!(
            self,
            McpError::Timeout { .. } | McpError::StartupTimeout { .. }
        )
    }
}

/// What a server's notifications mean to the client, for either transport.
pub(crate) fn on_notification(
    server: &str,
    method: &str,
    params: &serde_json::Value,
    tools_changed: &std::sync::atomic::AtomicBool,
) {
    match method {
        "notifications/tools/list_changed" => {
            tools_changed.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        "notifications/message" => {
            let level = params
                .get("level")
                .and_then(|l| l.as_str())
                .unwrap_or("info");
            let data = params.get("data").cloned().unwrap_or_default();
            match level {
                "debug" => tracing::debug!(mcp_server = %server, %data, "mcp server log"),
                "info" | "notice" => tracing::info!(mcp_server = %server, %data, "mcp server log"),
                "warning" => tracing::warn!(mcp_server = %server, %data, "mcp server log"),
                _ => tracing::error!(mcp_server = %server, level, %data, "mcp server log"),
            }
        }
        _ => tracing::trace!(mcp_server = %server, method, "mcp notification ignored"),
    }
}
