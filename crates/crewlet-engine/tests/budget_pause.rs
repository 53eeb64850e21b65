//! Budget policies in a running engine: the warning threshold publishes
//! `budget_warning` once, a spent budget fails the turn it stops and
//! pauses the seat (its next task waits in the inbox, the seat shows
//! `paused`), and a reset through the API resumes it at once (a `resume`
//! on the seat's control topic); the waiting task then runs.

mod common;

use std::time::Duration;

use common::*;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);
const TOKEN: &str = "budget-pause-token";

/// Every call costs 20,000 tokens.
fn costly_turn() -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "simple", "steps": [{"intent": "answer"}]}),
            )
            .usage(19_000, 1_000),
        )
        .on(When::any(), Reply::text("done").usage(19_000, 1_000))
}

async fn eng_state(base: &str) -> String {
    let (_, agent) = get(base, "/agents/eng").await;
    agent["state"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spent_budget_pauses_the_seat_until_it_is_reset() {
    let llm = FakeLlmServer::start(costly_turn())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let engine = RunningEngine::start(TOKEN, WAIT).await;
    let base = engine.base.clone();
    let company = format!(
        "name: Budget Co\ntoken_budget: 50000\nproviders:\n  llm:\n    m: {{type: openai-compatible, model: m, base_url: \"{}\"}}\nroles:\n  - {{name: Engineer, handle: eng}}\n",
        llm.openai_base_url()
    );
    let resp = reqwest::Client::new()
        .put(format!("{base}/config"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/yaml")
        .header("x-summary", "budget test")
        .body(company)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resp.status().as_u16(), 201);
    wait_ready(&base, WAIT).await;

    // Task 1: 40,000 of 50,000, past the 80% warning.
    let first = post_agent_task(&base, TOKEN, "eng", "first job").await;
    wait_for("the first job completed", WAIT, || async {
        task_has(&base, "task_completed", &first)
            .await
            .then_some(())
    })
    .await;
    let warnings = api_events(&base, "budget_warning").await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0]["payload"]["scope"], "org");
    assert_eq!(warnings[0]["payload"]["max_tokens"], 50_000);

    // Task 2 runs out: it fails, and the seat pauses.
    let second = post_agent_task(&base, TOKEN, "eng", "second job").await;
    wait_for("the second job failed", WAIT, || async {
        task_has(&base, "task_failed", &second).await.then_some(())
    })
    .await;
    assert_eq!(api_events(&base, "budget_exhausted").await.len(), 1);
    let (_, budgets) = get(&base, "/budgets").await;
    assert_eq!(budgets["org"]["state"], "exhausted", "{budgets}");

    // Task 3 waits in the inbox while the seat is paused.
    let third = post_agent_task(&base, TOKEN, "eng", "third job").await;
    wait_for("eng paused", WAIT, || async {
        (eng_state(&base).await == "paused").then_some(())
    })
    .await;
    assert!(!task_has(&base, "task_completed", &third).await);
    assert!(!task_has(&base, "task_failed", &third).await);

    // A reset resumes it: the waiting task runs.
    let (status, body) = call_api(
        reqwest::Method::POST,
        format!("{base}/budgets/org/reset"),
        TOKEN,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    wait_for("the third job completed", WAIT, || async {
        task_has(&base, "task_completed", &third)
            .await
            .then_some(())
    })
    .await;
    assert_eq!(eng_state(&base).await, "idle");
    let (_, budgets) = get(&base, "/budgets").await;
    assert_eq!(budgets["org"]["durable_used"], 40_000, "{budgets}");

    engine.stop(WAIT).await;
}
