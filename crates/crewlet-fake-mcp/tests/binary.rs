//! The server binary itself, over stdio. This file also makes `cargo test`
//! build the binary before any test runs (a package's binaries are built for
//! its integration tests), so the tests of other crates find it beside their
//! own executables instead of building it from inside a running test.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_crewlet-fake-mcp");

#[test]
fn answers_initialize_and_records_a_post_over_stdio() {
    let dir = std::env::temp_dir().join(format!("crewlet-fake-mcp-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let log = dir.join("calls.jsonl");
    let _ = std::fs::remove_file(&log);
    let mut child = Command::new(BIN)
        .env("FAKE_MCP_LOG", &log)
        .env("FAKE_MCP_IDENTITY", "bin-test")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {BIN}: {e}"));
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        panic!("no pipes");
    };
    let mut answers = BufReader::new(stdout).lines();
    let mut ask = |request: Value| -> Value {
        writeln!(stdin, "{request}").unwrap_or_else(|e| panic!("write: {e}"));
        let line = answers
            .next()
            .unwrap_or_else(|| panic!("no answer to {request}"))
            .unwrap_or_else(|e| panic!("read: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let init = ask(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": crewlet_fake_mcp::DEFAULT_PROTOCOL, "capabilities": {},
        "clientInfo": {"name": "binary-test", "version": "0"}}}),
    );
    assert_eq!(
        init["result"]["serverInfo"]["name"],
        crewlet_fake_mcp::SERVER_NAME
    );
    let posted = ask(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "post_message", "arguments": {"channel": "C1", "text": "hi"}}}),
    );
    assert_eq!(posted["result"]["isError"], false, "{posted}");
    let _ = child.kill();
    let _ = child.wait();

    let lines = crewlet_fake_mcp::read_log(&log).unwrap_or_else(|e| panic!("{e}"));
    let calls: Vec<&Value> = lines.iter().filter(|l| l["event"] == "tool_call").collect();
    assert_eq!(calls.len(), 1, "{lines:?}");
    assert_eq!(calls[0]["identity"], "bin-test");
    assert_eq!(calls[0]["text"], "hi");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fails_on_start_when_asked() {
    let out = Command::new(BIN)
        .env("FAKE_MCP_FAIL_ON_START", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("spawn {BIN}: {e}"));
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("failing on start"));
}
