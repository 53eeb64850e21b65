//! A fake model server on 127.0.0.1 for tests: speaks OpenAI chat
//! completions (`/v1/chat/completions`), Anthropic messages
//! (`/v1/messages`) and OpenAI embeddings (`/v1/embeddings`), whole or as
//! server-sent events; answers from a [`Script`]; records every request.
//!
//! ```text
//! let server = FakeLlmServer::start(Script::new()
//!     .on(When::tool_offered("submit_plan"), Reply::tool_call("submit_plan", json!({..})).usage(100, 20))
//!     .on(When::any(), Reply::text("done").usage(10, 5))).await?;
//! // OpenAI base_url: server.openai_base_url()  (ends in /v1)
//! // Anthropic base_url: server.anthropic_base_url()
//! ```
//!
//! A request no rule answers gets a 500 whose message says so, and is
//! recorded like every other.
//!
//! [`FakeLlmServer::cap_requests`] makes the server enforce a request rate
//! as a provider does: at most N requests in any window of W (a sliding
//! log); one over the cap is answered 429 with `Retry-After` (fractional
//! seconds) and `x-ratelimit-reset-requests` saying when the oldest request
//! leaves the window, and is counted ([`FakeLlmServer::rate_limited_count`]).

mod script;
mod wire;

use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use serde_json::Value;
use tokio::sync::oneshot;

pub use script::{Answer, FakeUsage, Reply, Script, SeenRequest, When};

/// The wire format of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wire {
    OpenAi,
    Anthropic,
    Embeddings,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub wire: Wire,
    pub path: String,
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
    /// The key from `Authorization: Bearer` or `x-api-key`.
    pub api_key: Option<String>,
    /// The JSON body (`Value::Null` when it was not JSON).
    pub body: Value,
    /// Index of the rule that answered, if one did.
    pub rule: Option<usize>,
    pub stream: bool,
}

struct Inner {
    script: Mutex<Script>,
    requests: Mutex<Vec<RecordedRequest>>,
    recording: AtomicBool,
    ids: AtomicU64,
    cap: Mutex<Option<RateCap>>,
    rate_limited: AtomicU64,
    accepted: AtomicU64,
}

/// At most `limit` requests in any `window`.
struct RateCap {
    limit: usize,
    window: Duration,
    starts: VecDeque<tokio::time::Instant>,
}

impl RateCap {
    /// Admits a request now, or says how long until one would be.
    fn admit(&mut self, now: tokio::time::Instant) -> Result<(), Duration> {
        while let Some(&first) = self.starts.front() {
            if now.duration_since(first) >= self.window {
                self.starts.pop_front();
            } else {
                break;
            }
        }
        if self.starts.len() < self.limit {
            self.starts.push_back(now);
            return Ok(());
        }
        let oldest = self.starts.front().copied().unwrap_or(now);
        Err((oldest + self.window).saturating_duration_since(now))
    }
}

/// A running fake server; stops when dropped.
pub struct FakeLlmServer {
    addr: SocketAddr,
    inner: Arc<Inner>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl FakeLlmServer {
    /// Binds 127.0.0.1 on a free port and serves `script` on the current
    /// tokio runtime.
    pub async fn start(script: Script) -> std::io::Result<Self> {
        let inner = Arc::new(Inner {
            script: Mutex::new(script),
            requests: Mutex::new(Vec::new()),
            recording: AtomicBool::new(true),
            ids: AtomicU64::new(1),
            cap: Mutex::new(None),
            rate_limited: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(openai))
            .route("/chat/completions", post(openai))
            .route("/v1/messages", post(anthropic))
            .route("/v1/embeddings", post(embeddings))
            .route("/embeddings", post(embeddings))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(Self {
            addr,
            inner,
            shutdown: Some(tx),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>/v1`: an OpenAI `base_url`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:<port>`: an Anthropic `base_url`.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.requests.lock().clone()
    }

    /// The API key of every request so far, in order.
    pub fn keys_used(&self) -> Vec<Option<String>> {
        self.inner
            .requests
            .lock()
            .iter()
            .map(|r| r.api_key.clone())
            .collect()
    }

    pub fn request_count(&self) -> usize {
        self.inner.requests.lock().len()
    }

    /// Enforces at most `limit` requests in any `window` from now on (see
    /// the module docs); `limit` 0 removes the cap.
    pub fn cap_requests(&self, limit: usize, window: Duration) {
        *self.inner.cap.lock() = (limit > 0).then(|| RateCap {
            limit,
            window,
            starts: VecDeque::new(),
        });
    }

    /// Requests answered 429 by the rate cap.
    pub fn rate_limited_count(&self) -> u64 {
        self.inner.rate_limited.load(Ordering::Relaxed)
    }

    /// Requests the rate cap let through (every request without a cap).
    pub fn accepted_count(&self) -> u64 {
        self.inner.accepted.load(Ordering::Relaxed)
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.inner.requests.lock().clear();
    }

    /// Turns recording on or off (off for long benchmarks).
    pub fn set_recording(&self, on: bool) {
        self.inner.recording.store(on, Ordering::Relaxed);
    }

    /// Replaces the script.
    pub fn set_script(&self, script: Script) {
        *self.inner.script.lock() = script;
    }

    /// Adds a rule at the end of the script.
    pub fn push_rule(&self, when: When, reply: Reply) {
        self.inner.script.lock().push(when, reply);
    }

    /// Adds a rule that is tried before all others.
    pub fn push_front_rule(&self, when: When, reply: Reply) {
        let mut script = self.inner.script.lock();
        let mut rules = Script::new().on(when, reply).rules;
        rules.append(&mut script.rules);
        script.rules = rules;
    }
}

impl Drop for FakeLlmServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl std::fmt::Debug for FakeLlmServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeLlmServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn header_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

fn api_key(headers: &BTreeMap<String, String>) -> Option<String> {
    if let Some(k) = headers.get("x-api-key") {
        return Some(k.clone());
    }
    headers
        .get("authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .map(str::to_owned)
}

async fn openai(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    serve(inner, Wire::OpenAi, "/v1/chat/completions", headers, body).await
}

async fn anthropic(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    serve(inner, Wire::Anthropic, "/v1/messages", headers, body).await
}

async fn embeddings(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    serve(inner, Wire::Embeddings, "/v1/embeddings", headers, body).await
}

async fn serve(
    inner: Arc<Inner>,
    wire: Wire,
    path: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let over_cap = inner
        .cap
        .lock()
        .as_mut()
        .and_then(|cap| cap.admit(tokio::time::Instant::now()).err());
    if let Some(reset) = over_cap {
        inner.rate_limited.fetch_add(1, Ordering::Relaxed);
        let secs = format!("{:.3}", reset.as_secs_f64());
        let mut resp = wire::error(
            wire,
            StatusCode::TOO_MANY_REQUESTS,
            Some(&secs),
            "fake llm: request rate limit reached",
        );
        if let Ok(v) = format!("{}ms", reset.as_millis()).parse() {
            resp.headers_mut().insert("x-ratelimit-reset-requests", v);
        }
        return resp;
    }
    inner.accepted.fetch_add(1, Ordering::Relaxed);
    let headers = header_map(&headers);
    let key = api_key(&headers);
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let stream = json.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let recording = inner.recording.load(Ordering::Relaxed);
    if json.is_null() {
        if recording {
            inner.requests.lock().push(RecordedRequest {
                wire,
                path: path.to_owned(),
                headers,
                api_key: key,
                body: Value::Null,
                rule: None,
                stream,
            });
        }
        return wire::error(wire, StatusCode::BAD_REQUEST, None, "body is not json");
    }
    let mut seen = wire::seen(wire, &json);
    seen.api_key = key.clone();
    let picked = inner.script.lock().answer(&seen);
    if recording {
        inner.requests.lock().push(RecordedRequest {
            wire,
            path: path.to_owned(),
            headers,
            api_key: key,
            body: json.clone(),
            rule: picked.as_ref().map(|(i, _)| *i),
            stream,
        });
    }
    if wire == Wire::Embeddings {
        if let Some((_, reply)) = &picked
            && let Answer::Status { .. } = reply.answer
        {
            return wire::respond(&inner.ids, wire, &seen, reply.clone()).await;
        }
        return wire::embeddings(&json);
    }
    match picked {
        Some((_, reply)) => wire::respond(&inner.ids, wire, &seen, reply).await,
        None => wire::error(
            wire,
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            "fake llm: no rule matched this request",
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn seen_openai(body: Value) -> SeenRequest {
        wire::seen(Wire::OpenAi, &body)
    }

    #[test]
    fn openai_requests_are_seen_uniformly() {
        let s = seen_openai(json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "you are x"},
                {"role": "user", "content": "do it"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "result 42"}
            ],
            "tools": [{"type": "function", "function": {"name": "t", "parameters": {}}}],
            "tool_choice": "required"
        }));
        assert_eq!(s.tools, vec!["t".to_owned()]);
        assert_eq!(s.system, "you are x");
        assert_eq!(s.last_message, "result 42");
        assert!(s.last_is_tool_result);
        assert_eq!(s.last_tool_result.as_deref(), Some("result 42"));
        assert_eq!(s.tool_choice, "required");
        assert!(
            When::tool_offered("t")
                .and_after_tool_result(true)
                .matches(&s)
        );
        assert!(!When::no_tools().matches(&s));
    }

    #[test]
    fn anthropic_requests_are_seen_uniformly() {
        let s = wire::seen(
            Wire::Anthropic,
            &json!({
                "model": "m",
                "system": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                "messages": [
                    {"role": "user", "content": "go"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok!"}]}
                ],
                "tools": [{"name": "x", "input_schema": {}}],
                "tool_choice": {"type": "any"}
            }),
        );
        assert_eq!(s.system, "a\n\nb");
        assert_eq!(s.tool_choice, "required");
        assert!(s.last_is_tool_result);
        assert_eq!(s.last_tool_result.as_deref(), Some("ok!"));
    }

    #[test]
    fn the_rate_cap_is_a_sliding_window() {
        let t0 = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        let mut cap = RateCap {
            limit: 2,
            window: ms(1000),
            starts: VecDeque::new(),
        };
        assert_eq!(cap.admit(t0), Ok(()));
        assert_eq!(cap.admit(t0 + ms(400)), Ok(()));
        assert_eq!(cap.admit(t0 + ms(900)), Err(ms(100)));
        assert_eq!(cap.admit(t0 + ms(1000)), Ok(()));
        assert_eq!(cap.admit(t0 + ms(1100)), Err(ms(300)));
        assert_eq!(cap.admit(t0 + ms(1400)), Ok(()));
    }

    #[test]
    fn rules_are_tried_in_order_and_used_up() {
        let mut script = Script::new()
            .on(When::any(), Reply::status(500).times(1))
            .on(When::any(), Reply::text("ok"));
        let seen = SeenRequest::default();
        assert_eq!(script.answer(&seen).map(|(i, _)| i), Some(0));
        assert_eq!(script.answer(&seen).map(|(i, _)| i), Some(1));
        assert_eq!(script.answer(&seen).map(|(i, _)| i), Some(1));
    }
}
