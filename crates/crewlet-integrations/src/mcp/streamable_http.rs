//! Streamable HTTP transport (MCP 2025-03-26 and later): every client message
//! is a POST to the server URL; a request is answered with `application/json`
//! or with a `text/event-stream` that ends with the response. The session id
//! the server returns on `initialize` rides along on every later request.

use parking_lot::RwLock;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::protocol::{self, Incoming};
use super::spec::redact_url;
use super::sse::SseParser;
use super::{MAX_MESSAGE_BYTES, McpError, McpServerSpec, on_notification};

const SESSION_HEADER: &str = "mcp-session-id";
const PROTOCOL_HEADER: &str = "mcp-protocol-version";
/// How long closing the session (DELETE) may take.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) struct HttpTransport {
    server: String,
    url: reqwest::Url,
    display_url: String,
    client: reqwest::Client,
    headers: HeaderMap,
    session: RwLock<Option<HeaderValue>>,
    protocol_version: RwLock<Option<HeaderValue>>,
    next_id: AtomicU64,
    tools_changed: Arc<AtomicBool>,
}

fn read<T: Clone>(lock: &RwLock<T>) -> T {
    lock.read().clone()
}

fn write<T>(lock: &RwLock<T>, value: T) {
    *lock.write() = value;
}

impl HttpTransport {
    pub(crate) fn new(
        spec: &McpServerSpec,
        tools_changed: Arc<AtomicBool>,
    ) -> Result<Self, McpError> {
        let config = |reason: String| McpError::Config {
            server: spec.name.clone(),
            reason,
        };
        let raw_url = spec.url.clone().unwrap_or_default();
        let url = reqwest::Url::parse(&raw_url)
            .map_err(|e| config(format!("`url` is not a valid URL: {e}")))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &spec.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| config(format!("header name `{name}` is not valid")))?;
            let mut value = HeaderValue::from_str(value)
                .map_err(|_| config(format!("the value of header `{name}` is not valid")))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let client = crewlet_http::client_builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| config(format!("the HTTP client could not be built: {e}")))?;
        Ok(HttpTransport {
            server: spec.name.clone(),
            display_url: redact_url(&raw_url),
            url,
            client,
            headers,
            session: RwLock::new(None),
            protocol_version: RwLock::new(None),
            next_id: AtomicU64::new(1),
            tools_changed,
        })
    }

    /// Forgets the session so the next `initialize` starts a new one.
    pub(crate) fn reset_session(&self) {
        write(&self.session, None);
        write(&self.protocol_version, None);
    }

    pub(crate) fn set_protocol_version(&self, version: &str) {
        write(&self.protocol_version, HeaderValue::from_str(version).ok());
    }

    fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut req = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .body(body.to_string());
        if let Some(session) = read(&self.session) {
            req = req.header(SESSION_HEADER, session);
        }
        if let Some(version) = read(&self.protocol_version) {
            req = req.header(PROTOCOL_HEADER, version);
        }
        req
    }

    fn unreachable(&self, method: &str, e: &reqwest::Error) -> McpError {
        // reqwest's Display can include the URL; ours is redacted, so use the source chain.
        let mut reason = String::new();
        let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(s) = source {
            if !reason.is_empty() {
                reason.push_str(": ");
            }
            reason.push_str(&s.to_string());
            source = s.source();
        }
        if reason.is_empty() {
            reason = if e.is_timeout() {
                "timed out".into()
            } else if e.is_connect() {
                "connection failed".into()
            } else {
                "request failed".into()
            };
        }
        McpError::Unreachable {
            server: self.server.clone(),
            url: self.display_url.clone(),
            method: method.to_string(),
            reason,
        }
    }

    fn protocol_error(&self, method: &str, reason: impl Into<String>) -> McpError {
        McpError::Protocol {
            server: self.server.clone(),
            method: method.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let message = protocol::request(id, method, params);
        match tokio::time::timeout(timeout, self.exchange(id, method, &message)).await {
            Ok(result) => result,
            Err(_) => {
                if method != "initialize" {
                    let cancel = protocol::notification(
                        "notifications/cancelled",
                        serde_json::json!({"requestId": id, "reason": format!("no answer within {timeout:?}")}),
                    );
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.post(&cancel).send()).await;
                }
                Err(McpError::Timeout {
                    server: self.server.clone(),
                    method: method.to_string(),
                    after: timeout,
                })
            }
        }
    }

    async fn exchange(&self, id: u64, method: &str, message: &Value) -> Result<Value, McpError> {
        let response = self
            .post(message)
            .send()
            .await
            .map_err(|e| self.unreachable(method, &e))?;
        let status = response.status();
        if method == "initialize"
            && let Some(session) = response.headers().get(SESSION_HEADER)
        {
            let mut session = session.clone();
            session.set_sensitive(true);
            write(&self.session, Some(session));
        }
        if status == reqwest::StatusCode::NOT_FOUND && read(&self.session).is_some() {
            return Err(McpError::SessionExpired {
                server: self.server.clone(),
                url: self.display_url.clone(),
            });
        }
        if !status.is_success() {
            let body = read_prefix(response, 2048).await;
            return Err(McpError::Http {
                server: self.server.clone(),
                url: self.display_url.clone(),
                method: method.to_string(),
                status: status.as_u16(),
                body: String::from_utf8_lossy(&body).chars().take(300).collect(),
            });
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if content_type.starts_with("text/event-stream") {
            return self.read_stream(id, method, response).await;
        }
        let body = read_body(response, MAX_MESSAGE_BYTES)
            .await
            .map_err(|e| self.protocol_error(method, e))?;
        let value: Value = serde_json::from_slice(&body)
            .map_err(|e| self.protocol_error(method, format!("the body is not JSON: {e}")))?;
        let messages = match value {
            Value::Array(items) => items,
            other => vec![other],
        };
        for message in messages {
            if let Some(result) = self.handle(id, method, message).await {
                return result;
            }
        }
        Err(self.protocol_error(method, "the answer holds no response to the request"))
    }

    async fn read_stream(
        &self,
        id: u64,
        method: &str,
        mut response: reqwest::Response,
    ) -> Result<Value, McpError> {
        let mut parser = SseParser::default();
        loop {
            let chunk = response
                .chunk()
                .await
                .map_err(|e| self.unreachable(method, &e))?;
            let Some(chunk) = chunk else {
                return Err(McpError::Closed {
                    server: self.server.clone(),
                    method: method.to_string(),
                    reason: "the event stream ended before the response".into(),
                    stderr: String::new(),
                });
            };
            for event in parser.push(&chunk) {
                if event.data.trim().is_empty() {
                    continue;
                }
                let Ok(value) = serde_json::from_str::<Value>(&event.data) else {
                    tracing::warn!(mcp_server = %self.server, "mcp event stream sent non-JSON data; ignored");
                    continue;
                };
                let messages = match value {
                    Value::Array(items) => items,
                    other => vec![other],
                };
                for message in messages {
                    if let Some(result) = self.handle(id, method, message).await {
                        return result;
                    }
                }
            }
            if parser.buffered() > MAX_MESSAGE_BYTES {
                return Err(self.protocol_error(
                    method,
                    format!("an event is longer than {MAX_MESSAGE_BYTES} bytes"),
                ));
            }
        }
    }

    /// `Some` when `message` is the response to request `id`.
    async fn handle(
        &self,
        id: u64,
        method: &str,
        message: Value,
    ) -> Option<Result<Value, McpError>> {
        match protocol::classify(message) {
            Incoming::Response {
                id: response_id,
                outcome,
            } => {
                if protocol::response_id(&response_id) != Some(id) {
                    tracing::debug!(mcp_server = %self.server, %response_id, "mcp response for another request; ignored");
                    return None;
                }
                Some(outcome.map_err(|e| McpError::Rpc {
                    server: self.server.clone(),
                    method: method.to_string(),
                    code: e.code,
                    message: e.message,
                    data: e.data.map(Box::new),
                }))
            }
            Incoming::Request {
                id: request_id,
                method: server_method,
            } => {
                let answer = protocol::answer_server_request(request_id, &server_method);
                if let Err(e) = self.post(&answer).send().await {
                    tracing::warn!(mcp_server = %self.server, error = %e, "could not answer the server's {server_method} request");
                }
                None
            }
            Incoming::Notification { method, params } => {
                on_notification(&self.server, &method, &params, &self.tools_changed);
                None
            }
            Incoming::Invalid(reason) => {
                tracing::warn!(mcp_server = %self.server, %reason, "mcp server sent an invalid message; ignored");
                None
            }
        }
    }

    pub(crate) async fn notify(&self, method: &str, params: Value) -> Result<(), McpError> {
        let message = protocol::notification(method, params);
        let response = tokio::time::timeout(CLOSE_TIMEOUT * 6, self.post(&message).send())
            .await
            .map_err(|_| McpError::Timeout {
                server: self.server.clone(),
                method: method.to_string(),
                after: CLOSE_TIMEOUT * 6,
            })?
            .map_err(|e| self.unreachable(method, &e))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(McpError::Http {
                server: self.server.clone(),
                url: self.display_url.clone(),
                method: method.to_string(),
                status: status.as_u16(),
                body: String::new(),
            })
        }
    }

    /// Ends the session (DELETE); a server that does not support that is fine.
    pub(crate) async fn close(&self) {
        let Some(session) = read(&self.session) else {
            return;
        };
        let request = self
            .client
            .delete(self.url.clone())
            .headers(self.headers.clone())
            .header(SESSION_HEADER, session)
            .send();
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, request).await;
        self.reset_session();
    }
}

/// The body, refusing more than `max` bytes.
async fn read_body(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > max {
            return Err(format!("the body is longer than {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// At most the first `max` bytes of the body, for error messages.
async fn read_prefix(mut response: reqwest::Response, max: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() >= max {
            body.truncate(max);
            break;
        }
    }
    body
}
