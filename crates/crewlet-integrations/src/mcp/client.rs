use parking_lot::RwLock;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::protocol::{self, McpTool, PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS, ServerInfo};
use super::stdio::StdioTransport;
use super::streamable_http::HttpTransport;
use super::{CallToolResult, McpError, McpServerSpec, McpTransport};

/// At most this many `tools/list` pages are followed (a guard against a
/// server that hands out cursors forever).
const MAX_TOOL_PAGES: usize = 100;

enum Transport {
    Stdio(StdioTransport),
    Http(HttpTransport),
}

impl Transport {
    async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, McpError> {
        match self {
            Transport::Stdio(t) => t.request(method, params, timeout).await,
            Transport::Http(t) => t.request(method, params, timeout).await,
        }
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), McpError> {
        match self {
            Transport::Stdio(t) => t.notify(method, params).await,
            Transport::Http(t) => t.notify(method, params).await,
        }
    }

    fn stderr_tail(&self) -> String {
        match self {
            Transport::Stdio(t) => t.stderr_tail(),
            Transport::Http(_) => String::new(),
        }
    }

    async fn close(&self) {
        match self {
            Transport::Stdio(t) => t.close().await,
            Transport::Http(t) => t.close().await,
        }
    }
}

struct Inner {
    name: String,
    kind: McpTransport,
    transport: Transport,
    info: RwLock<ServerInfo>,
    startup_timeout: Duration,
    request_timeout: Duration,
    tools_changed: Arc<AtomicBool>,
}

/// A connected MCP server. Cheap to clone; clones share the connection.
/// The process (stdio) is killed when the last clone is dropped; call
/// [`McpClient::shutdown`] for a graceful exit.
#[derive(Clone)]
pub struct McpClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient")
            .field("name", &self.inner.name)
            .field("transport", &self.inner.kind)
            .finish_non_exhaustive()
    }
}

impl McpClient {
    /// Starts (stdio) or reaches (HTTP) the server and completes the
    /// `initialize` handshake within the spec's startup timeout.
    pub async fn connect(spec: &McpServerSpec) -> Result<McpClient, McpError> {
        spec.validate()?;
        let tools_changed = Arc::new(AtomicBool::new(false));
        let transport = match spec.transport {
            McpTransport::Stdio => {
                Transport::Stdio(StdioTransport::spawn(spec, tools_changed.clone())?)
            }
            McpTransport::Http => Transport::Http(HttpTransport::new(spec, tools_changed.clone())?),
        };
        let handshake = tokio::time::timeout(
            spec.startup_timeout,
            handshake(&transport, &spec.name, spec.startup_timeout),
        )
        .await;
        let info = match handshake {
            Ok(Ok(info)) => info,
            Ok(Err(e)) => {
                let e = match e {
                    // The process died before answering: a start failure, with its last words.
                    McpError::Closed {
                        server,
                        reason,
                        stderr,
                        ..
                    } => McpError::StartFailed {
                        server,
                        reason: format!("it exited during initialize: {reason}"),
                        stderr,
                    },
                    McpError::Timeout { server, .. } => McpError::StartupTimeout {
                        server,
                        after: spec.startup_timeout,
                        stderr: transport.stderr_tail(),
                    },
                    other => other,
                };
                transport.close().await;
                return Err(e);
            }
            Err(_) => {
                let stderr = transport.stderr_tail();
                transport.close().await;
                return Err(McpError::StartupTimeout {
                    server: spec.name.clone(),
                    after: spec.startup_timeout,
                    stderr,
                });
            }
        };
        tracing::info!(
            mcp_server = %spec.name,
            server_name = %info.name,
            server_version = %info.version,
            protocol = %info.protocol_version,
            "mcp server ready"
        );
        Ok(McpClient {
            inner: Arc::new(Inner {
                name: spec.name.clone(),
                kind: spec.transport,
                transport,
                info: RwLock::new(info),
                startup_timeout: spec.startup_timeout,
                request_timeout: spec.request_timeout,
                tools_changed,
            }),
        })
    }

    /// The name this server has in the company YAML.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    pub fn transport(&self) -> McpTransport {
        self.inner.kind
    }

    /// What the server said about itself in `initialize`.
    pub fn server_info(&self) -> ServerInfo {
        self.inner.info.read().clone()
    }

    /// True once after the server announced `notifications/tools/list_changed`:
    /// the caller should list the tools again.
    pub fn take_tools_changed(&self) -> bool {
        self.inner.tools_changed.swap(false, Ordering::SeqCst)
    }

    /// Any request, with the spec's request timeout. An HTTP session the
    /// server forgot is re-initialized and the request retried once.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, McpError> {
        let timeout = self.inner.request_timeout;
        match self
            .inner
            .transport
            .request(method, params.clone(), timeout)
            .await
        {
            Err(McpError::SessionExpired { .. }) => {
                if let Transport::Http(http) = &self.inner.transport {
                    http.reset_session();
                    tracing::info!(mcp_server = %self.inner.name, "mcp session expired; starting a new one");
                    let info = tokio::time::timeout(
                        self.inner.startup_timeout,
                        handshake(
                            &self.inner.transport,
                            &self.inner.name,
                            self.inner.startup_timeout,
                        ),
                    )
                    .await
                    .map_err(|_| McpError::StartupTimeout {
                        server: self.inner.name.clone(),
                        after: self.inner.startup_timeout,
                        stderr: String::new(),
                    })??;
                    *self.inner.info.write() = info;
                }
                self.inner.transport.request(method, params, timeout).await
            }
            other => other,
        }
    }

    /// `ping`: is the server alive and answering?
    pub async fn ping(&self) -> Result<(), McpError> {
        self.request("ping", Value::Null).await.map(|_| ())
    }

    /// Every tool the server offers, following `nextCursor` pages. Entries
    /// that are not valid tools are skipped with a warning.
    pub async fn list_tools(&self) -> Result<Vec<McpTool>, McpError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let mut page = self.request("tools/list", params).await?;
            let Some(Value::Array(entries)) = page.get_mut("tools").map(Value::take) else {
                return Err(McpError::Protocol {
                    server: self.inner.name.clone(),
                    method: "tools/list".into(),
                    reason: "the result has no `tools` array".into(),
                });
            };
            for entry in entries {
                match serde_json::from_value::<McpTool>(entry) {
                    Ok(tool) => tools.push(tool),
                    Err(e) => {
                        tracing::warn!(mcp_server = %self.inner.name, error = %e, "skipping an invalid tool from tools/list");
                    }
                }
            }
            let next = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
                .map(str::to_string);
            if next.is_none() || next == cursor {
                return Ok(tools);
            }
            cursor = next;
        }
        tracing::warn!(mcp_server = %self.inner.name, pages = MAX_TOOL_PAGES, "tools/list kept paging; stopped");
        Ok(tools)
    }

    /// Calls a tool. A tool-level failure is `Ok` with `is_error: true`;
    /// `Err` is the server's or the connection's failure (unknown tool,
    /// timeout, closed).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<CallToolResult, McpError> {
        let arguments = if arguments.is_null() {
            json!({})
        } else {
            arguments
        };
        let result = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await?;
        if !result.is_object() {
            return Err(McpError::Protocol {
                server: self.inner.name.clone(),
                method: "tools/call".into(),
                reason: "the result is not an object".into(),
            });
        }
        Ok(CallToolResult::from_value(result))
    }

    /// Ends the connection: stdio servers get their stdin closed and a grace
    /// period before being killed; HTTP sessions are deleted. Later requests
    /// fail with [`McpError::Closed`] (stdio).
    pub async fn shutdown(&self) {
        self.inner.transport.close().await;
    }

    /// The last lines the (stdio) server wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        self.inner.transport.stderr_tail()
    }
}

/// `initialize`, protocol version check, `notifications/initialized`.
async fn handshake(
    transport: &Transport,
    server: &str,
    timeout: Duration,
) -> Result<ServerInfo, McpError> {
    let result = transport
        .request(
            "initialize",
            protocol::initialize_params(PROTOCOL_VERSION),
            timeout,
        )
        .await?;
    let info = ServerInfo::from_initialize(&result).map_err(|reason| McpError::Protocol {
        server: server.to_string(),
        method: "initialize".into(),
        reason,
    })?;
    if !SUPPORTED_PROTOCOL_VERSIONS.contains(&info.protocol_version.as_str()) {
        return Err(McpError::UnsupportedProtocol {
            server: server.to_string(),
            version: info.protocol_version,
        });
    }
    if let Transport::Http(http) = transport {
        http.set_protocol_version(&info.protocol_version);
    }
    transport
        .notify("notifications/initialized", Value::Null)
        .await?;
    Ok(info)
}
