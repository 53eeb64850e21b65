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
use serde_json::Value;

const SLACK_SECRET: &str = "split-slack-secret";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhook_to_api_process_runs_a_turn_in_the_engine_process() {
    let pulsar = crewlet_test_support::require!(pulsar);
    let admin_dsn = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin_dsn).await;
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let base_url = llm.openai_base_url();
    let logs = [("RUST_LOG", "info,crewlet_engine=debug")];
    let mut split = SplitDeployment::start(SplitOptions {
        name: "split",
        pulsar_url: &pulsar,
        dsn: &db.dsn,
        llm_base_url: &base_url,
        slack_secret: SLACK_SECRET,
        engine_env: &logs,
        api_env: &logs,
    })
    .await;
    let base = split.base.clone();

    let (body, headers) = slack_mention(SLACK_SECRET, "Ev-split-1");
    let (status, accepted) = post(&base, "/webhooks/slack/eng", body, &headers).await;
    assert_eq!(status, 200);
    let trace_id = accepted["trace_id"].as_str().unwrap_or_default().to_owned();
    assert!(!trace_id.is_empty(), "{accepted}");

    let events = split.completed_trace(&trace_id).await;
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
    let calls: Vec<Value> = crewlet_fake_mcp::read_log(&split.mcp_log)
        .unwrap_or_else(|e| panic!("fake mcp log: {e}"))
        .into_iter()
        .filter(|l| l["event"] == "tool_call")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["identity"], "eng-bot");

    split.stop_cleanly().await;
    assert!(
        split.engine.log().contains("org_stopped") || split.engine.log().contains("engine stopped")
    );

    split.clean_up().await;
}
