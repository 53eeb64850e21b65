//! A fake Slack Web API on 127.0.0.1 for tests: the methods Crewlet calls
//! (`assistant.threads.setStatus`, `chat.postMessage`, `auth.test`,
//! `apps.manifest.create/update/validate`, `oauth.v2.access`,
//! `tooling.tokens.rotate`), each recorded. Like Slack, it answers 200
//! with `{"ok": false, "error": ...}` for a refused call (an unknown token
//! is `invalid_auth`), and a method can be switched to answer 429.
//!
//! ```text
//! let slack = FakeSlack::start().await;
//! slack.add_bot("xoxb-eng", "UENG");
//! // point `integrations.slack.api_url` at slack.api_url(), then:
//! slack.wait_for("a status", Duration::from_secs(30), |s| !s.statuses().is_empty()).await;
//! ```
//!
//! An install is simulated with [`FakeSlack::authorize`]: the code the
//! operator's "Allow" click would have produced for an app's client id.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One `assistant.threads.setStatus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCall {
    pub token: String,
    pub channel: String,
    pub thread_ts: String,
    /// Empty: the status was cleared.
    pub status: String,
}

/// One `chat.postMessage`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub token: String,
    pub channel: String,
    pub text: String,
    pub thread_ts: Option<String>,
    pub ts: String,
}

/// An app made by `apps.manifest.create`.
#[derive(Debug, Clone, PartialEq)]
pub struct App {
    pub app_id: String,
    pub client_id: String,
    pub client_secret: String,
    pub signing_secret: String,
    pub manifest: Value,
    /// `apps.manifest.update` calls it received.
    pub updates: usize,
}

#[derive(Default)]
struct Data {
    seq: u64,
    /// Bot token -> (user id, app id).
    bots: BTreeMap<String, (String, String)>,
    config_tokens: BTreeSet<String>,
    refresh_tokens: BTreeSet<String>,
    apps: Vec<App>,
    /// Install code -> client id.
    codes: BTreeMap<String, String>,
    statuses: Vec<StatusCall>,
    messages: Vec<Message>,
    /// Every call, by method name, in order.
    calls: Vec<String>,
    rate_limited: BTreeSet<String>,
    failing: BTreeMap<String, String>,
}

impl Data {
    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

/// A running fake Slack Web API; stops when dropped.
pub struct FakeSlack {
    data: Arc<Mutex<Data>>,
    addr: SocketAddr,
    server: JoinHandle<()>,
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeSlack {
    /// Listens on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start() -> FakeSlack {
        let listener = match TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await {
            Ok(l) => l,
            Err(e) => panic!("fake Slack: cannot listen on 127.0.0.1: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => panic!("fake Slack: no local address: {e}"),
        };
        let data = Arc::new(Mutex::new(Data::default()));
        let app = Router::new()
            .route("/api/{method}", post(call))
            .with_state(data.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeSlack { data, addr, server }
    }

    /// The Web API base URL (`integrations.slack.api_url`).
    pub fn api_url(&self) -> String {
        format!("http://{}/api", self.addr)
    }

    /// A bot token that works, as bot user `user_id`.
    pub fn add_bot(&self, token: &str, user_id: &str) {
        self.data
            .lock()
            .bots
            .insert(token.into(), (user_id.into(), String::new()));
    }

    /// An app configuration token that works.
    pub fn add_config_token(&self, token: &str) {
        self.data.lock().config_tokens.insert(token.into());
    }

    /// A configuration refresh token `tooling.tokens.rotate` accepts (once).
    pub fn add_refresh_token(&self, token: &str) {
        self.data.lock().refresh_tokens.insert(token.into());
    }

    /// Stops accepting `token` (as if it expired).
    pub fn expire_config_token(&self, token: &str) {
        self.data.lock().config_tokens.remove(token);
    }

    /// `method` answers 429 (`Retry-After: 1`) while `on`.
    pub fn rate_limit(&self, method: &str, on: bool) {
        let mut d = self.data.lock();
        if on {
            d.rate_limited.insert(method.into());
        } else {
            d.rate_limited.remove(method);
        }
    }

    /// `method` answers `ok: false` with `error` (None: works again).
    pub fn fail(&self, method: &str, error: Option<&str>) {
        let mut d = self.data.lock();
        match error {
            Some(e) => d.failing.insert(method.into(), e.into()),
            None => d.failing.remove(method),
        };
    }

    /// The code an operator's "Allow" on the install page of the app with
    /// `client_id` produces; `None` for an unknown client.
    pub fn authorize(&self, client_id: &str) -> Option<String> {
        let mut d = self.data.lock();
        if !d.apps.iter().any(|a| a.client_id == client_id) {
            return None;
        }
        let code = format!("code-{}", d.next());
        d.codes.insert(code.clone(), client_id.into());
        Some(code)
    }

    pub fn statuses(&self) -> Vec<StatusCall> {
        self.data.lock().statuses.clone()
    }

    pub fn messages(&self) -> Vec<Message> {
        self.data.lock().messages.clone()
    }

    pub fn apps(&self) -> Vec<App> {
        self.data.lock().apps.clone()
    }

    /// How many calls `method` received (refused ones included).
    pub fn calls(&self, method: &str) -> usize {
        self.data
            .lock()
            .calls
            .iter()
            .filter(|m| *m == method)
            .count()
    }

    /// Polls `done` until it holds.
    ///
    /// # Panics
    /// When it does not hold within `within`.
    pub async fn wait_for(&self, what: &str, within: Duration, done: impl Fn(&FakeSlack) -> bool) {
        let deadline = Instant::now() + within;
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "fake Slack: timed out waiting for {what}; calls: {:?}",
                self.data.lock().calls
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn ok(body: Value) -> Response {
    let mut body = body;
    if let Some(map) = body.as_object_mut() {
        map.insert("ok".into(), Value::Bool(true));
    }
    axum::Json(body).into_response()
}

fn refuse(error: &str) -> Response {
    axum::Json(json!({"ok": false, "error": error})).into_response()
}

/// Form fields, or a JSON object's string fields.
fn fields(headers: &HeaderMap, body: &[u8]) -> BTreeMap<String, String> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .map(|m| {
                m.into_iter()
                    .map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
                    .collect()
            })
            .unwrap_or_default();
    }
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// `application/x-www-form-urlencoded` decoding.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn call(
    State(data): State<Arc<Mutex<Data>>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = fields(&headers, &body);
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned)
        .or_else(|| form.get("token").cloned())
        .unwrap_or_default();
    let field = |k: &str| form.get(k).cloned().unwrap_or_default();
    let mut d = data.lock();
    d.calls.push(method.clone());
    if d.rate_limited.contains(&method) {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            axum::Json(json!({"ok": false, "error": "ratelimited"})),
        )
            .into_response();
    }
    if let Some(error) = d.failing.get(&method) {
        return refuse(error);
    }
    match method.as_str() {
        "assistant.threads.setStatus" | "chat.postMessage" | "auth.test" => {
            let Some((user_id, app_id)) = d.bots.get(&token).cloned() else {
                return refuse(if token.is_empty() {
                    "not_authed"
                } else {
                    "invalid_auth"
                });
            };
            match method.as_str() {
                "assistant.threads.setStatus" => {
                    let (channel, thread_ts) = (field("channel_id"), field("thread_ts"));
                    if channel.is_empty() || thread_ts.is_empty() {
                        return refuse("invalid_arguments");
                    }
                    d.statuses.push(StatusCall {
                        token,
                        channel,
                        thread_ts,
                        status: field("status"),
                    });
                    ok(json!({}))
                }
                "chat.postMessage" => {
                    let channel = field("channel");
                    if channel.is_empty() {
                        return refuse("channel_not_found");
                    }
                    let ts = format!("1700000000.{:06}", d.next());
                    d.messages.push(Message {
                        token,
                        channel: channel.clone(),
                        text: field("text"),
                        thread_ts: form.get("thread_ts").cloned(),
                        ts: ts.clone(),
                    });
                    ok(json!({"channel": channel, "ts": ts}))
                }
                _ => ok(json!({
                    "user_id": user_id, "team_id": "TFAKE", "bot_id": format!("B{user_id}"),
                    "app_id": app_id,
                })),
            }
        }
        "apps.manifest.create" | "apps.manifest.update" | "apps.manifest.validate" => {
            if !d.config_tokens.contains(&token) {
                return refuse(if token.is_empty() {
                    "not_authed"
                } else {
                    "invalid_auth"
                });
            }
            let manifest = match serde_json::from_str::<Value>(&field("manifest")) {
                Ok(m)
                    if m["display_information"]["name"]
                        .as_str()
                        .is_some_and(|n| !n.is_empty()) =>
                {
                    m
                }
                _ => {
                    return axum::Json(json!({
                        "ok": false, "error": "invalid_manifest",
                        "errors": [{"message": "a name is required", "pointer": "/display_information/name"}],
                    }))
                    .into_response();
                }
            };
            match method.as_str() {
                "apps.manifest.validate" => ok(json!({})),
                "apps.manifest.update" => {
                    let app_id = field("app_id");
                    match d.apps.iter_mut().find(|a| a.app_id == app_id) {
                        Some(app) => {
                            app.manifest = manifest;
                            app.updates += 1;
                            ok(json!({"app_id": app_id, "permissions_updated": false}))
                        }
                        None => refuse("app_not_found"),
                    }
                }
                _ => {
                    let n = d.next();
                    let app = App {
                        app_id: format!("A{n:05}"),
                        client_id: format!("1000.{n}"),
                        client_secret: format!("client-secret-{n}"),
                        signing_secret: format!("signing-secret-{n}"),
                        manifest,
                        updates: 0,
                    };
                    let answer = json!({
                        "app_id": app.app_id,
                        "credentials": {
                            "client_id": app.client_id, "client_secret": app.client_secret,
                            "verification_token": "deprecated", "signing_secret": app.signing_secret,
                        },
                        "oauth_authorize_url": format!("https://slack.com/oauth/v2/authorize?client_id={}", app.client_id),
                    });
                    d.apps.push(app);
                    ok(answer)
                }
            }
        }
        "oauth.v2.access" => {
            let (client_id, code) = (field("client_id"), field("code"));
            let Some(app) = d.apps.iter().find(|a| a.client_id == client_id).cloned() else {
                return refuse("invalid_client_id");
            };
            if app.client_secret != field("client_secret") {
                return refuse("bad_client_secret");
            }
            if d.codes.get(&code) != Some(&client_id) {
                return refuse("invalid_code");
            }
            d.codes.remove(&code);
            let n = d.next();
            let (bot_token, user_id) = (format!("xoxb-fake-{n}"), format!("UBOT{n}"));
            d.bots
                .insert(bot_token.clone(), (user_id.clone(), app.app_id.clone()));
            ok(json!({
                "access_token": bot_token, "token_type": "bot", "scope": "chat:write",
                "bot_user_id": user_id, "app_id": app.app_id,
                "team": {"id": "TFAKE", "name": "Fake"},
            }))
        }
        "tooling.tokens.rotate" => {
            let refresh = field("refresh_token");
            if !d.refresh_tokens.remove(&refresh) {
                return refuse("invalid_refresh_token");
            }
            let n = d.next();
            let (token, next) = (format!("xoxe.xoxp-fake-{n}"), format!("xoxe-1-fake-{n}"));
            d.config_tokens.insert(token.clone());
            d.refresh_tokens.insert(next.clone());
            let exp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |t| t.as_secs())
                + 12 * 3600;
            ok(json!({"token": token, "refresh_token": next, "exp": exp, "iat": exp - 12 * 3600}))
        }
        _ => refuse("unknown_method"),
    }
}
