//! Webhooks through the embedded API into the engine: a bad signature is
//! refused and publishes nothing; a GitHub delivery sent twice becomes one
//! task, routed to the lead of the unit owning the repository.

mod common;

use std::time::Duration;

use common::*;
use crewlet_engine::RunOptions;
use crewlet_engine::run::run_until;
use crewlet_test_support::fake_llm::FakeLlmServer;
use serde_json::Value;
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(60);

async fn count(base: &str, event_type: &str) -> usize {
    let (status, body) = get(base, &format!("/events?type={event_type}&limit=500")).await;
    assert_eq!(status, 200, "{body}");
    body["events"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_signatures_publish_nothing_and_a_repeated_delivery_is_one_task() {
    let llm = FakeLlmServer::start(happy_turn("acme/app"))
        .await
        .unwrap_or_else(|e| panic!("fake llm: {e}"));
    let dir = temp_dir("webhooks");
    let company = dir.join("company.yaml");
    std::fs::write(
        &company,
        company_yaml(
            "E2E Webhooks",
            &llm.openai_base_url(),
            &dir.join("mcp.jsonl"),
        ),
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

    // A Slack request signed with the wrong secret, and a tampered GitHub body.
    let (body, mut headers) = slack_mention("Ev-bad-1", "C1");
    for h in headers.iter_mut() {
        if h.0 == crewlet_integrations::webhook::slack::SIGNATURE_HEADER {
            h.1 = crewlet_integrations::webhook::slack::signature(b"not-the-secret", "1", &body);
        }
    }
    let (status, answer) = post(&base, "/webhooks/slack/eng", body, &headers).await;
    assert_eq!(status, 401, "{answer}");
    let (body, headers) = github_issue("wrong-secret", "gh-bad-1");
    let (status, answer) = post(&base, "/webhooks/github", body, &headers).await;
    assert_eq!(status, 401, "{answer}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        count(&base, "raw_webhook").await,
        0,
        "a refused webhook is never published"
    );
    assert_eq!(count(&base, "task_created").await, 0);

    // The same delivery twice (GitHub retries): accepted once.
    let (body, headers) = github_issue(GITHUB_SECRET, "gh-delivery-1");
    let (status, first) = post(&base, "/webhooks/github", body.clone(), &headers).await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["accepted"], true, "{first}");
    let (status, second) = post(&base, "/webhooks/github", body, &headers).await;
    assert_eq!(status, 202, "{second}");
    assert_eq!(second["duplicate"], true, "{second}");
    let trace_id = first["trace_id"].as_str().unwrap_or_default().to_owned();

    let events = trace_until(&base, &trace_id, "task_completed", WAIT).await;
    let routed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "external_notification")
        .collect();
    assert_eq!(routed.len(), 1, "{events:?}");
    assert_eq!(routed[0]["payload"]["handle"], "eng");
    assert_eq!(routed[0]["payload"]["rule"], "unit_lead");
    // Give a second task every chance to show up, then count.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(count(&base, "raw_webhook").await, 1);
    assert_eq!(count(&base, "task_created").await, 1);
    assert_eq!(count(&base, "task_started").await, 1);
    assert_eq!(count(&base, "task_completed").await, 1);

    let _ = stop.send(());
    let result = tokio::time::timeout(WAIT, engine).await;
    assert!(matches!(result, Ok(Ok(Ok(())))), "{result:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
