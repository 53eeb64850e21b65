//! The model proxy: how a coding agent in a box reaches its model without
//! the model key. One loopback listener per engine, started when the first
//! run needs it. Each run gets a token of its own in place of the key
//! (`ANTHROPIC_API_KEY` / `OPENAI_API_KEY`) and the proxy's address as its
//! base URL; the proxy checks the token and the seat's budget, forwards the
//! call to the seat's provider with the real key, streams the answer back
//! as it comes, and charges the tokens the answer reports to the seat's
//! budgets, as a turn's own calls are charged.
//!
//! Only the vendor's model API paths are forwarded, and of the box's
//! headers only the protocol ones (content type, API version and beta
//! flags, SDK identification): the box's credentials (`authorization`,
//! `x-api-key`, cookies) never leave the proxy.

mod charge;
mod tokens;
mod usage;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use crewlet_config::later::ModelProxy as ProxySettings;
use crewlet_queue::EventQueue;
use crewlet_store::TokenLedger;
use futures::stream::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};
use uuid::Uuid;

pub(crate) use tokens::Grant;
use tokens::Tokens;

/// The largest request body a box may send (a long conversation with its
/// tools and files).
const MAX_REQUEST: usize = 64 << 20;

/// A model API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vendor {
    Anthropic,
    OpenAi,
}

impl Vendor {
    /// The variables a box's agent reads: its key, its base URL.
    pub(crate) fn vars(self) -> (&'static str, &'static str) {
        match self {
            Self::Anthropic => ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
            Self::OpenAi => ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Anthropic => "Anthropic",
            Self::OpenAi => "OpenAI",
        }
    }
}

/// Where a seat's model calls go, with the real key.
pub(crate) struct Upstream {
    pub vendor: Vendor,
    /// The provider's `base_url`, or the vendor's.
    pub base: String,
    pub key: Option<String>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("vendor", &self.vendor)
            .field("base", &self.base)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Upstream {
    /// The provider's URL of the proxy path `path` (`/v1/...`).
    fn url(&self, path: &str, query: Option<&str>) -> String {
        let base = self.base.trim_end_matches('/');
        // Anthropic's base URL stops before `/v1`; OpenAI's includes it.
        let rest = match self.vendor {
            Vendor::Anthropic => path,
            Vendor::OpenAi => path.strip_prefix("/v1").unwrap_or(path),
        };
        match query {
            Some(q) => format!("{base}{rest}?{q}"),
            None => format!("{base}{rest}"),
        }
    }
}

/// What the listener shares with its requests.
struct Shared {
    tokens: Tokens,
    client: reqwest::Client,
    ledger: Arc<dyn TokenLedger>,
    queue: Arc<dyn EventQueue>,
}

/// The engine's model proxy; stops listening when dropped.
pub(crate) struct ModelProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
}

impl ModelProxy {
    /// Listens where `settings` say (a loopback address).
    pub(crate) async fn start(
        settings: &ProxySettings,
        ledger: Arc<dyn TokenLedger>,
        queue: Arc<dyn EventQueue>,
    ) -> Result<Self, String> {
        let ip: IpAddr = settings
            .bind
            .parse()
            .ok()
            .filter(|ip: &IpAddr| ip.is_loopback())
            .ok_or_else(|| {
                format!(
                    "providers.sandbox.model_proxy.bind `{}` is not a loopback address",
                    settings.bind
                )
            })?;
        // The providers' own client: the same roots, proxies and pool.
        let client = crewlet_llm::http_client().map_err(|e| e.to_string())?;
        let listener = tokio::net::TcpListener::bind((ip, settings.port))
            .await
            .map_err(|e| {
                format!(
                    "the model proxy cannot listen on {ip} port {}: {e}",
                    settings.port
                )
            })?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("the model proxy's address: {e}"))?;
        let shared = Arc::new(Shared {
            tokens: Tokens::default(),
            client,
            ledger,
            queue,
        });
        let app = Router::new()
            .fallback(handle)
            .with_state(shared.clone())
            .layer(DefaultBodyLimit::max(MAX_REQUEST));
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                warn!(error = %e, "the model proxy stopped");
            }
        });
        info!(%addr, "model proxy for the sandbox listening");
        Ok(Self {
            addr,
            shared,
            stop: Some(stop),
        })
    }

    /// The proxy's base URL for `vendor`'s clients (OpenAI's ends in `/v1`).
    pub(crate) fn base_url(&self, vendor: Vendor) -> String {
        match vendor {
            Vendor::Anthropic => format!("http://{}", self.addr),
            Vendor::OpenAi => format!("http://{}/v1", self.addr),
        }
    }

    /// A token for a run; valid until [`revoke`](Self::revoke).
    pub(crate) fn issue(&self, grant: Grant) -> String {
        self.shared.tokens.issue(grant)
    }

    /// Ends `run`'s token; its grant (with what it spent), if it had one.
    pub(crate) fn revoke(&self, run: Uuid) -> Option<Arc<Grant>> {
        self.shared.tokens.revoke(run)
    }

    /// The variables a run's agent gets: the proxy as its base URL, the
    /// token as its key, and the proxy's address kept off any HTTP proxy
    /// the box inherits from the host.
    pub(crate) fn run_env(&self, vendor: Vendor, token: String) -> BTreeMap<String, String> {
        let (key_var, url_var) = vendor.vars();
        let mut env = BTreeMap::from([
            (key_var.to_owned(), token),
            (url_var.to_owned(), self.base_url(vendor)),
        ]);
        let host = self.addr.ip().to_string();
        for var in ["NO_PROXY", "no_proxy"] {
            let inherited = std::env::var(var).unwrap_or_default();
            let value = if inherited.trim().is_empty() {
                host.clone()
            } else {
                format!("{inherited},{host}")
            };
            env.insert(var.to_owned(), value);
        }
        env
    }
}

impl Drop for ModelProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// An error answer both vendors' clients read: a status, a type and code
/// their SDKs show, and the reason.
fn refuse(status: StatusCode, kind: &str, code: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "code": code, "message": message}});
    let mut resp = (status, axum::Json(body)).into_response();
    // The vendors' SDKs retry 429s and 5xxs unless told not to: a spent
    // budget does not come back by retrying.
    if status == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut()
            .insert("x-should-retry", HeaderValue::from_static("false"));
    }
    resp
}

/// The token the box sent, as either vendor's clients send a key.
fn presented(headers: &HeaderMap) -> Option<&str> {
    if let Some(k) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(k);
    }
    let auth = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = auth.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// Whether the proxy forwards `method path` for `vendor`, and whether the
/// call is a model call to charge. `Err` is the refusal.
fn route(vendor: Vendor, method: &Method, path: &str) -> Result<bool, Box<Response>> {
    let model_id = path
        .strip_prefix("/v1/models/")
        .is_some_and(|id| !id.is_empty() && !id.contains(['/', '%']) && id != "..");
    let (post, charged) = match (vendor, path) {
        (Vendor::Anthropic, "/v1/messages") => (true, true),
        (Vendor::Anthropic, "/v1/messages/count_tokens") => (true, false),
        (
            Vendor::OpenAi,
            "/v1/chat/completions" | "/v1/completions" | "/v1/responses" | "/v1/embeddings",
        ) => (true, true),
        (_, "/v1/models") => (false, false),
        _ if model_id => (false, false),
        _ => {
            return Err(Box::new(refuse(
                StatusCode::NOT_FOUND,
                "not_found_error",
                "not_a_model_path",
                &format!(
                    "`{path}` is not one of the {} model API paths this proxy forwards",
                    vendor.name()
                ),
            )));
        }
    };
    let want = if post { Method::POST } else { Method::GET };
    if method != want {
        return Err(Box::new(refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method_not_allowed",
            &format!("`{path}` takes {want}, not {method}"),
        )));
    }
    Ok(charged)
}

/// The box's headers that go on: protocol ones only, never credentials.
fn forwarded(from: &HeaderMap, vendor: Vendor) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in from {
        let n = name.as_str();
        let keep = matches!(
            n,
            "content-type" | "accept" | "user-agent" | "anthropic-version" | "anthropic-beta"
        ) || n == "openai-beta"
            || n.starts_with("x-stainless-");
        if keep {
            out.append(name.clone(), value.clone());
        }
    }
    if vendor == Vendor::Anthropic && !out.contains_key("anthropic-version") {
        out.insert(
            "anthropic-version",
            HeaderValue::from_static(crewlet_llm::ANTHROPIC_VERSION),
        );
    }
    out
}

/// The provider's headers that go back: all but the connection's own.
fn returned(from: &reqwest::header::HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in from {
        let hop = matches!(
            name.as_str(),
            "connection"
                | "keep-alive"
                | "transfer-encoding"
                | "te"
                | "trailer"
                | "upgrade"
                | "content-length"
                | "proxy-authenticate"
                | "set-cookie"
        );
        if !hop {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// A streamed chat completion asks for its usage chunk (OpenAI sends
/// none otherwise, and the call could not be charged); the chunk has no
/// choices, which clients that ask for it already skip.
fn with_stream_usage(body: Bytes) -> Bytes {
    let Ok(mut v) = serde_json::from_slice::<Value>(&body) else {
        return body;
    };
    if v["stream"] != Value::Bool(true) || v["stream_options"]["include_usage"] == Value::Bool(true)
    {
        return body;
    }
    let Some(obj) = v.as_object_mut() else {
        return body;
    };
    let options = obj.entry("stream_options").or_insert_with(|| json!({}));
    if let Some(o) = options.as_object_mut() {
        o.insert("include_usage".into(), Value::Bool(true));
    } else {
        return body;
    }
    serde_json::to_vec(&v).map_or(body, Bytes::from)
}

async fn handle(
    State(s): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(token) = presented(&headers) else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "no_token",
            "no token: send the run's token (the box's ANTHROPIC_API_KEY or OPENAI_API_KEY) as `x-api-key` or `Authorization: Bearer`",
        );
    };
    let Some(grant) = s.tokens.verify(token) else {
        warn!(
            path = uri.path(),
            "model proxy: a call with an unknown or expired token was refused"
        );
        return refuse(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid_token",
            "this token is not valid: it is unknown, or the run it was issued to has ended",
        );
    };
    let vendor = grant.upstream.vendor;
    let path = uri.path();
    let charged = match route(vendor, &method, path) {
        Ok(c) => c,
        Err(refusal) => return *refusal,
    };
    let hold = if charged {
        match charge::reserve(&s, &grant).await {
            Ok(id) => Some(id),
            Err(refusal) => return *refusal,
        }
    } else {
        None
    };
    let body = if charged && vendor == Vendor::OpenAi && path == "/v1/chat/completions" {
        with_stream_usage(body)
    } else {
        body
    };
    let mut request = s
        .client
        .request(method, grant.upstream.url(path, uri.query()))
        .headers(forwarded(&headers, vendor))
        .body(body);
    if let Some(key) = &grant.upstream.key {
        request = match vendor {
            Vendor::Anthropic => match HeaderValue::from_str(key) {
                Ok(mut v) => {
                    // Kept out of any debug print of the request.
                    v.set_sensitive(true);
                    request.header("x-api-key", v)
                }
                Err(_) => {
                    if let Some(id) = hold {
                        let _ = s.ledger.release(id).await;
                    }
                    return refuse(
                        StatusCode::BAD_GATEWAY,
                        "api_error",
                        "invalid_provider_key",
                        "the seat's model key is not a valid header value; the engine's operator must fix it",
                    );
                }
            },
            Vendor::OpenAi => request.bearer_auth(key),
        };
    }
    let answer = match request.send().await {
        Ok(a) => a,
        Err(e) => {
            if let Some(id) = hold {
                let _ = s.ledger.release(id).await;
            }
            let why = crewlet_telemetry::redact(&e.to_string()).into_owned();
            warn!(agent = %grant.seat, run = %grant.run, error = %why, "model proxy: the provider cannot be reached");
            return refuse(
                StatusCode::BAD_GATEWAY,
                "api_error",
                "upstream_unreachable",
                &format!("the model provider cannot be reached: {why}"),
            );
        }
    };
    let status = answer.status();
    debug!(agent = %grant.seat, run = %grant.run, path, status = status.as_u16(), "model proxy: forwarded");
    let headers = returned(answer.headers());
    let stream = answer.bytes_stream().boxed();
    let body = match hold {
        Some(hold) => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            Body::from_stream(charge::Metered::new(
                stream,
                content_type,
                s.clone(),
                grant,
                hold,
                status.is_success(),
            ))
        }
        None => Body::from_stream(stream),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    *resp.headers_mut() = headers;
    resp
}

#[cfg(test)]
mod tests;
