//! `POST /agents/{handle}/tasks`: a task lands on the seat's durable inbox
//! (and its copy on the event stream) in a trace of its own; bad bodies,
//! unknown or human seats and missing tokens are refused with reasons and
//! post nothing; an `Idempotency-Key` posts once.

mod common;

use common::{Harness, json_of};
use crewlet_core::EventType;
use crewlet_core::payload::{TaskPriority, TaskRequest};
use crewlet_queue::topics;

const HUMAN_CO: &str = r#"
name: Test Co
providers:
  llm:
    main:
      type: openai
      model: gpt-test
      api_keys: ["${OPENAI_API_KEY}"]
roles:
  - name: CEO
    handle: ceo
  - name: Founder
    handle: founder
    kind: human
    contact:
      email: founder@example.com
"#;

fn inbox(h: &Harness, handle: &str) -> Vec<crewlet_core::Event> {
    h.published.on(&topics::agent_inbox(handle).topic)
}

#[tokio::test]
async fn a_task_lands_on_the_inbox_in_its_own_trace() {
    let h = Harness::start().await;
    let r = h
        .authed(h.http.post(h.url("/agents/eng/tasks")))
        .json(&serde_json::json!({
            "text": "Write the release notes for 1.4.",
            "title": "Release notes",
            "priority": "high"
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let body = json_of(r).await;
    let task_id = body["task_id"].as_str().unwrap().to_owned();
    let trace_id = body["trace_id"].as_str().unwrap().to_owned();
    assert_eq!(body["handle"], "eng");
    assert_eq!(body["duplicate"], false);

    let posted = inbox(&h, "eng");
    assert_eq!(posted.len(), 1, "one task on eng's inbox");
    let event = &posted[0];
    assert_eq!(event.event_type, EventType::TaskCreated);
    assert_eq!(event.task_id.as_deref(), Some(task_id.as_str()));
    assert_eq!(
        event.trace().map(|t| t.trace_id.to_string()),
        Some(trace_id)
    );
    assert_eq!(event.agent_handle(), Some("eng"));
    let request = TaskRequest::from_event(event).unwrap();
    assert_eq!(request.content, "Write the release notes for 1.4.");
    assert_eq!(request.title.as_deref(), Some("Release notes"));
    assert_eq!(request.priority, Some(TaskPriority::High));
    assert_eq!(request.source, "api");
    // The same event, same id, on the stream the store and live views read.
    let mirrored = h.published.on(&topics::events(&EventType::TaskCreated));
    assert_eq!(
        mirrored.iter().map(|e| e.id).collect::<Vec<_>>(),
        [event.id]
    );
    assert!(inbox(&h, "cto").is_empty());

    // A second task is a second trace.
    let r = h
        .authed(h.http.post(h.url("/agents/eng/tasks")))
        .json(&serde_json::json!({"text": "And the changelog."}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert_ne!(json_of(r).await["trace_id"], body["trace_id"]);
    h.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_with_reasons_and_post_nothing() {
    let h = Harness::start().await;
    let post =
        |path: &str, body: serde_json::Value| h.authed(h.http.post(h.url(path))).json(&body).send();
    let cases = [
        (
            "/agents/eng/tasks",
            serde_json::json!({"text": "  "}),
            400,
            "empty",
        ),
        (
            "/agents/eng/tasks",
            serde_json::json!({"txt": "x"}),
            400,
            "unknown field",
        ),
        (
            "/agents/eng/tasks",
            serde_json::json!({"text": "x", "priority": "asap"}),
            400,
            "unknown variant",
        ),
        (
            "/agents/eng/tasks",
            serde_json::json!({"text": "x", "title": "a\nb"}),
            400,
            "one line",
        ),
        (
            "/agents/nobody/tasks",
            serde_json::json!({"text": "x"}),
            404,
            "nobody",
        ),
    ];
    for (path, body, status, reason) in cases {
        let r = post(path, body.clone()).await.unwrap();
        assert_eq!(r.status(), status, "{path} {body}");
        let b = json_of(r).await;
        assert!(
            b["reason"].as_str().unwrap_or_default().contains(reason),
            "{path} {body}: {b}"
        );
    }
    let r = h
        .authed(h.http.post(h.url("/agents/eng/tasks")))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let big = "x".repeat(40 * 1024);
    let r = post("/agents/eng/tasks", serde_json::json!({ "text": big }))
        .await
        .unwrap();
    assert!(r.status() == 400 || r.status() == 413, "{}", r.status());
    // The documented key pattern is visible ASCII without spaces.
    for key in ["a b", "tab\there", &"k".repeat(201)] {
        let r = h
            .authed(h.http.post(h.url("/agents/eng/tasks")))
            .header("idempotency-key", key)
            .json(&serde_json::json!({"text": "x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "key {key:?}");
        let b = json_of(r).await;
        assert!(
            b["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("Idempotency-Key"),
            "{b}"
        );
    }
    // No token: 401, nothing posted.
    let r = h
        .http
        .post(h.url("/agents/eng/tasks"))
        .json(&serde_json::json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(inbox(&h, "eng").is_empty());
    h.stop().await;
}

#[tokio::test]
async fn a_human_seat_takes_no_tasks() {
    let h = Harness::with(common::Options {
        company: Some(HUMAN_CO),
        ..common::Options::default()
    })
    .await;
    let r = h
        .authed(h.http.post(h.url("/agents/founder/tasks")))
        .json(&serde_json::json!({"text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(inbox(&h, "founder").is_empty());
    h.stop().await;
}

#[tokio::test]
async fn an_idempotency_key_posts_the_task_once() {
    let h = Harness::start().await;
    let send = |key: &'static str| {
        h.authed(h.http.post(h.url("/agents/eng/tasks")))
            .header("idempotency-key", key)
            .json(&serde_json::json!({"text": "Rotate the keys."}))
            .send()
    };
    let first = json_of(send("k-1").await.unwrap()).await;
    let again = send("k-1").await.unwrap();
    assert_eq!(again.status(), 202);
    let again = json_of(again).await;
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["task_id"], first["task_id"]);
    assert_eq!(again["trace_id"], first["trace_id"]);
    assert_eq!(inbox(&h, "eng").len(), 1, "posted once");
    let other = json_of(send("k-2").await.unwrap()).await;
    assert_ne!(other["task_id"], first["task_id"]);
    assert_eq!(inbox(&h, "eng").len(), 2);
    h.stop().await;
}
