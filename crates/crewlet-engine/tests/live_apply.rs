//! A new company revision is applied without a restart: a turn already
//! running finishes on the revision it started with, the seat's next task
//! runs on the new one, an added seat is spawned, a removed one terminated,
//! a changed one announced `role_updated`, and `config_revision_applied`
//! says what changed. One process, memory queue and stores, the fake model.

mod common;

use std::time::Duration;

use common::*;
use crewlet_test_support::fake_llm::FakeLlmServer;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(90);
const TOKEN: &str = "live-apply-token";

fn company(base_url: &str, eng_goal: &str, others: &[&str]) -> String {
    let mut y = format!(
        "name: Live Co\nproviders:\n  llm:\n    m: {{type: openai-compatible, model: m, base_url: \"{base_url}\"}}\nroles:\n  - {{name: Engineer, handle: eng, goal: \"{eng_goal}\"}}\n"
    );
    for h in others {
        y.push_str(&format!("  - {{name: Seat {h}, handle: {h}}}\n"));
    }
    y
}

async fn send(method: reqwest::Method, url: String, body: Option<(&str, String)>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(TOKEN)
        .header("x-summary", "live apply test");
    if let Some((content_type, body)) = body {
        req = req.header("content-type", content_type).body(body);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("request failed: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn put_company(base: &str, yaml: String) {
    let (status, body) = send(
        reqwest::Method::PUT,
        format!("{base}/config"),
        Some(("application/yaml", yaml)),
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

async fn agents(base: &str) -> Vec<(String, String)> {
    let (_, agents) = get(base, "/agents").await;
    let mut out: Vec<(String, String)> = agents
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    (
                        x["handle"].as_str().unwrap_or("").to_owned(),
                        x["state"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The text of every model request that carried `marker`.
fn requests_with(llm: &FakeLlmServer, marker: &str) -> Vec<String> {
    llm.requests()
        .into_iter()
        .map(|r| r.body.to_string())
        .filter(|b| b.contains(marker))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_revision_is_applied_without_a_restart() {
    // Every model call of the first task takes a while, so the revision
    // lands while it runs.
    let llm = FakeLlmServer::start(direct_turn(Duration::from_millis(1500)))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let base_url = llm.openai_base_url();
    let engine = RunningEngine::start(TOKEN, WAIT).await;
    let base = engine.base.clone();
    put_company(&base, company(&base_url, "Goal one", &["ceo"])).await;
    wait_for("both seats idle on revision 1", WAIT, || async {
        let a = agents(&base).await;
        (a == [("ceo".into(), "idle".into()), ("eng".into(), "idle".into())]).then_some(())
    })
    .await;

    let first = post_agent_task(&base, TOKEN, "eng", "first job").await;
    wait_for("eng working on the first job", WAIT, || async {
        agents(&base)
            .await
            .contains(&("eng".into(), "working".into()))
            .then_some(())
    })
    .await;

    // Revision 2: eng's goal changes, ceo goes, qa comes.
    put_company(&base, company(&base_url, "Goal two", &["qa"])).await;
    let applied = wait_for("config_revision_applied", WAIT, || async {
        api_events(&base, "config_revision_applied")
            .await
            .first()
            .cloned()
    })
    .await;
    assert_eq!(applied["payload"]["revision_id"], 2, "{applied}");
    assert_eq!(applied["payload"]["previous_revision_id"], 1);
    assert_eq!(applied["payload"]["added"], json!(["qa"]));
    assert_eq!(applied["payload"]["removed"], json!(["ceo"]));
    assert_eq!(applied["payload"]["updated"], json!(["eng"]));

    // The running turn was not interrupted: it ends, on revision 1.
    wait_for("the first job completed", WAIT, || async {
        task_has(&base, "task_completed", &first)
            .await
            .then_some(())
    })
    .await;
    let first_calls = requests_with(&llm, "first job");
    assert!(!first_calls.is_empty());
    assert!(
        first_calls
            .iter()
            .all(|b| b.contains("Goal one") && !b.contains("Goal two")),
        "every call of the running turn saw revision 1"
    );

    // The seat's next task runs on revision 2.
    let second = post_agent_task(&base, TOKEN, "eng", "second job").await;
    wait_for("the second job completed", WAIT, || async {
        task_has(&base, "task_completed", &second)
            .await
            .then_some(())
    })
    .await;
    let second_calls = requests_with(&llm, "second job");
    assert!(!second_calls.is_empty());
    assert!(
        second_calls
            .iter()
            .all(|b| b.contains("Goal two") && !b.contains("Goal one")),
        "the next turn saw revision 2"
    );

    wait_for("eng and qa idle, ceo gone", WAIT, || async {
        let a = agents(&base).await;
        (a == [("eng".into(), "idle".into()), ("qa".into(), "idle".into())]).then_some(())
    })
    .await;
    let role_updated = api_events(&base, "role_updated").await;
    assert_eq!(role_updated.len(), 1, "{role_updated:?}");
    assert_eq!(role_updated[0]["payload"]["handle"], "eng");
    assert_eq!(
        role_updated[0]["payload"]["changed_fields"],
        json!(["role"])
    );
    let terminated = wait_for("ceo terminated", WAIT, || async {
        let t = api_events(&base, "agent_terminated").await;
        (!t.is_empty()).then_some(t)
    })
    .await;
    assert_eq!(terminated.len(), 1, "only the removed seat: {terminated:?}");
    assert_eq!(terminated[0]["payload"]["handle"], "ceo");
    assert_eq!(terminated[0]["payload"]["reason"], "removed");
    let spawned: Vec<String> = api_events(&base, "agent_spawned")
        .await
        .iter()
        .filter_map(|e| e["payload"]["handle"].as_str().map(str::to_owned))
        .collect();
    let mut spawned_sorted = spawned.clone();
    spawned_sorted.sort();
    assert_eq!(
        spawned_sorted,
        ["ceo", "eng", "qa"],
        "eng is not spawned again"
    );
    assert_eq!(
        api_events(&base, "org_started").await.len(),
        1,
        "no restart"
    );
    assert!(
        api_events(&base, "org_stopped").await.is_empty(),
        "no restart"
    );

    engine.stop(WAIT).await;
}
