//! The split deployment as real processes on real Pulsar and PostgreSQL:
//! `crewlet config import`, then `crewlet run cfg.yaml` (engine, no API) and
//! `crewlet run api cfg.yaml --port P` side by side. A signed Slack webhook
//! sent to the API process wakes the seat in the engine process; its turn
//! runs against the fake model and posts through the fake MCP server; the
//! API shows the whole trace from the shared database.
//!
//! Isolation: a fresh database and a fresh Pulsar namespace (created in the
//! test through the admin REST API; the engine itself never calls it).

mod common;

use common::*;
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::fake_llm::FakeLlmServer;
use crewlet_test_support::services::pulsar_admin_url;
use serde_json::{Value, json};

const SLACK_SECRET: &str = "split-slack-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhook_to_api_process_runs_a_turn_in_the_engine_process() {
    let pulsar = crewlet_test_support::require!(pulsar);
    let admin_dsn = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin_dsn).await;
    let namespace = format!("e2e-split-{}", uuid::Uuid::new_v4().simple());
    let admin = pulsar_admin_url();
    let http = reqwest::Client::new();
    let created = http
        .put(format!("{admin}/admin/v2/namespaces/public/{namespace}"))
        .json(&json!({}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("pulsar admin: {e}"));
    assert!(
        created.status().is_success(),
        "cannot create namespace: {}",
        created.status()
    );

    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = temp_dir("split");
    let mcp_log = dir.join("mcp.jsonl");
    let fake_mcp = crewlet_fake_mcp::binary_path().unwrap_or_else(|e| panic!("{e}"));
    let config = format!(
        "providers:\n  queue:\n    type: pulsar\n    url: \"{pulsar}\"\n    tenant: public\n    namespace: \"{namespace}\"\n  database:\n    dsn: \"{dsn}\"\napi:\n  host: 127.0.0.1\n  port: 0\n",
        dsn = db.dsn
    );
    std::fs::write(dir.join("cfg.yaml"), config).unwrap_or_else(|e| panic!("{e}"));
    let company = format!(
        r#"name: "Split Co {namespace}"
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{base}", timeout_seconds: 30}}
mcp_servers:
  chat:
    scope: per_role
    command: "{bin}"
    env: {{FAKE_MCP_LOG: "{log}"}}
roles:
  - name: Engineer
    handle: eng
    mcp_servers: [chat]
    mcp_env: {{FAKE_MCP_IDENTITY: eng-bot}}
    integrations:
      slack: {{signing_secret: "{SLACK_SECRET}", bot_user_id: UENG}}
"#,
        base = llm.openai_base_url(),
        bin = fake_mcp.display(),
        log = mcp_log.display(),
    );
    std::fs::write(dir.join("company.yaml"), company).unwrap_or_else(|e| panic!("{e}"));

    let import = crewlet()
        .args(["config", "import", "company.yaml", "--config", "cfg.yaml"])
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        import.status.success(),
        "config import failed: {}{}",
        String::from_utf8_lossy(&import.stdout),
        String::from_utf8_lossy(&import.stderr)
    );
    assert!(String::from_utf8_lossy(&import.stdout).contains("as revision 1"));

    let port = free_port();
    let port_arg = port.to_string();
    let mut engine = Proc::spawn("engine", &dir, &["run", "cfg.yaml"]);
    let mut api = Proc::spawn(
        "api",
        &dir,
        &["run", "api", "cfg.yaml", "--port", &port_arg],
    );
    let base = format!("http://127.0.0.1:{port}");

    wait_for(
        "the engine to run the company",
        &mut [&mut engine, &mut api],
        || async { engine_running(&dir).then_some(()) },
    )
    .await;
    wait_for(
        "the api to be ready",
        &mut [&mut engine, &mut api],
        || async { (get(&base, "/ready").await.0 == 200).then_some(()) },
    )
    .await;

    let (body, headers) = slack_mention(SLACK_SECRET, "Ev-split-1");
    let (status, accepted) = post(&base, "/webhooks/slack/eng", body, &headers).await;
    assert_eq!(status, 200);
    let trace_id = accepted["trace_id"].as_str().unwrap_or_default().to_owned();
    assert!(!trace_id.is_empty(), "{accepted}");

    let events = wait_for(
        "the turn to complete",
        &mut [&mut engine, &mut api],
        || async {
            let (_, body) = get(&base, &format!("/events/trace/{trace_id}")).await;
            let events = body["events"].as_array().cloned().unwrap_or_default();
            // The API process buffers its own writes (flushed every second).
            let done = events.iter().any(|e| e["type"] == "task_completed")
                && events.iter().any(|e| e["type"] == "raw_webhook");
            done.then_some(events)
        },
    )
    .await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    for expected in [
        "raw_webhook",
        "external_notification",
        "task_created",
        "task_started",
        "agent_turn_completed",
        "task_completed",
    ] {
        assert!(kinds.contains(&expected), "{expected} missing: {kinds:?}");
    }
    let calls: Vec<Value> = std::fs::read_to_string(&mcp_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["event"] == "tool_call")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["identity"], "eng-bot");

    assert_eq!(
        engine.stop().await,
        Some(0),
        "engine exit:\n{}",
        engine.log()
    );
    assert_eq!(api.stop().await, Some(0), "api exit:\n{}", api.log());
    assert!(engine.log().contains("org_stopped") || engine.log().contains("engine stopped"));

    let _ = http
        .delete(format!(
            "{admin}/admin/v2/namespaces/public/{namespace}?force=true"
        ))
        .send()
        .await;
    let _ = std::fs::remove_dir_all(&dir);
}
