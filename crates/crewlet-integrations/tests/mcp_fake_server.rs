//! The MCP client against the real `crewlet-fake-mcp` binary, over stdio and
//! streamable HTTP.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crewlet_integrations::{
    McpClient, McpError, McpHub, McpHubPlan, McpScope, McpServerSpec, McpTransport, RoleMcpServers,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

fn fake_bin() -> PathBuf {
    crewlet_fake_mcp::binary_path().unwrap_or_else(|e| panic!("fake mcp server: {e}"))
}

/// A fresh JSONL log path in a per-test temp directory.
fn log_path(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("crewlet-fake-mcp-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("calls.jsonl");
    let _ = std::fs::remove_file(&path);
    path
}

fn log_lines(path: &Path) -> Vec<Value> {
    crewlet_fake_mcp::read_log(path).unwrap_or_else(|e| panic!("fake mcp log: {e}"))
}

fn tool_calls(path: &Path) -> Vec<Value> {
    log_lines(path)
        .into_iter()
        .filter(|l| l["event"] == "tool_call")
        .collect()
}

fn stdio_spec(name: &str, log: &Path) -> McpServerSpec {
    McpServerSpec::stdio(name, fake_bin().to_string_lossy(), Vec::<String>::new())
        .with_env("FAKE_MCP_LOG", log.to_string_lossy())
        .with_timeouts(Duration::from_secs(20), Duration::from_secs(20))
}

/// Is the process gone (or a zombie awaiting its reaper)?
fn process_gone(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

async fn wait_gone(pid: u64) -> bool {
    for _ in 0..200 {
        if process_gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

#[tokio::test]
async fn stdio_initialize_list_and_call_record_the_identity() {
    let log = log_path("basic");
    let spec = stdio_spec("chat", &log).with_env("FAKE_MCP_IDENTITY", "writer-agent");
    let client = McpClient::connect(&spec).await.unwrap();
    let info = client.server_info();
    assert_eq!(info.name, crewlet_fake_mcp::SERVER_NAME);
    assert_eq!(info.protocol_version, "2025-06-18");
    assert_eq!(client.transport(), McpTransport::Stdio);

    let tools = client.list_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["post_message", "read_thread"]);
    assert_eq!(tools[1].annotations.read_only_hint, Some(true));
    assert_eq!(
        tools[0].input_schema["required"],
        json!(["channel", "text"])
    );

    let posted = client
        .call_tool(
            "post_message",
            json!({"channel": "C_GEN", "text": "hello team", "thread": "1700.1"}),
        )
        .await
        .unwrap();
    assert!(!posted.is_error);
    assert_eq!(posted.text(), "posted to C_GEN as writer-agent");
    assert!(posted.structured_content.as_ref().unwrap()["message_id"].is_string());

    let calls = tool_calls(&log);
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["identity"], "writer-agent");
    assert_eq!(calls[0]["channel"], "C_GEN");
    assert_eq!(calls[0]["text"], "hello team");
    assert_eq!(calls[0]["thread"], "1700.1");

    let thread = client
        .call_tool(
            "read_thread",
            json!({"channel": "C_GEN", "thread": "1700.1"}),
        )
        .await
        .unwrap();
    let messages = &thread.structured_content.unwrap()["messages"];
    assert_eq!(messages[0]["text"], "hello team");
    assert_eq!(messages[0]["identity"], "writer-agent");

    client.ping().await.unwrap();
    client.shutdown().await;
}

#[tokio::test]
async fn stdio_tools_list_follows_cursor_pages() {
    let log = log_path("paging");
    let spec = stdio_spec("paged", &log)
        .with_env("FAKE_MCP_PAGE_SIZE", "1")
        .with_env("FAKE_MCP_TEST_TOOLS", "1");
    let client = McpClient::connect(&spec).await.unwrap();
    let names: Vec<_> = client
        .list_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(
        names,
        [
            "post_message",
            "read_thread",
            "sleep",
            "whoami",
            "forget_sessions",
            "announce_tools_changed"
        ]
    );
}

#[tokio::test]
async fn stdio_tool_errors_and_unknown_tools_are_surfaced() {
    let log = log_path("errors");
    let client = McpClient::connect(&stdio_spec("chat", &log)).await.unwrap();
    let bad_args = client
        .call_tool("post_message", json!({"channel": "C"}))
        .await
        .unwrap();
    assert!(bad_args.is_error);
    assert!(bad_args.text().contains("needs `channel` and `text`"));

    let unknown = client
        .call_tool("launch_rockets", json!({}))
        .await
        .unwrap_err();
    match &unknown {
        McpError::Rpc {
            code,
            message,
            server,
            ..
        } => {
            assert_eq!(*code, -32602);
            assert!(message.contains("launch_rockets"));
            assert_eq!(server, "chat");
        }
        other => panic!("expected an rpc error, got {other:?}"),
    }
    assert!(unknown.to_string().contains("mcp server `chat`"));
    assert!(tool_calls(&log).is_empty());
}

#[tokio::test]
async fn stdio_request_timeout_leaves_the_connection_usable() {
    let log = log_path("timeout");
    let spec = stdio_spec("slow", &log)
        .with_env("FAKE_MCP_TEST_TOOLS", "1")
        .with_timeouts(Duration::from_secs(20), Duration::from_secs(5));
    let client = McpClient::connect(&spec).await.unwrap();
    // Far past the request timeout, which is itself roomy enough for the
    // quick call below on a loaded machine.
    let err = client
        .call_tool("sleep", json!({"ms": 120_000}))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert!(matches!(&err, McpError::Timeout { method, .. } if method == "tools/call"));
    // The late answer is dropped; the next call works.
    let ok = client.call_tool("sleep", json!({"ms": 1})).await.unwrap();
    assert_eq!(ok.text(), "slept 1 ms");
}

#[tokio::test]
async fn stdio_concurrent_requests_are_multiplexed_by_id() {
    let log = log_path("multiplex");
    let spec = stdio_spec("mux", &log).with_env("FAKE_MCP_TEST_TOOLS", "1");
    let client = McpClient::connect(&spec).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let slow = {
        let (client, tx) = (client.clone(), tx.clone());
        tokio::spawn(async move {
            let r = client
                .call_tool("sleep", json!({"ms": 10_000}))
                .await
                .unwrap();
            tx.send(r.text()).unwrap();
        })
    };
    let fast = {
        let (client, tx) = (client.clone(), tx.clone());
        tokio::spawn(async move {
            let r = client
                .call_tool("post_message", json!({"channel": "C", "text": "quick"}))
                .await
                .unwrap();
            tx.send(r.text()).unwrap();
        })
    };
    slow.await.unwrap();
    fast.await.unwrap();
    drop(tx);
    let mut order = Vec::new();
    while let Some(text) = rx.recv().await {
        order.push(text);
    }
    // The quick call was answered while the slow one was still running.
    assert_eq!(order, ["posted to C as (anonymous)", "slept 10000 ms"]);
}

#[tokio::test]
async fn stdio_server_that_exits_on_start_fails_with_its_stderr() {
    let log = log_path("fail");
    let spec = stdio_spec("broken", &log).with_env("FAKE_MCP_FAIL_ON_START", "1");
    let err = McpClient::connect(&spec).await.unwrap_err();
    match &err {
        McpError::StartFailed {
            server,
            reason,
            stderr,
        } => {
            assert_eq!(server, "broken");
            assert!(reason.contains("exit status: 3"), "{reason}");
            assert!(stderr.contains("failing on start"), "{stderr}");
        }
        other => panic!("expected StartFailed, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.starts_with("mcp server `broken` failed to start"),
        "{text}"
    );
    assert!(text.contains("FAKE_MCP_FAIL_ON_START=1"), "{text}");
}

#[tokio::test]
async fn stdio_server_that_never_initializes_times_out_and_is_killed() {
    let log = log_path("hang");
    let spec = stdio_spec("hung", &log)
        .with_env("FAKE_MCP_FAIL_ON_START", "hang")
        .with_timeouts(Duration::from_millis(700), Duration::from_secs(5));
    let err = McpClient::connect(&spec).await.unwrap_err();
    assert!(matches!(err, McpError::StartupTimeout { .. }), "{err}");
    assert!(err.to_string().contains("did not answer initialize"));
    let started = log_lines(&log);
    let pid = started[0]["pid"].as_u64().unwrap();
    assert!(
        wait_gone(pid).await,
        "the hung server {pid} is still running"
    );
}

#[tokio::test]
async fn missing_command_fails_clearly() {
    let spec = McpServerSpec::stdio("ghost", "/nonexistent/crewlet-no-such-server", ["--x"]);
    let err = McpClient::connect(&spec).await.unwrap_err();
    assert!(matches!(err, McpError::StartFailed { .. }));
    let text = err.to_string();
    assert!(
        text.contains("ghost") && text.contains("/nonexistent/crewlet-no-such-server"),
        "{text}"
    );
}

#[tokio::test]
async fn unsupported_protocol_version_is_refused() {
    let log = log_path("protocol");
    let spec = stdio_spec("old", &log).with_env("FAKE_MCP_PROTOCOL", "2023-01-01");
    let err = McpClient::connect(&spec).await.unwrap_err();
    assert!(
        matches!(&err, McpError::UnsupportedProtocol { version, .. } if version == "2023-01-01"),
        "{err}"
    );
}

#[tokio::test]
async fn stdio_process_is_killed_on_drop_and_on_shutdown() {
    let log = log_path("kill");
    let spec = stdio_spec("k", &log).with_env("FAKE_MCP_TEST_TOOLS", "1");

    let dropped = McpClient::connect(&spec).await.unwrap();
    let who = dropped.call_tool("whoami", json!({})).await.unwrap();
    let pid = who.structured_content.unwrap()["pid"].as_u64().unwrap();
    drop(dropped);
    assert!(wait_gone(pid).await, "server {pid} survived its client");

    let shut = McpClient::connect(&spec).await.unwrap();
    let who = shut.call_tool("whoami", json!({})).await.unwrap();
    let pid = who.structured_content.unwrap()["pid"].as_u64().unwrap();
    shut.shutdown().await;
    assert!(wait_gone(pid).await, "server {pid} survived shutdown");
    let after = shut.call_tool("whoami", json!({})).await.unwrap_err();
    assert!(matches!(after, McpError::Closed { .. }), "{after}");
}

#[tokio::test]
async fn stdio_environment_is_only_the_spec_plus_a_safe_base() {
    let log = log_path("env");
    let spec = stdio_spec("env", &log)
        .with_env("FAKE_MCP_TEST_TOOLS", "1")
        .with_env("ROLE_TOKEN", "t-123");
    let client = McpClient::connect(&spec).await.unwrap();
    let who = client.call_tool("whoami", json!({})).await.unwrap();
    let keys: Vec<String> =
        serde_json::from_value(who.structured_content.unwrap()["env_keys"].clone()).unwrap();
    assert!(keys.contains(&"ROLE_TOKEN".to_string()), "{keys:?}");
    assert!(keys.contains(&"FAKE_MCP_LOG".to_string()));
    // cargo sets this for the test process; the server must not inherit it.
    assert!(
        !keys.contains(&"CARGO_MANIFEST_DIR".to_string()),
        "{keys:?}"
    );
    for key in &keys {
        assert!(
            spec.env.contains_key(key)
                || crewlet_integrations::mcp::INHERITED_ENV.contains(&key.as_str()),
            "unexpected variable {key} reached the server"
        );
    }
}

#[tokio::test]
async fn stdio_tools_list_changed_is_reported_once() {
    let log = log_path("changed");
    let spec = stdio_spec("c", &log).with_env("FAKE_MCP_TEST_TOOLS", "1");
    let client = McpClient::connect(&spec).await.unwrap();
    assert!(!client.take_tools_changed());
    client
        .call_tool("announce_tools_changed", json!({}))
        .await
        .unwrap();
    assert!(client.take_tools_changed());
    assert!(!client.take_tools_changed());
}

#[tokio::test]
async fn hub_skips_a_failing_server_and_runs_the_rest_with_per_role_env() {
    let log = log_path("hub");
    let shared_ok = stdio_spec("chat", &log).with_env("FAKE_MCP_IDENTITY", "company-bot");
    let shared_bad = stdio_spec("broken", &log).with_env("FAKE_MCP_FAIL_ON_START", "1");
    let role_server = stdio_spec("tracker", &log);
    let mut writer_env = BTreeMap::new();
    writer_env.insert("FAKE_MCP_IDENTITY".to_string(), "writer".to_string());
    let mut reviewer_env = BTreeMap::new();
    reviewer_env.insert("FAKE_MCP_IDENTITY".to_string(), "reviewer".to_string());
    let plan = McpHubPlan {
        shared: vec![shared_ok, shared_bad],
        roles: vec![
            RoleMcpServers {
                role: "writer".into(),
                servers: vec![role_server.clone()],
                mcp_env: writer_env,
            },
            RoleMcpServers {
                role: "reviewer".into(),
                servers: vec![role_server],
                mcp_env: reviewer_env,
            },
        ],
    };
    let (hub, failures) = McpHub::start(plan).await;

    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].server, "broken");
    assert_eq!(failures[0].scope, McpScope::Shared);
    assert!(matches!(failures[0].error, McpError::StartFailed { .. }));
    let event = failures[0].to_event();
    assert_eq!(event.event_type.as_str(), "mcp_server_failed");

    assert_eq!(hub.len(), 3);
    let writer_tools = hub.for_role("writer");
    assert_eq!(
        writer_tools.keys().copied().collect::<Vec<_>>(),
        ["chat", "tracker"]
    );
    for (role, text) in [("writer", "draft ready"), ("reviewer", "looks good")] {
        let servers = hub.for_role(role);
        servers["tracker"]
            .call_tool("post_message", json!({"channel": "ISSUE-1", "text": text}))
            .await
            .unwrap();
    }
    hub.shared()["chat"]
        .call_tool(
            "post_message",
            json!({"channel": "C_GEN", "text": "standup"}),
        )
        .await
        .unwrap();
    assert!(
        hub.get(&McpScope::Role("writer".into()), "tracker")
            .is_some()
    );
    assert!(
        hub.get(&McpScope::Role("nobody".into()), "tracker")
            .is_none()
    );

    let calls = tool_calls(&log);
    let by_text = |t: &str| calls.iter().find(|c| c["text"] == t).unwrap()["identity"].clone();
    assert_eq!(by_text("draft ready"), "writer");
    assert_eq!(by_text("looks good"), "reviewer");
    assert_eq!(by_text("standup"), "company-bot");
    hub.shutdown().await;
}

/// A fake server on HTTP, killed when dropped.
struct HttpFake {
    _child: tokio::process::Child,
    url: String,
}

async fn start_http_fake(log: &Path, extra_env: &[(&str, &str)]) -> HttpFake {
    let mut cmd = tokio::process::Command::new(fake_bin());
    cmd.args(["--http", "127.0.0.1:0"])
        .env("FAKE_MCP_LOG", log)
        .env("FAKE_MCP_TEST_TOOLS", "1")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut first = String::new();
    tokio::time::timeout(
        Duration::from_secs(20),
        BufReader::new(stdout).read_line(&mut first),
    )
    .await
    .unwrap()
    .unwrap();
    HttpFake {
        _child: child,
        url: first.trim().to_string(),
    }
}

async fn http_round_trip(sse: bool) {
    let log = log_path(if sse { "http-sse" } else { "http-json" });
    let env: &[(&str, &str)] = if sse { &[("FAKE_MCP_SSE", "1")] } else { &[] };
    let fake = start_http_fake(&log, env).await;
    assert!(fake.url.starts_with("http://127.0.0.1:"), "{}", fake.url);

    let base = McpServerSpec::http("chat-http", &fake.url)
        .with_timeouts(Duration::from_secs(20), Duration::from_secs(20));
    let mut role_env = BTreeMap::new();
    role_env.insert("X-Fake-Mcp-Identity".to_string(), "writer-http".to_string());
    let client = McpClient::connect(&base.for_role(&role_env)).await.unwrap();
    assert_eq!(client.transport(), McpTransport::Http);
    assert_eq!(client.server_info().name, crewlet_fake_mcp::SERVER_NAME);
    assert_eq!(client.list_tools().await.unwrap().len(), 6);
    let r = client
        .call_tool(
            "post_message",
            json!({"channel": "C_WEB", "text": "over http"}),
        )
        .await
        .unwrap();
    assert_eq!(r.text(), "posted to C_WEB as writer-http");
    let calls = tool_calls(&log);
    assert_eq!(calls[0]["identity"], "writer-http");

    // The server forgets every session: the client starts a new one and retries.
    client
        .call_tool("forget_sessions", json!({}))
        .await
        .unwrap();
    let again = client
        .call_tool(
            "post_message",
            json!({"channel": "C_WEB", "text": "after expiry"}),
        )
        .await
        .unwrap();
    assert!(!again.is_error);
    assert_eq!(tool_calls(&log).len(), 2);

    let unknown = client.call_tool("nope", json!({})).await.unwrap_err();
    assert!(
        matches!(unknown, McpError::Rpc { code: -32602, .. }),
        "{unknown}"
    );

    let short = McpServerSpec::http("slow-http", &fake.url)
        .with_timeouts(Duration::from_secs(20), Duration::from_millis(300));
    let slow = McpClient::connect(&short).await.unwrap();
    let err = slow
        .call_tool("sleep", json!({"ms": 5000}))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    client.shutdown().await;
}

#[tokio::test]
async fn http_json_answers_session_and_per_role_headers() {
    http_round_trip(false).await;
}

#[tokio::test]
async fn http_event_stream_answers() {
    http_round_trip(true).await;
}

#[tokio::test]
async fn http_server_not_listening_is_a_clear_start_error() {
    // Bind then drop a listener to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let spec = McpServerSpec::http(
        "offline",
        format!("http://127.0.0.1:{port}/mcp?token=secret"),
    )
    .with_timeouts(Duration::from_secs(10), Duration::from_secs(10));
    let err = McpClient::connect(&spec).await.unwrap_err();
    assert!(matches!(err, McpError::Unreachable { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("offline") && text.contains(&port.to_string()),
        "{text}"
    );
    assert!(!text.contains("secret"), "the query string leaked: {text}");
}

/// Several server processes append to one log at once (as a hub's servers
/// do): every line stays whole, because each is one `write` on an
/// `O_APPEND` file. Long lines make a torn write likely if that ever breaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_sharing_one_log_never_tear_a_line() {
    const SERVERS: usize = 6;
    const POSTS: usize = 40;
    let log = log_path("shared-log");
    let text = "x".repeat(4096);
    let mut clients = Vec::new();
    for i in 0..SERVERS {
        let spec =
            stdio_spec(&format!("s{i}"), &log).with_env("FAKE_MCP_IDENTITY", format!("id-{i}"));
        clients.push(McpClient::connect(&spec).await.unwrap());
    }
    let posts = clients.iter().enumerate().map(|(i, client)| {
        let text = text.clone();
        async move {
            for n in 0..POSTS {
                let args = json!({"channel": format!("C{i}"), "text": format!("{n} {text}")});
                let posted = client.call_tool("post_message", args).await.unwrap();
                assert!(!posted.is_error, "{}", posted.text());
            }
        }
    });
    futures::future::join_all(posts).await;
    let lines = log_lines(&log);
    assert_eq!(
        lines.len(),
        SERVERS * (POSTS + 1),
        "a started line and every post"
    );
    for i in 0..SERVERS {
        let mine = lines
            .iter()
            .filter(|l| l["event"] == "tool_call" && l["identity"] == format!("id-{i}").as_str())
            .count();
        assert_eq!(mine, POSTS, "server {i}");
    }
    for client in clients {
        client.shutdown().await;
    }
}
