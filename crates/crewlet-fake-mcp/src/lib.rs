//! A fake MCP server for Crewlet's tests. Dev-only: never shipped.
//!
//! Speaks MCP over stdio (default) or streamable HTTP (`--http ADDR`, which
//! prints `http://{bound addr}/mcp` as its first stdout line). Tools:
//!
//! - `post_message {channel, text, thread?}`: appends a line to the JSONL
//!   file named by `FAKE_MCP_LOG`, recording `FAKE_MCP_IDENTITY` (or, over
//!   HTTP, the `X-Fake-Mcp-Identity` request header) as `identity`;
//! - `read_thread {channel, thread}`: the messages posted to that thread.
//!
//! Knobs, all environment variables:
//! - `FAKE_MCP_LOG`: the JSONL file (a `started` line is written at start);
//! - `FAKE_MCP_IDENTITY`: who this server acts as;
//! - `FAKE_MCP_FAIL_ON_START`: `1`/`exit` exits with status 3 before
//!   answering anything (after a line on stderr); `hang` never answers
//!   `initialize`;
//! - `FAKE_MCP_PAGE_SIZE`: tools per `tools/list` page (default: all);
//! - `FAKE_MCP_PROTOCOL`: the protocol version to answer `initialize` with;
//! - `FAKE_MCP_SSE=1`: (HTTP) answer requests as `text/event-stream`;
//! - `FAKE_MCP_TEST_TOOLS=1`: adds `sleep {ms}`, `whoami` and
//!   `forget_sessions` for transport tests.

use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

pub const SERVER_NAME: &str = "crewlet-fake-mcp";
pub const DEFAULT_PROTOCOL: &str = "2025-06-18";
const KNOWN_PROTOCOLS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

/// Behaviour read from the environment once at start.
#[derive(Debug, Clone)]
struct Config {
    log: Option<PathBuf>,
    identity: Option<String>,
    page_size: usize,
    protocol: Option<String>,
    sse: bool,
    test_tools: bool,
    hang_on_initialize: bool,
}

impl Config {
    fn from_env() -> Config {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Config {
            log: var("FAKE_MCP_LOG").map(PathBuf::from),
            identity: var("FAKE_MCP_IDENTITY"),
            page_size: var("FAKE_MCP_PAGE_SIZE")
                .and_then(|v| v.parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or(usize::MAX),
            protocol: var("FAKE_MCP_PROTOCOL"),
            sse: var("FAKE_MCP_SSE").is_some_and(|v| v == "1"),
            test_tools: var("FAKE_MCP_TEST_TOOLS").is_some_and(|v| v == "1"),
            hang_on_initialize: var("FAKE_MCP_FAIL_ON_START").is_some_and(|v| v == "hang"),
        }
    }
}

struct Server {
    config: Config,
    sessions: Mutex<HashSet<String>>,
    counter: AtomicU64,
    log_lock: Mutex<()>,
}

/// The entry point: `crewlet-fake-mcp [--http ADDR]`. Returns the exit code.
pub async fn run(args: Vec<String>) -> i32 {
    if let Ok(mode) = std::env::var("FAKE_MCP_FAIL_ON_START")
        && (mode == "1" || mode == "exit")
    {
        eprintln!("fake-mcp: failing on start as asked (FAKE_MCP_FAIL_ON_START={mode})");
        return 3;
    }
    let config = Config::from_env();
    let server = Arc::new(Server {
        config,
        sessions: Mutex::new(HashSet::new()),
        counter: AtomicU64::new(0),
        log_lock: Mutex::new(()),
    });
    server.append_log(json!({
        "event": "started",
        "identity": server.config.identity,
        "pid": std::process::id(),
    }));
    match args.iter().position(|a| a == "--http") {
        Some(i) => {
            let addr = args.get(i + 1).map(String::as_str).unwrap_or("127.0.0.1:0");
            run_http(server, addr).await
        }
        None => run_stdio(server).await,
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// The lines of `text` that end in a newline (a line still being written
/// by another process has none yet).
fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    let done = text.rfind('\n').map_or(0, |i| i + 1);
    text[..done].lines().filter(|l| !l.trim().is_empty())
}

/// The log file's finished lines, each parsed: for tests reading what the
/// servers recorded. A missing file is an empty log; a finished line that is
/// not JSON is an error naming its number and text.
pub fn read_log(path: &Path) -> Result<Vec<Value>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    complete_lines(&text)
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .map_err(|e| format!("{} line {}: {e}: {l}", path.display(), i + 1))
        })
        .collect()
}

/// An answer: a JSON-RPC result or error, plus notifications to send first.
struct Answer {
    outcome: Result<Value, (i64, String)>,
    before: Vec<Value>,
}

impl Server {
    /// Appends one line with a single `write` on an `O_APPEND` file: several
    /// server processes share one log, and a line written in pieces (as
    /// `writeln!` on a `File` does, one `write` per formatted fragment) can
    /// interleave with another process's line.
    fn append_log(&self, line: Value) {
        let Some(path) = &self.config.log else { return };
        let mut text = line.to_string();
        text.push('\n');
        let _guard = lock(&self.log_lock);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(e) = written {
            eprintln!("fake-mcp: cannot write {}: {e}", path.display());
        }
    }

    fn read_log(&self) -> Vec<Value> {
        let Some(path) = &self.config.log else {
            return Vec::new();
        };
        let _guard = lock(&self.log_lock);
        let text = std::fs::read_to_string(path).unwrap_or_default();
        // A line another process has not finished is left for the next read;
        // a finished line that is not JSON is a bug in this server, skipped here.
        complete_lines(&text)
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    fn tools(&self) -> Vec<Value> {
        let mut tools = vec![
            json!({
                "name": "post_message",
                "title": "Post a message",
                "description": "Post a message to a channel, optionally in a thread.",
                "inputSchema": {"type": "object", "properties": {
                    "channel": {"type": "string"}, "text": {"type": "string"},
                    "thread": {"type": "string"}}, "required": ["channel", "text"]},
                "annotations": {"readOnlyHint": false, "destructiveHint": false, "openWorldHint": true},
            }),
            json!({
                "name": "read_thread",
                "description": "Read the messages of a thread.",
                "inputSchema": {"type": "object", "properties": {
                    "channel": {"type": "string"}, "thread": {"type": "string"}},
                    "required": ["channel", "thread"]},
                "annotations": {"readOnlyHint": true},
            }),
        ];
        if self.config.test_tools {
            tools.push(
                json!({"name": "sleep", "description": "Sleep for `ms` milliseconds.",
                "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}}}),
            );
            tools.push(
                json!({"name": "whoami", "description": "Identity, pid and environment names.",
                "inputSchema": {"type": "object"}}),
            );
            tools.push(
                json!({"name": "forget_sessions", "description": "Drop every HTTP session.",
                "inputSchema": {"type": "object"}}),
            );
            tools.push(json!({"name": "announce_tools_changed",
                "description": "Send notifications/tools/list_changed before answering.",
                "inputSchema": {"type": "object"}}));
        }
        tools
    }

    async fn handle(&self, method: &str, params: &Value, identity: Option<String>) -> Answer {
        let ok = |v: Value| Answer {
            outcome: Ok(v),
            before: Vec::new(),
        };
        match method {
            "initialize" => {
                if self.config.hang_on_initialize {
                    std::future::pending::<()>().await;
                }
                let asked = params
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or(DEFAULT_PROTOCOL);
                let version = self.config.protocol.clone().unwrap_or_else(|| {
                    if KNOWN_PROTOCOLS.contains(&asked) {
                        asked.to_string()
                    } else {
                        DEFAULT_PROTOCOL.to_string()
                    }
                });
                ok(json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {"listChanged": true}},
                    "serverInfo": {"name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION")},
                    "instructions": "A fake chat server for tests.",
                }))
            }
            "ping" => ok(json!({})),
            "tools/list" => {
                let tools = self.tools();
                let start: usize = params
                    .get("cursor")
                    .and_then(Value::as_str)
                    .and_then(|c| c.strip_prefix("page-"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let end = start.saturating_add(self.config.page_size).min(tools.len());
                let page: Vec<Value> = tools
                    .get(start..end)
                    .map(<[Value]>::to_vec)
                    .unwrap_or_default();
                let mut result = json!({"tools": page});
                if end < tools.len() {
                    result["nextCursor"] = json!(format!("page-{end}"));
                }
                ok(result)
            }
            "tools/call" => self.call(params, identity).await,
            _ => Answer {
                outcome: Err((-32601, format!("method not found: {method}"))),
                before: Vec::new(),
            },
        }
    }

    async fn call(&self, params: &Value, identity: Option<String>) -> Answer {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let arg = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
        let text_result = |text: String, structured: Option<Value>, is_error: bool| {
            let mut r = json!({"content": [{"type": "text", "text": text}], "isError": is_error});
            if let Some(s) = structured {
                r["structuredContent"] = s;
            }
            Answer {
                outcome: Ok(r),
                before: Vec::new(),
            }
        };
        let test_tool = self.config.test_tools;
        match name {
            "post_message" => {
                let (Some(channel), Some(text)) = (arg("channel"), arg("text")) else {
                    return text_result(
                        "post_message needs `channel` and `text` strings".into(),
                        None,
                        true,
                    );
                };
                let n = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
                let message_id = format!("m-{}-{n}", std::process::id());
                let thread = arg("thread");
                self.append_log(json!({
                    "event": "tool_call", "tool": "post_message", "ts_ms": now_ms(),
                    "identity": identity, "channel": channel, "text": text,
                    "thread": thread, "message_id": message_id,
                }));
                text_result(
                    format!(
                        "posted to {channel} as {}",
                        identity.as_deref().unwrap_or("(anonymous)")
                    ),
                    Some(json!({"message_id": message_id})),
                    false,
                )
            }
            "read_thread" => {
                let (Some(channel), Some(thread)) = (arg("channel"), arg("thread")) else {
                    return text_result(
                        "read_thread needs `channel` and `thread` strings".into(),
                        None,
                        true,
                    );
                };
                let messages: Vec<Value> = self
                    .read_log()
                    .into_iter()
                    .filter(|l| l["tool"] == "post_message" && l["channel"] == channel.as_str())
                    .filter(|l| l["thread"] == thread.as_str() || l["message_id"] == thread.as_str())
                    .map(|l| json!({"identity": l["identity"], "text": l["text"], "message_id": l["message_id"]}))
                    .collect();
                text_result(
                    Value::Array(messages.clone()).to_string(),
                    Some(json!({"messages": messages})),
                    false,
                )
            }
            "sleep" if test_tool => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                text_result(format!("slept {ms} ms"), None, false)
            }
            "whoami" if test_tool => {
                let mut env_keys: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
                env_keys.sort();
                let info =
                    json!({"identity": identity, "pid": std::process::id(), "env_keys": env_keys});
                text_result(info.to_string(), Some(info), false)
            }
            "forget_sessions" if test_tool => {
                lock(&self.sessions).clear();
                text_result("forgot every session".into(), None, false)
            }
            "announce_tools_changed" if test_tool => {
                let mut answer = text_result("announced".into(), None, false);
                answer
                    .before
                    .push(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
                answer
            }
            _ => Answer {
                outcome: Err((-32602, format!("unknown tool: {name}"))),
                before: Vec::new(),
            },
        }
    }
}

fn response(id: Value, outcome: Result<Value, (i64, String)>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    }
}

async fn run_stdio(server: Arc<Server>) -> i32 {
    eprintln!(
        "fake-mcp: serving stdio as {}",
        server.config.identity.as_deref().unwrap_or("(anonymous)")
    );
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = rx.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
                || stdout.flush().await.is_err()
            {
                break;
            }
        }
    });
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            eprintln!("fake-mcp: ignoring a line that is not JSON");
            continue;
        };
        let (Some(method), Some(id)) = (
            msg.get("method")
                .and_then(Value::as_str)
                .map(str::to_string),
            msg.get("id").cloned(),
        ) else {
            continue; // notifications and responses need no answer
        };
        let params = msg.get("params").cloned().unwrap_or(json!({}));
        let server = server.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            let identity = server.config.identity.clone();
            let answer = server.handle(&method, &params, identity).await;
            for note in answer.before {
                let _ = tx.send(note.to_string());
            }
            let _ = tx.send(response(id, answer.outcome).to_string());
        });
    }
    eprintln!("fake-mcp: stdin closed, exiting");
    drop(tx);
    let _ = tokio::time::timeout(Duration::from_secs(1), writer).await;
    0
}

async fn run_http(server: Arc<Server>, addr: &str) -> i32 {
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("fake-mcp: cannot listen on {addr}: {e}");
            return 2;
        }
    };
    let bound = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fake-mcp: no local address: {e}");
            return 2;
        }
    };
    println!("http://{bound}/mcp");
    let _ = std::io::stdout().flush();
    eprintln!("fake-mcp: serving http on {bound}");
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let server = server.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(server, stream).await {
                eprintln!("fake-mcp: connection error: {e}");
            }
        });
    }
}

struct HttpRequest {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpRequest {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

async fn read_request(stream: &mut BufReader<TcpStream>) -> std::io::Result<Option<HttpRequest>> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        if line == "\r\n" || line == "\n" {
            break;
        }
        head.push_str(&line);
        if head.len() > 64 * 1024 {
            return Err(std::io::Error::other("request head too large"));
        }
    }
    let mut lines = head.lines();
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await?;
    Ok(Some(HttpRequest {
        method,
        path,
        headers,
        body,
    }))
}

async fn write_response(
    stream: &mut BufReader<TcpStream>,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let stream = stream.get_mut();
    stream.write_all(out.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await
}

async fn serve_connection(server: Arc<Server>, stream: TcpStream) -> std::io::Result<()> {
    let mut stream = BufReader::new(stream);
    let Some(req) = read_request(&mut stream).await? else {
        return Ok(());
    };
    if req.path != "/mcp" {
        return write_response(&mut stream, "404 Not Found", &[], b"").await;
    }
    let session = req.header("mcp-session-id").map(str::to_string);
    let known = |s: &Option<String>| {
        s.as_ref()
            .is_some_and(|s| lock(&server.sessions).contains(s))
    };
    match req.method.as_str() {
        "DELETE" => {
            if let Some(s) = &session {
                lock(&server.sessions).remove(s);
            }
            return write_response(&mut stream, "200 OK", &[], b"").await;
        }
        "POST" => {}
        _ => return write_response(&mut stream, "405 Method Not Allowed", &[], b"").await,
    }
    let Ok(msg) = serde_json::from_slice::<Value>(&req.body) else {
        return write_response(&mut stream, "400 Bad Request", &[], b"not json").await;
    };
    let method = msg
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    let id = msg.get("id").cloned();
    let is_initialize = method.as_deref() == Some("initialize");
    if !is_initialize {
        if session.is_none() {
            return write_response(
                &mut stream,
                "400 Bad Request",
                &[],
                b"missing mcp-session-id",
            )
            .await;
        }
        if !known(&session) {
            return write_response(&mut stream, "404 Not Found", &[], b"unknown session").await;
        }
    }
    let (Some(method), Some(id)) = (method, id) else {
        // A notification or a response: accepted, nothing to say.
        return write_response(&mut stream, "202 Accepted", &[], b"").await;
    };
    let identity = req
        .header("x-fake-mcp-identity")
        .map(str::to_string)
        .or_else(|| server.config.identity.clone());
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    let answer = server.handle(&method, &params, identity).await;
    let mut headers = Vec::new();
    if is_initialize {
        let n = server.counter.fetch_add(1, Ordering::SeqCst);
        let new_session = format!("session-{}-{n}", std::process::id());
        lock(&server.sessions).insert(new_session.clone());
        headers.push(("Mcp-Session-Id", new_session));
    }
    let reply = response(id, answer.outcome);
    if server.config.sse {
        headers.push(("Content-Type", "text/event-stream".to_string()));
        let mut body = String::from(": fake-mcp stream\n\n");
        let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": format!("handling {method}")}});
        for note in answer.before.iter().chain(std::iter::once(&log)) {
            body.push_str(&format!("event: message\ndata: {note}\n\n"));
        }
        body.push_str(&format!("event: message\nid: 1\ndata: {reply}\n\n"));
        write_response(&mut stream, "200 OK", &headers, body.as_bytes()).await
    } else {
        headers.push(("Content-Type", "application/json".to_string()));
        write_response(
            &mut stream,
            "200 OK",
            &headers,
            reply.to_string().as_bytes(),
        )
        .await
    }
}

/// The path of the `crewlet-fake-mcp` binary for tests in other crates of
/// the workspace: `CREWLET_FAKE_MCP_BIN` if set, else the one beside the
/// running test executable, built with cargo first when it is missing or
/// older than this crate's sources.
pub fn binary_path() -> Result<PathBuf, String> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(locate_or_build).clone()
}

fn locate_or_build() -> Result<PathBuf, String> {
    if let Ok(path) = std::env::var("CREWLET_FAKE_MCP_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("no current executable: {e}"))?;
    // target/{profile}/deps/test-binary -> target/{profile}
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("the test executable is not inside target/{profile}/deps")?;
    let candidate = profile_dir.join(format!("{SERVER_NAME}{}", std::env::consts::EXE_SUFFIX));
    if candidate.exists() && !is_stale(&candidate) {
        return Ok(candidate);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = std::process::Command::new(cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["-p", SERVER_NAME, "--bin", SERVER_NAME]);
    if profile_dir.file_name().and_then(|n| n.to_str()) == Some("release") {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("could not run cargo to build {SERVER_NAME}: {e}"))?;
    if !status.success() || !candidate.exists() {
        return Err(format!(
            "building {SERVER_NAME} failed ({status}); run `cargo build -p {SERVER_NAME}`"
        ));
    }
    Ok(candidate)
}

/// Is the binary older than any source file of this crate?
fn is_stale(binary: &Path) -> bool {
    let Ok(built) = binary.metadata().and_then(|m| m.modified()) else {
        return true;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = [
        root.join("Cargo.toml"),
        root.join("src/lib.rs"),
        root.join("src/main.rs"),
    ];
    sources.iter().any(|p| {
        p.metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|modified| modified > built)
    })
}
