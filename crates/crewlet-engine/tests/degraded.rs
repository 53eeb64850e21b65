//! The engine keeps running when parts of the company cannot: an MCP server
//! that fails to start is skipped with `mcp_server_failed`; a model whose
//! key is not set fails turns with `llm_unavailable`, and the seat goes back
//! to idle for the next task.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use crewlet_api::EngineView;
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_engine::{Backends, EngineBuilder, EngineOptions, SeatState};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_mcp_server_is_skipped_and_the_rest_keep_working() {
    let dir = temp_dir("mcp-fail");
    let log = dir.join("mcp.jsonl");
    let yaml = format!(
        r#"name: MCP Co
providers:
  llm:
    fake: {{type: openai-compatible, model: m, base_url: "http://127.0.0.1:9/v1"}}
mcp_servers:
  - name: broken
    command: "{bin}"
    env: {{FAKE_MCP_FAIL_ON_START: "1"}}
    startup_timeout_seconds: 20
  - name: missing-secret
    transport: http
    url: "http://127.0.0.1:9/mcp"
    headers: {{Authorization: "Bearer ${{CREWLET_TEST_UNSET_MCP_TOKEN}}"}}
  - name: chat
    shared: false
    command: "{bin}"
    env: {{FAKE_MCP_LOG: "{log}"}}
    startup_timeout_seconds: 20
roles:
  # Credentials for the per-seat `chat` server are what start the writer's
  # own instance of it (the reader has none, so it gets none).
  - name: Writer
    handle: writer
    mcp_env: {{chat: {{FAKE_MCP_IDENTITY: writer-bot}}}}
  - name: Reader
    handle: reader
"#,
        bin = fake_mcp_bin().display(),
        log = log.display(),
    );
    let company = Company::from_yaml("mcp company", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let backends = Backends::memory();
    let options = EngineOptions {
        env: path_only(),
        ..EngineOptions::default()
    };
    let engine = EngineBuilder::new(company, &backends)
        .options(options)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let failed = events_of(&backends.stores, EventType::McpServerFailed).await;
    let mut servers: Vec<String> = failed
        .iter()
        .filter_map(|e| e.payload["server"].as_str().map(str::to_owned))
        .collect();
    servers.sort();
    assert_eq!(servers, ["broken", "missing-secret"], "{failed:?}");
    let missing = failed
        .iter()
        .find(|e| e.payload["server"] == "missing-secret")
        .map(|e| e.payload["error"].to_string())
        .unwrap_or_default();
    assert!(
        missing.contains("CREWLET_TEST_UNSET_MCP_TOKEN"),
        "{missing}"
    );

    // The per-role server runs for its seat only, named after its server.
    let names = |handle: &str| -> Vec<String> {
        engine
            .tools(Some(handle))
            .into_iter()
            .map(|t| t.name)
            .collect()
    };
    assert!(
        names("writer").contains(&"chat__post_message".to_owned()),
        "{:?}",
        names("writer")
    );
    assert!(
        !names("reader").iter().any(|n| n.starts_with("chat__")),
        "{:?}",
        names("reader")
    );
    assert!(names("reader").contains(&"lookup_colleague".to_owned()));
    let post = engine
        .tools(Some("writer"))
        .into_iter()
        .find(|t| t.name == "chat__post_message")
        .unwrap_or_else(|| panic!("no chat__post_message"));
    assert_eq!(post.provider, "chat");
    assert!(
        !post.annotations.read_only && !post.annotations.destructive && post.annotations.open_world
    );
    let read = engine
        .tools(Some("writer"))
        .into_iter()
        .find(|t| t.name == "chat__read_thread")
        .unwrap_or_else(|| panic!("no chat__read_thread"));
    assert!(read.annotations.read_only);

    // The fake server started as the writer.
    let started: Vec<_> = mcp_log(&log)
        .into_iter()
        .filter(|l| l["event"] == "started")
        .collect();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["identity"], "writer-bot");

    engine.shutdown().await;
    backends.queue.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_model_key_turns_fail_with_llm_unavailable_and_the_engine_stays_up() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/quickstart/company.yaml"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let mut company = Company::from_yaml("quickstart", &text).unwrap_or_else(|e| panic!("{e}"));
    // Without its local fallback (local_model_turn.rs runs that): the
    // OpenAI provider alone, and no model files.
    company.providers.llm.shift_remove("local");
    company.providers.embeddings = None;
    let backends = Backends::memory();
    let options = EngineOptions {
        // No OPENAI_API_KEY, whatever the test machine has.
        env: Arc::new(|_: &str| None),
        stream_progress: false,
        ..EngineOptions::default()
    };
    let engine = EngineBuilder::new(company, &backends)
        .options(options)
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(engine.is_ready());
    let task = engine
        .assign("eng", "test", "fix the build")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let failed = wait_for("task_failed", WAIT, || async {
        events_of(&backends.stores, EventType::TaskFailed)
            .await
            .into_iter()
            .find(|e| e.task_id.as_deref() == Some(task.as_str()))
    })
    .await;
    assert_eq!(failed.payload["reason"], "llm_unavailable", "{failed:?}");
    let unavailable = events_of(&backends.stores, EventType::LlmUnavailable).await;
    assert!(!unavailable.is_empty());
    assert!(
        unavailable[0]
            .payload
            .to_string()
            .contains("OPENAI_API_KEY"),
        "the reason names the variable: {:?}",
        unavailable[0].payload
    );
    wait_for("eng back to idle", WAIT, || async {
        (engine.agent_state("eng") == Some(SeatState::Idle)).then_some(())
    })
    .await;
    assert!(engine.is_ready());
    // Humans are never spawned.
    assert_eq!(engine.agent_state("founder"), None);
    assert!(engine.assign("founder", "test", "x").await.is_err());
    engine.shutdown().await;
    backends.queue.shutdown().await;
}
