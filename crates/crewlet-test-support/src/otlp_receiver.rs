//! A tiny OTLP/HTTP trace receiver on 127.0.0.1 for tests: takes
//! `POST /v1/traces` as protobuf (`application/x-protobuf`, what the
//! exporters send by default) or JSON (`application/json`), and records each
//! span with its ids, name, attributes and the `service.name` of its resource.
//!
//! ```text
//! let receiver = OtlpReceiver::start()?;
//! // point the exporter at receiver.base_url() (or receiver.traces_url())
//! let spans = receiver.wait_for_spans(|s| s.len() >= 3, Duration::from_secs(10))?;
//! check_one_tree(&spans)?;
//! ```
//!
//! It runs on its own thread and runtime, so sync and async tests can use
//! it alike; it stops when dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde_json::Value;
use tokio::sync::oneshot;

/// One span as received.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// 32 lower-case hex digits.
    pub trace_id: String,
    /// 16 lower-case hex digits.
    pub span_id: String,
    /// `None` for a root span.
    pub parent_span_id: Option<String>,
    pub name: String,
    /// OTLP span kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i32,
    /// Span attributes as JSON values (strings, numbers, booleans, arrays).
    pub attributes: BTreeMap<String, Value>,
    /// `service.name` of the resource the span came with.
    pub service_name: Option<String>,
    /// Name of the instrumentation scope (the tracer).
    pub scope: String,
}

impl ReceivedSpan {
    /// A string attribute.
    pub fn attr_str(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).and_then(Value::as_str)
    }
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OtlpDecodeError {
    #[error("body is not an ExportTraceServiceRequest protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
    #[error("body is not OTLP/JSON: {0}")]
    Json(String),
}

/// `wait_for_spans` ran out of time; carries what had arrived.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {waited:?} waiting for spans; {} received: {names:?}", .spans.len())]
pub struct WaitTimeout {
    pub waited: Duration,
    pub names: Vec<String>,
    pub spans: Vec<ReceivedSpan>,
}

struct Inner {
    spans: Mutex<Vec<ReceivedSpan>>,
    arrived: Condvar,
    requests: AtomicUsize,
    rejected: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running receiver; stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    inner: Arc<Inner>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl OtlpReceiver {
    /// Binds 127.0.0.1 on a free port and serves on a thread of its own.
    pub fn start() -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            spans: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
            requests: AtomicUsize::new(0),
            rejected: AtomicUsize::new(0),
        });
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (tx, rx) = oneshot::channel::<()>();
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .with_state(inner.clone());
        let thread = std::thread::Builder::new()
            .name("otlp-receiver".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = rx.await;
                        })
                        .await;
                });
            })?;
        Ok(Self {
            addr,
            inner,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`: an `OTEL_EXPORTER_OTLP_ENDPOINT` value.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:<port>/v1/traces`: the full traces URL.
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.base_url())
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        lock(&self.inner.spans).clone()
    }

    /// Export requests received (accepted or not).
    pub fn requests(&self) -> usize {
        self.inner.requests.load(Ordering::SeqCst)
    }

    /// Requests answered 4xx (bad body, unsupported content type).
    pub fn rejected(&self) -> usize {
        self.inner.rejected.load(Ordering::SeqCst)
    }

    /// Forgets the spans received so far.
    pub fn clear(&self) {
        lock(&self.inner.spans).clear();
    }

    /// Blocks until `done(all spans so far)` holds, then returns the spans;
    /// or fails after `timeout` with what had arrived.
    pub fn wait_for_spans<F>(
        &self,
        done: F,
        timeout: Duration,
    ) -> Result<Vec<ReceivedSpan>, WaitTimeout>
    where
        F: Fn(&[ReceivedSpan]) -> bool,
    {
        let start = Instant::now();
        let mut spans = lock(&self.inner.spans);
        loop {
            if done(&spans) {
                return Ok(spans.clone());
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(WaitTimeout {
                    waited,
                    names: spans.iter().map(|s| s.name.clone()).collect(),
                    spans: spans.clone(),
                });
            }
            spans = self
                .inner
                .arrived
                .wait_timeout(spans, timeout - waited)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn traces(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    inner.requests.fetch_add(1, Ordering::SeqCst);
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let reject = |status: StatusCode, why: String| {
        inner.rejected.fetch_add(1, Ordering::SeqCst);
        (status, why).into_response()
    };
    if let Some(enc) = headers.get(header::CONTENT_ENCODING)
        && enc.as_bytes() != b"identity"
    {
        return reject(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content-encoding {enc:?} is not supported by the test receiver"),
        );
    }
    let json = if content_type.starts_with("application/x-protobuf") {
        false
    } else if content_type.starts_with("application/json") {
        true
    } else {
        return reject(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "content-type `{content_type}` is neither application/x-protobuf nor application/json"
            ),
        );
    };
    let decoded = if json {
        decode_json(&body)
    } else {
        decode_protobuf(&body)
    };
    let spans = match decoded {
        Ok(spans) => spans,
        Err(e) => return reject(StatusCode::BAD_REQUEST, e.to_string()),
    };
    lock(&inner.spans).extend(spans);
    inner.arrived.notify_all();
    if json {
        ([(header::CONTENT_TYPE, "application/json")], "{}").into_response()
    } else {
        (
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            ExportTraceServiceResponse::default().encode_to_vec(),
        )
            .into_response()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn any_to_json(v: &AnyValue) -> Value {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => Value::String(s.clone()),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(*b),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::DoubleValue(d)) => serde_json::Number::from_f64(*d)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(any_to_json).collect())
        }
        Some(any_value::Value::KvlistValue(kv)) => Value::Object(
            kv.values
                .iter()
                .map(|kv| {
                    (
                        kv.key.clone(),
                        kv.value.as_ref().map(any_to_json).unwrap_or(Value::Null),
                    )
                })
                .collect(),
        ),
        Some(any_value::Value::BytesValue(b)) => Value::String(hex(b)),
        None => Value::Null,
    }
}

fn attributes_to_json(attrs: &[KeyValue]) -> BTreeMap<String, Value> {
    attrs
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(any_to_json).unwrap_or(Value::Null),
            )
        })
        .collect()
}

/// The spans in a protobuf `ExportTraceServiceRequest`.
pub fn decode_protobuf(body: &[u8]) -> Result<Vec<ReceivedSpan>, OtlpDecodeError> {
    let req = ExportTraceServiceRequest::decode(body)?;
    let mut out = Vec::new();
    for rs in &req.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| attributes_to_json(&r.attributes))
            .unwrap_or_default();
        let service_name = resource
            .get("service.name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        for ss in &rs.scope_spans {
            let scope = ss
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            for span in &ss.spans {
                out.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: (!span.parent_span_id.is_empty()
                        && span.parent_span_id.iter().any(|b| *b != 0))
                    .then(|| hex(&span.parent_span_id)),
                    name: span.name.clone(),
                    kind: span.kind,
                    attributes: attributes_to_json(&span.attributes),
                    service_name: service_name.clone(),
                    scope: scope.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// An OTLP/JSON `AnyValue` object (`{"stringValue": ...}`) as plain JSON.
fn json_any(v: &Value) -> Value {
    let Some(obj) = v.as_object() else {
        return Value::Null;
    };
    if let Some(s) = obj.get("stringValue") {
        return s.clone();
    }
    if let Some(b) = obj.get("boolValue") {
        return b.clone();
    }
    if let Some(i) = obj.get("intValue") {
        // int64 travels as a string in OTLP/JSON; numbers are accepted too.
        return match i {
            Value::String(s) => s.parse::<i64>().map(Value::from).unwrap_or(i.clone()),
            other => other.clone(),
        };
    }
    if let Some(d) = obj.get("doubleValue") {
        return d.clone();
    }
    if let Some(a) = obj.get("arrayValue") {
        return Value::Array(
            a.get("values")
                .and_then(Value::as_array)
                .map(|vs| vs.iter().map(json_any).collect())
                .unwrap_or_default(),
        );
    }
    if let Some(kv) = obj.get("kvlistValue") {
        return Value::Object(json_attributes(kv.get("values")).into_iter().collect());
    }
    if let Some(b) = obj.get("bytesValue") {
        return b.clone();
    }
    Value::Null
}

fn json_attributes(attrs: Option<&Value>) -> BTreeMap<String, Value> {
    attrs
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|kv| {
                    let key = kv.get("key")?.as_str()?.to_owned();
                    Some((key, kv.get("value").map(json_any).unwrap_or(Value::Null)))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn json_str(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_owned()
}

/// The spans in an OTLP/JSON `ExportTraceServiceRequest` (ids as hex, as the
/// OTLP/JSON encoding writes them).
pub fn decode_json(body: &[u8]) -> Result<Vec<ReceivedSpan>, OtlpDecodeError> {
    let root: Value =
        serde_json::from_slice(body).map_err(|e| OtlpDecodeError::Json(e.to_string()))?;
    let resource_spans = root
        .get("resourceSpans")
        .and_then(Value::as_array)
        .ok_or_else(|| OtlpDecodeError::Json("no `resourceSpans` array".into()))?;
    let mut out = Vec::new();
    for rs in resource_spans {
        let resource = json_attributes(rs.get("resource").and_then(|r| r.get("attributes")));
        let service_name = resource
            .get("service.name")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let scope_spans = rs
            .get("scopeSpans")
            .or_else(|| rs.get("instrumentationLibrarySpans"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for ss in &scope_spans {
            let scope = ss
                .get("scope")
                .map(|s| json_str(s, "name"))
                .unwrap_or_default();
            for span in ss
                .get("spans")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let trace_id = json_str(span, "traceId").to_ascii_lowercase();
                let span_id = json_str(span, "spanId").to_ascii_lowercase();
                if trace_id.len() != 32 || span_id.len() != 16 {
                    return Err(OtlpDecodeError::Json(format!(
                        "span `{}` has trace id `{trace_id}` / span id `{span_id}`, not 32 / 16 hex digits",
                        json_str(span, "name")
                    )));
                }
                let parent = json_str(span, "parentSpanId").to_ascii_lowercase();
                out.push(ReceivedSpan {
                    trace_id,
                    span_id,
                    parent_span_id: (!parent.is_empty() && parent.bytes().any(|b| b != b'0'))
                        .then_some(parent),
                    name: json_str(span, "name"),
                    kind: span
                        .get("kind")
                        .and_then(Value::as_i64)
                        .and_then(|k| i32::try_from(k).ok())
                        .unwrap_or(0),
                    attributes: json_attributes(span.get("attributes")),
                    service_name: service_name.clone(),
                    scope: scope.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// Checks that `spans` form one tree: one trace id, exactly one root, and
/// every other span's parent among them. Returns the root.
pub fn check_one_tree(spans: &[ReceivedSpan]) -> Result<&ReceivedSpan, String> {
    let traces: BTreeSet<&str> = spans.iter().map(|s| s.trace_id.as_str()).collect();
    if traces.len() != 1 {
        return Err(format!("{} traces, not one: {traces:?}", traces.len()));
    }
    let ids: BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let roots: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.parent_span_id.as_deref().is_none_or(|p| !ids.contains(p)))
        .collect();
    match roots.as_slice() {
        [root] => Ok(root),
        _ => Err(format!(
            "{} roots (spans whose parent is not among them), not one: {:?}",
            roots.len(),
            roots.iter().map(|s| &s.name).collect::<Vec<_>>()
        )),
    }
}
