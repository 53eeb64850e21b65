//! A fake E2B on loopback: the control plane and envd on one address, the
//! sandbox picked by the `E2b-Sandbox-Id` header. Commands really run on
//! this host, in a per-sandbox directory that bubblewrap binds over
//! `/home/user` (no other namespace: it is a double of the protocol, not an
//! isolation boundary). Pause stops the sandbox's process groups with
//! SIGSTOP; resume continues them.

#![allow(dead_code)]
// Handlers bail out with a ready response; its size does not matter here.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

/// The fake's key; the client must send it as `X-API-Key`.
pub const KEY: &str = "e2b_fake_key_0123456789";

/// A running fake.
pub struct FakeE2b {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    state: Arc<Fake>,
    server: tokio::task::JoinHandle<()>,
}

struct Fake {
    root: PathBuf,
    boxes: Mutex<HashMap<String, FakeBox>>,
    next: Mutex<u64>,
}

struct FakeBox {
    home: PathBuf,
    token: String,
    env: BTreeMap<String, String>,
    metadata: BTreeMap<String, String>,
    /// Process groups of every process started in the box.
    groups: Vec<i32>,
    timeout: u64,
}

type Reply = Response;

fn error(status: StatusCode, message: &str) -> Reply {
    (
        status,
        axum::Json(json!({"code": status.as_u16(), "message": message})),
    )
        .into_response()
}

impl FakeE2b {
    /// Starts a fake, or `None` when bubblewrap cannot run here.
    pub async fn start() -> Option<Self> {
        let ok = tokio::process::Command::new("bwrap")
            .args(["--dev-bind", "/", "/", "--", "true"])
            .status()
            .await
            .is_ok_and(|s| s.success());
        if !ok {
            return None;
        }
        let root = std::env::temp_dir().join(format!("crewlet-fake-e2b-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&root).ok()?;
        let state = Arc::new(Fake {
            root,
            boxes: Mutex::new(HashMap::new()),
            next: Mutex::new(0),
        });
        let app = Router::new()
            .route("/sandboxes", post(create).get(list))
            .route("/sandboxes/{id}", get(detail).delete(delete))
            .route("/sandboxes/{id}/timeout", post(set_timeout))
            .route("/sandboxes/{id}/pause", post(pause))
            .route("/sandboxes/{id}/connect", post(connect))
            .route("/files", get(read_file).post(write_file))
            .route("/process.Process/Start", post(start))
            .route("/process.Process/SendSignal", post(send_signal))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.ok()?;
        let addr = listener.local_addr().ok()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Some(Self {
            url: format!("http://{addr}"),
            state,
            server,
        })
    }

    /// Ids of the sandboxes the fake holds.
    pub fn sandbox_ids(&self) -> Vec<String> {
        self.state.boxes.lock().keys().cloned().collect()
    }

    /// The timeout (seconds) last set on a sandbox.
    pub fn timeout_of(&self, id: &str) -> Option<u64> {
        self.state.boxes.lock().get(id).map(|b| b.timeout)
    }
}

impl Drop for FakeE2b {
    fn drop(&mut self) {
        for b in self.state.boxes.lock().values() {
            signal_all(&b.groups, libc::SIGKILL);
        }
        self.server.abort();
        let _ = std::fs::remove_dir_all(&self.state.root);
    }
}

fn signal_all(groups: &[i32], sig: libc::c_int) {
    for &g in groups {
        if g > 1 {
            // SAFETY: kill(2) on a process group we started.
            unsafe {
                libc::kill(-g, sig);
            }
        }
    }
}

fn authorized(headers: &HeaderMap) -> Result<(), Reply> {
    match headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        Some(KEY) => Ok(()),
        // Echoes what it was given: the client must not repeat it.
        Some(other) => Err(error(
            StatusCode::UNAUTHORIZED,
            &format!("Invalid API key {other}"),
        )),
        None => Err(error(StatusCode::UNAUTHORIZED, "missing X-API-Key")),
    }
}

fn sandbox_json(id: &str, b: &FakeBox) -> Value {
    json!({
        "sandboxID": id,
        "clientID": "fake",
        "templateID": "base",
        "envdAccessToken": b.token,
        "envdVersion": "0.2.0",
        "metadata": b.metadata,
    })
}

async fn create(State(f): State<Arc<Fake>>, headers: HeaderMap, body: Bytes) -> Reply {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "bad json");
    };
    if req["templateID"].as_str().is_none() {
        return error(StatusCode::BAD_REQUEST, "templateID is required");
    }
    let map = |v: &Value| -> BTreeMap<String, String> {
        serde_json::from_value(v.clone()).unwrap_or_default()
    };
    let n = {
        let mut next = f.next.lock();
        *next += 1;
        *next
    };
    let id = format!(
        "fakebox{n}x{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let home = f.root.join(&id);
    if std::fs::create_dir_all(&home).is_err() {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "no disk");
    }
    let b = FakeBox {
        home,
        token: format!("tok-{}", uuid::Uuid::new_v4().simple()),
        env: map(&req["envVars"]),
        metadata: map(&req["metadata"]),
        groups: Vec::new(),
        timeout: req["timeout"].as_u64().unwrap_or(15),
    };
    let out = sandbox_json(&id, &b);
    f.boxes.lock().insert(id, b);
    (StatusCode::CREATED, axum::Json(out)).into_response()
}

async fn list(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let filter: Vec<(String, String)> = q
        .get("metadata")
        .map(|m| {
            m.split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let boxes = f.boxes.lock();
    let out: Vec<Value> = boxes
        .iter()
        .filter(|(_, b)| filter.iter().all(|(k, v)| b.metadata.get(k) == Some(v)))
        .map(|(id, b)| sandbox_json(id, b))
        .collect();
    axum::Json(out).into_response()
}

async fn detail(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Reply {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    match f.boxes.lock().get(&id) {
        Some(b) => axum::Json(sandbox_json(&id, b)).into_response(),
        None => error(StatusCode::NOT_FOUND, "sandbox not found"),
    }
}

async fn delete(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Reply {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let Some(b) = f.boxes.lock().remove(&id) else {
        return error(StatusCode::NOT_FOUND, "sandbox not found");
    };
    signal_all(&b.groups, libc::SIGCONT);
    signal_all(&b.groups, libc::SIGKILL);
    let _ = std::fs::remove_dir_all(&b.home);
    StatusCode::NO_CONTENT.into_response()
}

async fn set_timeout(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Reply {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    let secs = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["timeout"].as_u64());
    let Some(secs) = secs else {
        return error(StatusCode::BAD_REQUEST, "timeout is required");
    };
    match f.boxes.lock().get_mut(&id) {
        Some(b) => {
            b.timeout = secs;
            StatusCode::NO_CONTENT.into_response()
        }
        None => error(StatusCode::NOT_FOUND, "sandbox not found"),
    }
}

async fn pause(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Reply {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    match f.boxes.lock().get(&id) {
        Some(b) => {
            signal_all(&b.groups, libc::SIGSTOP);
            StatusCode::NO_CONTENT.into_response()
        }
        None => error(StatusCode::NOT_FOUND, "sandbox not found"),
    }
}

async fn connect(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    UrlPath(id): UrlPath<String>,
) -> Reply {
    if let Err(r) = authorized(&headers) {
        return r;
    }
    match f.boxes.lock().get(&id) {
        Some(b) => {
            signal_all(&b.groups, libc::SIGCONT);
            axum::Json(sandbox_json(&id, b)).into_response()
        }
        None => error(StatusCode::NOT_FOUND, "sandbox not found"),
    }
}

/// The box an envd request is for, checked against its access token.
fn envd_box(f: &Fake, headers: &HeaderMap) -> Result<(String, PathBuf), Reply> {
    let id = headers
        .get("e2b-sandbox-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let boxes = f.boxes.lock();
    let Some(b) = boxes.get(id) else {
        return Err(error(StatusCode::BAD_GATEWAY, "sandbox not found"));
    };
    let token = headers.get("x-access-token").and_then(|v| v.to_str().ok());
    if token != Some(b.token.as_str()) {
        return Err(error(StatusCode::UNAUTHORIZED, "invalid access token"));
    }
    Ok((id.to_owned(), b.home.clone()))
}

/// envd runs processes as the user named by basic auth (`user:`).
fn as_user(headers: &HeaderMap) -> Result<(), Reply> {
    let user = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| B64.decode(b).ok());
    match user.as_deref() {
        Some(b"user:") => Ok(()),
        _ => Err(error(
            StatusCode::UNAUTHORIZED,
            "expected basic auth as `user`",
        )),
    }
}

/// `/home/user/...` (or relative to it) on the host.
fn host_path(home: &Path, path: &str) -> Option<PathBuf> {
    let rel = match path.strip_prefix("/home/user/") {
        Some(rel) => rel,
        None if !path.starts_with('/') => path,
        None => return None,
    };
    if rel.split('/').any(|p| p == "..") || rel.is_empty() {
        return None;
    }
    Some(home.join(rel))
}

async fn read_file(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Reply {
    let (_, home) = match envd_box(&f, &headers) {
        Ok(b) => b,
        Err(r) => return r,
    };
    if q.get("username").map(String::as_str) != Some("user") {
        return error(StatusCode::UNAUTHORIZED, "expected username=user");
    }
    let path = q.get("path").cloned().unwrap_or_default();
    let Some(host) = host_path(&home, &path) else {
        return error(StatusCode::BAD_REQUEST, "path outside the fake's home");
    };
    match tokio::fs::read(&host).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(_) => error(
            StatusCode::NOT_FOUND,
            &format!("path '{path}' does not exist"),
        ),
    }
}

async fn write_file(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Reply {
    let (_, home) = match envd_box(&f, &headers) {
        Ok(b) => b,
        Err(r) => return r,
    };
    if q.get("username").map(String::as_str) != Some("user") {
        return error(StatusCode::UNAUTHORIZED, "expected username=user");
    }
    let path = q.get("path").cloned().unwrap_or_default();
    let Some(host) = host_path(&home, &path) else {
        return error(StatusCode::BAD_REQUEST, "path outside the fake's home");
    };
    let boundary = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| ct.split("boundary=").nth(1))
        .map(|b| b.trim_matches('"').to_owned());
    let Some(bytes) = boundary.and_then(|b| multipart_file(&body, &b)) else {
        return error(
            StatusCode::BAD_REQUEST,
            "expected a multipart body with a file",
        );
    };
    if let Some(parent) = host.parent() {
        let _ = tokio::fs::create_dir_all(parent).await;
    }
    match tokio::fs::write(&host, bytes).await {
        Ok(()) => axum::Json(json!([{"name": path, "type": "file", "path": path}])).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// The content of the first part of a multipart body.
fn multipart_file<'a>(body: &'a [u8], boundary: &str) -> Option<&'a [u8]> {
    let open = format!("--{boundary}\r\n");
    let start = find(body, open.as_bytes())? + open.len();
    let headers_end = start + find(&body[start..], b"\r\n\r\n")? + 4;
    let close = format!("\r\n--{boundary}");
    let end = headers_end + find(&body[headers_end..], close.as_bytes())?;
    Some(&body[headers_end..end])
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn frame(flag: u8, v: &Value) -> Bytes {
    let json = v.to_string().into_bytes();
    let mut out = vec![flag];
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(&json);
    Bytes::from(out)
}

async fn start(State(f): State<Arc<Fake>>, headers: HeaderMap, body: Bytes) -> Reply {
    let (id, home) = match envd_box(&f, &headers) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if content_type != Some("application/connect+json") {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected application/connect+json",
        );
    }
    if let Err(r) = as_user(&headers) {
        return r;
    }
    let len = body
        .get(1..5)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
    if body.first() != Some(&0) || len != Some(body.len().saturating_sub(5)) {
        return error(StatusCode::BAD_REQUEST, "expected one uncompressed frame");
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body[5..]) else {
        return error(StatusCode::BAD_REQUEST, "bad json");
    };
    let p = &req["process"];
    let Some(cmd) = p["cmd"].as_str() else {
        return error(StatusCode::BAD_REQUEST, "process.cmd is required");
    };
    let args: Vec<String> = serde_json::from_value(p["args"].clone()).unwrap_or_default();
    let envs: BTreeMap<String, String> =
        serde_json::from_value(p["envs"].clone()).unwrap_or_default();
    let cwd = p["cwd"].as_str().unwrap_or("/home/user").to_owned();
    // envd refuses a working directory that is not there with a Connect
    // error, which in a stream is the end-of-stream frame's.
    let cwd_ok = host_path(&home, &cwd)
        .or_else(|| (cwd == "/home/user").then(|| home.clone()))
        .is_some_and(|p| p.is_dir());
    if !cwd_ok {
        let end = json!({"error": {"code": "invalid_argument", "message": format!("cwd '{cwd}' does not exist")}});
        return (
            [(header::CONTENT_TYPE, "application/connect+json")],
            Body::from(frame(2, &end)),
        )
            .into_response();
    }
    let box_env = f
        .boxes
        .lock()
        .get(&id)
        .map(|b| b.env.clone())
        .unwrap_or_default();
    let mut c = tokio::process::Command::new("bwrap");
    c.args(["--dev-bind", "/", "/", "--tmpfs", "/home", "--bind"])
        .arg(&home)
        .args(["/home/user", "--chdir", &cwd, "--", cmd])
        .args(&args)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("HOME", "/home/user")
        .env("USER", "user")
        .envs(box_env)
        .envs(envs)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match c.spawn() {
        Ok(c) => c,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let pid = child.id().unwrap_or(0);
    if let Some(b) = f.boxes.lock().get_mut(&id) {
        b.groups.push(pid as i32);
    }
    let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, std::io::Error>>();
    let _ = tx.unbounded_send(Ok(frame(0, &json!({"event": {"start": {"pid": pid}}}))));
    let pump = |stream: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>, key: &'static str| {
        let tx = tx.clone();
        async move {
            let Some(mut s) = stream else { return };
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let ev = json!({"event": {"data": {key: B64.encode(&buf[..n])}}});
                let _ = tx.unbounded_send(Ok(frame(0, &ev)));
            }
        }
    };
    let out = pump(child.stdout.take().map(|s| Box::new(s) as _), "stdout");
    let err = pump(child.stderr.take().map(|s| Box::new(s) as _), "stderr");
    tokio::spawn(async move {
        let (status, (), ()) = tokio::join!(child.wait(), out, err);
        let end = match status.ok().and_then(|s| s.code()) {
            Some(code) => {
                json!({"exitCode": code, "exited": true, "status": format!("exit status {code}")})
            }
            None => json!({"exitCode": -1, "exited": false, "status": "signal: killed"}),
        };
        let _ = tx.unbounded_send(Ok(frame(0, &json!({"event": {"end": end}}))));
        let _ = tx.unbounded_send(Ok(frame(2, &json!({}))));
    });
    (
        [(header::CONTENT_TYPE, "application/connect+json")],
        Body::from_stream(rx),
    )
        .into_response()
}

async fn send_signal(State(f): State<Arc<Fake>>, headers: HeaderMap, body: Bytes) -> Reply {
    let (id, _) = match envd_box(&f, &headers) {
        Ok(b) => b,
        Err(r) => return r,
    };
    if let Err(r) = as_user(&headers) {
        return r;
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "bad json");
    };
    let pid = req["process"]["pid"].as_i64().unwrap_or(0) as i32;
    let sig = match req["signal"].as_str() {
        Some("SIGNAL_SIGKILL") => libc::SIGKILL,
        Some("SIGNAL_SIGTERM") => libc::SIGTERM,
        _ => return error(StatusCode::BAD_REQUEST, "unknown signal"),
    };
    let ours = f
        .boxes
        .lock()
        .get(&id)
        .is_some_and(|b| b.groups.contains(&pid));
    if !ours {
        return error(StatusCode::NOT_FOUND, "process not found");
    }
    // Each process the fake starts leads its own group (bubblewrap and the
    // command under it): the signal goes to all of it.
    signal_all(&[pid], sig);
    axum::Json(json!({})).into_response()
}
