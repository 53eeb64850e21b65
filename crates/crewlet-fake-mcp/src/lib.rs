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

use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

mod binary;
mod http;
mod logfile;
mod rpc;
mod stdio;

pub use binary::binary_path;
use http::run_http;
pub use logfile::read_log;
use stdio::run_stdio;

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
    /// `FAKE_MCP_TRACKER_TOOLS=1`: a code tracker's `create_merge_request`.
    tracker_tools: bool,
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
            tracker_tools: var("FAKE_MCP_TRACKER_TOOLS").is_some_and(|v| v == "1"),
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

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}
