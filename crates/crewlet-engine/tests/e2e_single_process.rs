//! One process on the embedded default (memory queue and stores): a signed
//! Slack webhook to `/webhooks/slack/eng` wakes the Engineer, whose turn runs
//! against the fake model server and posts through the fake MCP server with
//! the seat's own identity; the trace and the token breakdown tell the story.

mod common;

use std::time::Duration;

use common::*;
use crewlet_engine::RunOptions;
use crewlet_engine::run::run_until;
use crewlet_test_support::fake_llm::FakeLlmServer;
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slack_webhook_to_turn_to_mcp_in_one_trace() {
    let llm = FakeLlmServer::start(happy_turn("C123"))
        .await
        .unwrap_or_else(|e| panic!("fake llm: {e}"));
    let dir = temp_dir("single");
    let mcp_log_path = dir.join("mcp.jsonl");
    let company = dir.join("company.yaml");
    std::fs::write(
        &company,
        company_yaml("E2E Single", &llm.openai_base_url(), &mcp_log_path),
    )
    .unwrap_or_else(|e| panic!("{e}"));

    let port = free_port();
    let bootstrap = bootstrap(port);
    let options = RunOptions {
        import_company: Some(company),
        ..RunOptions::default()
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let engine = tokio::spawn(run_until(bootstrap, options, async move {
        let _ = stopped.await;
    }));
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(&base, WAIT).await;

    let (_, agents) = get(&base, "/agents").await;
    let eng = agents
        .as_array()
        .and_then(|a| a.iter().find(|x| x["handle"] == "eng").cloned())
        .unwrap_or_default();
    assert_eq!(eng["state"], "idle", "{agents}");
    let (_, tools) = get(&base, "/tools?handle=eng").await;
    assert!(tools.to_string().contains("chat__post_message"), "{tools}");

    let (body, headers) = slack_mention("Ev-single-1", "C123");
    let (status, accepted) = post(&base, "/webhooks/slack/eng", body, &headers).await;
    assert_eq!(status, 200, "{accepted}");
    let trace_id = accepted["trace_id"].as_str().unwrap_or_default().to_owned();
    assert!(!trace_id.is_empty(), "{accepted}");

    let events = trace_until(&base, &trace_id, "task_completed", WAIT).await;
    let kinds = types(&events);
    for expected in [
        "raw_webhook",
        "external_notification",
        "task_created",
        "task_started",
        "agent_phase_started",
        "agent_phase_completed",
        "agent_turn_completed",
        "task_completed",
    ] {
        assert!(
            kinds.iter().any(|k| k == expected),
            "{expected} missing from the trace: {kinds:?}"
        );
    }
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("raw_webhook"),
        "{kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| k == "agent_turn_progress"),
        "progress is never stored"
    );
    // Every event is in the webhook's trace, and the task's events hang under it.
    let webhook = &events[0];
    let task_created = events
        .iter()
        .find(|e| e["type"] == "task_created")
        .cloned()
        .unwrap_or_default();
    let task_started = events
        .iter()
        .find(|e| e["type"] == "task_started")
        .cloned()
        .unwrap_or_default();
    assert!(events.iter().all(|e| e["trace_id"] == trace_id.as_str()));
    assert!(webhook["parent_span_id"].is_null());
    assert_eq!(
        task_started["parent_span_id"], task_created["span_id"],
        "the turn continues the task's span"
    );
    assert_eq!(task_created["task_id"], task_started["task_id"]);
    let turn = events
        .iter()
        .find(|e| e["type"] == "agent_turn_completed")
        .cloned()
        .unwrap_or_default();
    assert_eq!(turn["payload"]["decision"], "done", "{turn}");

    // The fake MCP server recorded the post, as the seat itself.
    let calls: Vec<_> = mcp_log(&mcp_log_path)
        .into_iter()
        .filter(|l| l["event"] == "tool_call")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["tool"], "post_message");
    assert_eq!(calls[0]["identity"], "eng-bot");
    assert_eq!(calls[0]["channel"], "C123");

    // Exactly the tokens the fake server reported.
    let (status, breakdown) = get(&base, "/tokens/breakdown?since_days=1").await;
    assert_eq!(status, 200, "{breakdown}");
    assert_eq!(
        breakdown["totals"]["input_tokens"], TURN_INPUT,
        "{breakdown}"
    );
    assert_eq!(
        breakdown["totals"]["output_tokens"], TURN_OUTPUT,
        "{breakdown}"
    );
    assert_eq!(
        breakdown["totals"]["total_tokens"],
        TURN_INPUT + TURN_OUTPUT
    );
    // The rollup counts LLM completions (plan, a tool call and the answer
    // after it in execute, review), not phases.
    assert_eq!(breakdown["totals"]["calls"], 4, "{breakdown}");
    let by_agent = breakdown["by_agent"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(by_agent.len(), 1, "{breakdown}");
    assert_eq!(by_agent[0]["agent_id"], eng["id"]);

    let _ = stop.send(());
    let result = tokio::time::timeout(WAIT, engine).await;
    assert!(matches!(result, Ok(Ok(Ok(())))), "{result:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
