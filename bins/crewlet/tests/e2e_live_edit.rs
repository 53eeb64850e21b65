//! A live edit across two processes on real Pulsar and PostgreSQL: the
//! engine (`crewlet run cfg.yaml`) and the API (`crewlet run api`) side by
//! side. A role edited through the API process (`PUT /config/roles/eng`)
//! reaches the engine process with no restart (nudged through the queue,
//! the database being the source of truth); the turn that was running
//! when the edit landed finishes on the old revision, and the seat's next
//! turn runs on the new one.

mod common;

use std::time::{Duration, Instant};

use common::*;
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use serde_json::{Value, json};

const TOKEN: &str = "live-edit-admin-token-7Rk2";

/// A turn that needs no tools, each model call slow enough for the edit to
/// land while the first one runs.
fn slow_direct_turn() -> Script {
    let delay = Duration::from_millis(1500);
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "simple", "steps": [{"intent": "answer"}]}),
            )
            .usage(10, 5)
            .delay(delay),
        )
        .on(When::any(), Reply::text("done").usage(10, 5).delay(delay))
}

async fn send(method: reqwest::Method, url: String, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(TOKEN)
        .header("x-summary", "live edit")
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("request failed: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn events(base: &str, event_type: &str) -> Vec<Value> {
    let (_, body) = get(base, &format!("/events?type={event_type}&limit=200")).await;
    body["events"].as_array().cloned().unwrap_or_default()
}

fn calls_with(llm: &FakeLlmServer, marker: &str) -> Vec<String> {
    llm.requests()
        .into_iter()
        .map(|r| r.body.to_string())
        .filter(|b| b.contains(marker))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_role_edited_through_the_api_process_is_live_in_the_engine_process() {
    let pulsar = crewlet_test_support::require!(pulsar);
    let admin_dsn = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin_dsn).await;
    let llm = FakeLlmServer::start(slow_direct_turn())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let base_url = llm.openai_base_url();
    let logs = [("RUST_LOG", "info")];
    let mut split = SplitDeployment::start(SplitOptions {
        name: "live-edit",
        pulsar_url: &pulsar,
        dsn: &db.dsn,
        llm_base_url: &base_url,
        slack_secret: "live-edit-slack-secret",
        engine_env: &logs,
        api_env: &logs,
        api_token: Some(TOKEN),
    })
    .await;
    let base = split.base.clone();

    // A task through the API process; the engine process runs it.
    let (status, first) = send(
        reqwest::Method::POST,
        format!("{base}/agents/eng/tasks"),
        json!({"text": "first job"}),
    )
    .await;
    assert_eq!(status, 202, "{first}");
    let first = first["task_id"].as_str().unwrap_or_default().to_owned();
    wait_for(
        "the first turn to call the model",
        &mut [&mut split.engine, &mut split.api],
        || async { (!calls_with(&llm, "first job").is_empty()).then_some(()) },
    )
    .await;

    // The edit, through the API process, while that turn runs.
    let (status, body) = send(
        reqwest::Method::PUT,
        format!("{base}/config/roles/eng"),
        json!({"goal": "Goal two"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let edited = Instant::now();
    let applied = wait_for(
        "config_revision_applied from the engine process",
        &mut [&mut split.engine, &mut split.api],
        || async {
            events(&base, "config_revision_applied")
                .await
                .first()
                .cloned()
        },
    )
    .await;
    eprintln!(
        "live edit: applied in the engine {:?} after the PUT answered",
        edited.elapsed()
    );
    assert_eq!(applied["payload"]["revision_id"], 2, "{applied}");
    assert_eq!(applied["payload"]["updated"], json!(["eng"]));
    assert_eq!(applied["payload"]["added"], json!([]));
    assert_eq!(applied["payload"]["removed"], json!([]));

    // The running turn finishes, on revision 1 from start to end.
    wait_for(
        "the first task to complete",
        &mut [&mut split.engine, &mut split.api],
        || async {
            events(&base, "task_completed")
                .await
                .iter()
                .any(|e| e["task_id"] == first)
                .then_some(())
        },
    )
    .await;
    let first_calls = calls_with(&llm, "first job");
    assert!(
        first_calls.len() >= 2,
        "plan and answer: {}",
        first_calls.len()
    );
    assert!(
        first_calls.iter().all(|b| !b.contains("Goal two")),
        "the running turn saw the old revision only"
    );

    // The seat's next task runs on revision 2.
    let (status, second) = send(
        reqwest::Method::POST,
        format!("{base}/agents/eng/tasks"),
        json!({"text": "second job"}),
    )
    .await;
    assert_eq!(status, 202, "{second}");
    let second = second["task_id"].as_str().unwrap_or_default().to_owned();
    wait_for(
        "the second task to complete",
        &mut [&mut split.engine, &mut split.api],
        || async {
            events(&base, "task_completed")
                .await
                .iter()
                .any(|e| e["task_id"] == second)
                .then_some(())
        },
    )
    .await;
    let second_calls = calls_with(&llm, "second job");
    assert!(!second_calls.is_empty());
    assert!(
        second_calls.iter().all(|b| b.contains("Goal two")),
        "the next turn saw the new revision"
    );

    // No restart: one org_started, no org_stopped, eng never re-spawned.
    assert_eq!(events(&base, "org_started").await.len(), 1);
    assert!(events(&base, "org_stopped").await.is_empty());
    assert_eq!(events(&base, "agent_spawned").await.len(), 1);
    let updated = events(&base, "role_updated").await;
    assert_eq!(updated.len(), 1, "{updated:?}");
    assert_eq!(updated[0]["payload"]["handle"], "eng");
    assert!(
        split.engine.log().contains("applying it without a restart"),
        "{}",
        split.engine.log()
    );

    split.stop_cleanly().await;
    split.clean_up().await;
}
