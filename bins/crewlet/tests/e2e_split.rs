//! The split deployment as real processes on real Pulsar and PostgreSQL:
//! `crewlet config import`, then `crewlet run cfg.yaml` (engine, no API) and
//! `crewlet run api cfg.yaml --port P` side by side. A signed Slack webhook
//! sent to the API process wakes the seat in the engine process; its turn
//! runs against the fake model and posts through the fake MCP server; the
//! API shows the whole trace from the shared database, and its live stream
//! (`WS /ws/stream`, `/stream/snapshot`) follows the turn the other process
//! runs: phases in order, the streamed response, the seat working then idle.
//!
//! Isolation: a fresh database and a fresh Pulsar namespace (created in the
//! test through the admin REST API; the engine itself never calls it).

mod common;

use common::*;
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::fake_llm::FakeLlmServer;
use futures::StreamExt;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

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
        api_token: None,
    })
    .await;
    let base = split.base.clone();

    // The API process's live stream, opened before the work arrives.
    let ws_url = format!("{}/ws/stream", base.replacen("http", "ws", 1));
    let (mut socket, _) = tokio_tungstenite::connect_async(ws_url)
        .await
        .unwrap_or_else(|e| panic!("connecting the live stream: {e}"));
    let live = tokio::spawn(async move {
        let mut frames: Vec<Value> = Vec::new();
        let mut types = std::collections::BTreeSet::new();
        let mut eng_state = String::new();
        while let Some(msg) = socket.next().await {
            let Ok(Message::Text(text)) = msg else {
                continue;
            };
            let Ok(frame) = serde_json::from_str::<Value>(text.as_str()) else {
                continue;
            };
            // Each event type is a topic of its own on Pulsar, read by its
            // own reader: types interleave in no fixed order (and topics
            // new to this namespace are found by the next listing). Read
            // until every type of the turn came and eng is idle again.
            if frame["kind"] == "event" {
                types.insert(frame["data"]["type"].as_str().unwrap_or("").to_owned());
            }
            if frame["kind"] == "seat" && frame["data"]["handle"] == "eng" {
                eng_state = frame["data"]["state"].as_str().unwrap_or("").to_owned();
            }
            frames.push(frame);
            let all = [
                "task_started",
                "agent_phase_started",
                "agent_turn_progress",
                "task_completed",
            ]
            .iter()
            .all(|t| types.contains(*t));
            if all && eng_state == "idle" {
                break;
            }
        }
        frames
    });

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
    // The API process saw the turn live, though the engine ran it.
    let frames = tokio::time::timeout(std::time::Duration::from_secs(120), live)
        .await
        .unwrap_or_else(|_| panic!("the live stream never showed the whole turn and eng idle"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(frames[0]["kind"], "snapshot", "{:?}", frames.first());
    let mut of_trace: Vec<&Value> = frames
        .iter()
        .filter(|f| f["kind"] == "event" && f["data"]["trace_id"] == trace_id.as_str())
        .collect();
    // Ids are time-ordered: the order the engine made them in.
    of_trace.sort_by(|a, b| {
        let id = |f: &&Value| f["data"]["id"].as_str().unwrap_or("").to_owned();
        id(a).cmp(&id(b))
    });
    let phases: Vec<&str> = of_trace
        .iter()
        .filter(|f| f["data"]["type"] == "agent_phase_started")
        .filter_map(|f| f["data"]["payload"]["phase"].as_str())
        .collect();
    assert!(
        phases.starts_with(&["plan", "execute"]) && phases.last() == Some(&"review"),
        "phases in order: {phases:?}"
    );
    assert!(
        of_trace
            .iter()
            .any(|f| f["data"]["type"] == "agent_turn_progress"),
        "the streamed response reached the API process"
    );
    let sequence: Vec<String> = frames
        .iter()
        .map(|f| match f["kind"].as_str() {
            Some("event") => format!("event:{}", f["data"]["type"].as_str().unwrap_or("?")),
            Some("seat") => format!("seat:{}", f["data"]["state"].as_str().unwrap_or("?")),
            other => other.unwrap_or("?").to_owned(),
        })
        .collect();
    eprintln!("live frames on the api process: {sequence:?}");
    let states: Vec<&str> = frames
        .iter()
        .filter(|f| f["kind"] == "seat" && f["data"]["handle"] == "eng")
        .filter_map(|f| f["data"]["state"].as_str())
        .collect();
    assert!(
        states.contains(&"working") && states.last() == Some(&"idle"),
        "eng's state as the API process saw it: {states:?}"
    );
    let working_phases: Vec<&str> = frames
        .iter()
        .filter(|f| f["kind"] == "seat" && f["data"]["handle"] == "eng")
        .filter_map(|f| f["data"]["turn"]["phase"].as_str())
        .collect();
    assert!(working_phases.contains(&"execute"), "{working_phases:?}");
    let (status, snap) = get(&base, "/stream/snapshot").await;
    assert_eq!(status, 200);
    let eng = snap["seats"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["handle"] == "eng"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(eng["state"], "idle", "{snap}");
    assert!(snap["today"]["turns"].as_u64().unwrap_or(0) >= 1, "{snap}");
    assert!(
        snap["today"]["tasks_completed"].as_u64().unwrap_or(0) >= 1,
        "{snap}"
    );

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
