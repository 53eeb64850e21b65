//! Webhooks over real HTTP: each source accepted with a valid signature,
//! refused with a bad one, and the status codes of `docs/api.md` ("Webhooks").

mod common;

use common::json_of;

use std::time::Duration;

use common::*;
use crewlet_api::ApiLimits;
use crewlet_core::EventType;
use crewlet_core::payload::EventPayload;
use crewlet_integrations::RawWebhook;
use crewlet_queue::topics;
use serde_json::{Value, json};

/// Asserts exactly one `raw_webhook` on the inbound topic, from `source`, with a trace.
fn assert_one_inbound(h: &Harness, source: &str) -> RawWebhook {
    let inbound = h.published.inbound();
    assert_eq!(inbound.len(), 1, "{inbound:#?}");
    let e = &inbound[0];
    assert_eq!(e.event_type, EventType::RawWebhook);
    assert!(
        e.trace_id.is_some() && e.span_id.is_some(),
        "no trace on {e:?}"
    );
    assert!(e.parent_span_id.is_none(), "the webhook starts a root span");
    let raw = RawWebhook::from_event(e).unwrap();
    assert_eq!(raw.source.as_str(), source);
    raw
}

#[tokio::test]
async fn github_accepted_publishes_one_raw_webhook_with_a_trace() {
    let h = Harness::start().await;
    let r = h
        .post_github("/webhooks/github", "d-1", github_issue(7), GITHUB_SECRET)
        .await;
    assert_eq!(r.status(), 202);
    let body = json_of(r).await;
    assert_eq!(body["accepted"], true);
    let raw = assert_one_inbound(&h, "github");
    let e = &h.published.inbound()[0];
    assert_eq!(body["event_id"], e.id.to_string());
    assert_eq!(body["trace_id"], e.trace_id.unwrap().to_string());
    assert_eq!(raw.handle, None);
    assert_eq!(raw.headers["x-github-delivery"], "d-1");
    assert!(
        !raw.headers.contains_key("x-hub-signature-256"),
        "signatures are never kept"
    );
    assert_eq!(raw.body["issue"]["number"], 7);
    let n = raw.into_notification();
    assert_eq!(n.kind, "issues.opened");
    assert_eq!(n.channel_or_project, "acme/app");
    assert_eq!(n.raw["issue"]["number"], 7);
    // The event went through the store writer: the trace query finds it.
    let trace = e.trace_id.unwrap().to_string();
    let t: Value = h
        .get(&format!("/events/trace/{trace}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t["events"].as_array().unwrap().len(), 1);
    assert_eq!(t["events"][0]["type"], "raw_webhook");
    h.stop().await;
}

#[tokio::test]
async fn github_with_a_seat_handle_and_unknown_seat() {
    let h = Harness::start().await;
    let r = h
        .post_github(
            "/webhooks/github/eng",
            "d-2",
            github_issue(8),
            GITHUB_SECRET,
        )
        .await;
    assert_eq!(r.status(), 202);
    let raw = assert_one_inbound(&h, "github");
    assert_eq!(raw.handle.as_deref(), Some("eng"));
    assert_eq!(h.published.inbound()[0].tags["handle"], "eng");
    let r = h
        .post_github(
            "/webhooks/github/nobody",
            "d-3",
            github_issue(8),
            GITHUB_SECRET,
        )
        .await;
    assert_eq!(r.status(), 404);
    assert_eq!(h.published.inbound().len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn bad_signature_is_401_and_publishes_nothing() {
    let h = Harness::start().await;
    let r = h
        .post_github("/webhooks/github", "d-1", github_issue(1), "wrong-secret")
        .await;
    assert_eq!(r.status(), 401);
    let body = json_of(r).await;
    assert_eq!(body["error"], "bad_signature");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("x-hub-signature-256")
    );
    assert!(
        !body.to_string().contains(GITHUB_SECRET),
        "no secret in answers"
    );
    // A missing signature is 401 too.
    let r = h
        .http
        .post(h.url("/webhooks/github"))
        .header("x-github-event", "issues")
        .header("x-github-delivery", "d-2")
        .body(github_issue(1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(h.published.inbound().is_empty());
    h.stop().await;
}

#[tokio::test]
async fn bad_json_is_400() {
    let h = Harness::start().await;
    let r = h
        .post_github(
            "/webhooks/github",
            "d-1",
            b"{not json".to_vec(),
            GITHUB_SECRET,
        )
        .await;
    assert_eq!(r.status(), 400);
    assert_eq!(json_of(r).await["error"], "bad_json");
    assert!(h.published.inbound().is_empty());
    h.stop().await;
}

#[tokio::test]
async fn missing_secret_is_503_retry_after_300() {
    let h = Harness::with(Options {
        company: Some(COMPANY_NO_SECRETS),
        ..Options::default()
    })
    .await;
    let r = h
        .post_github("/webhooks/github", "d-1", github_issue(1), GITHUB_SECRET)
        .await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "300");
    let body = json_of(r).await;
    assert_eq!(body["error"], "missing_secret");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("integrations.github.webhook_secret")
    );
    // A seat without a Slack signing secret has no Slack route: 404, which
    // Slack does not retry (a 503 it would retry forever).
    let r = h
        .http
        .post(h.url("/webhooks/slack/ceo"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.headers().get("retry-after").is_none());
    let body = json_of(r).await;
    assert!(
        body["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("signing_secret"),
        "{body}"
    );
    assert!(h.published.inbound().is_empty());
    h.stop().await;
}

#[tokio::test]
async fn no_active_company_is_503_retry_after_15() {
    let h = Harness::with(Options {
        company: None,
        ..Options::default()
    })
    .await;
    for path in ["/webhooks/github", "/webhooks/plane", "/webhooks/slack/ceo"] {
        let r = h.http.post(h.url(path)).body("{}").send().await.unwrap();
        assert_eq!(r.status(), 503, "{path}");
        assert_eq!(r.headers()["retry-after"], "15", "{path}");
        assert_eq!(json_of(r).await["error"], "not_configured");
    }
    // Once a company is imported (and seen: the poll, or /ready), deliveries are accepted.
    import(&h.stores, COMPANY).await;
    assert_eq!(h.get("/ready").send().await.unwrap().status(), 200);
    let r = h
        .post_github("/webhooks/github", "d-1", github_issue(1), GITHUB_SECRET)
        .await;
    assert_eq!(r.status(), 202);
    h.stop().await;
}

#[tokio::test]
async fn oversized_body_is_413() {
    let h = Harness::start().await;
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(1024 * 1024 + 10));
    let r = h
        .post_github("/webhooks/github", "d-1", big.into_bytes(), GITHUB_SECRET)
        .await;
    assert_eq!(r.status(), 413);
    assert_eq!(json_of(r).await["error"], "payload_too_large");
    // Streamed without a Content-Length: the cap still holds.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..20).map(|_| Ok(vec![b' '; 64 * 1024])).collect();
    let r = h
        .http
        .post(h.url("/webhooks/github"))
        .header("x-github-event", "issues")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert!(h.published.inbound().is_empty());
    h.stop().await;
}

#[tokio::test]
async fn slow_body_is_408() {
    let h = Harness::with(Options {
        limits: ApiLimits {
            body_timeout: Duration::from_millis(300),
            ..ApiLimits::default()
        },
        ..Options::default()
    })
    .await;
    let slow = futures::stream::unfold(0, |i| async move {
        if i >= 2 {
            return None;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        Some((Ok::<_, std::io::Error>(b"{}".to_vec()), i + 1))
    });
    let r = h
        .http
        .post(h.url("/webhooks/github"))
        .body(reqwest::Body::wrap_stream(slow))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 408);
    h.stop().await;
}

#[tokio::test]
async fn duplicate_github_delivery_is_accepted_once() {
    let h = Harness::start().await;
    let first = h
        .post_github(
            "/webhooks/github",
            "same-id",
            github_issue(3),
            GITHUB_SECRET,
        )
        .await;
    assert_eq!(first.status(), 202);
    let again = h
        .post_github(
            "/webhooks/github",
            "same-id",
            github_issue(3),
            GITHUB_SECRET,
        )
        .await;
    assert_eq!(again.status(), 202);
    let body = json_of(again).await;
    assert_eq!(body["duplicate"], true);
    assert_eq!(body["accepted"], false);
    assert_eq!(h.published.inbound().len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn a_signed_body_resent_under_fresh_delivery_ids_is_a_replay() {
    let h = Harness::start().await;
    let first = h
        .post_github("/webhooks/github", "id-1", github_issue(4), GITHUB_SECRET)
        .await;
    assert_eq!(first.status(), 202);
    // GitHub's signature does not cover X-GitHub-Delivery: the captured
    // request resent with new ids is the same delivery.
    for id in ["id-2", "id-3", "id-4"] {
        let replay = h
            .post_github("/webhooks/github", id, github_issue(4), GITHUB_SECRET)
            .await;
        assert_eq!(replay.status(), 202);
        let body = json_of(replay).await;
        assert_eq!(body["duplicate"], true, "{id}: {body}");
        assert_eq!(body["accepted"], false);
    }
    assert_eq!(h.published.inbound().len(), 1);
    let raw = assert_one_inbound(&h, "github");
    assert!(
        raw.replay_key
            .as_deref()
            .is_some_and(|k| k.starts_with("sha256:")),
        "{:?}",
        raw.replay_key
    );
    // A different body under a fresh id is a new delivery.
    let other = h
        .post_github("/webhooks/github", "id-5", github_issue(5), GITHUB_SECRET)
        .await;
    assert_eq!(json_of(other).await["accepted"], true);
    h.stop().await;
}

#[tokio::test]
async fn atlassian_replays_under_fresh_identifiers_are_refused() {
    let h = Harness::start().await;
    let body = json!({
        "webhookEvent": "jira:issue_created",
        "user": {"accountId": "acc-1"},
        "issue": {"key": "ENG-2", "fields": {"summary": "Flaky", "project": {"key": "ENG"}}}
    });
    let r = atlassian(&h, "/webhooks/jira", JIRA_SECRET, &body, "j-10").await;
    assert_eq!(json_of(r).await["accepted"], true);
    for id in ["j-11", "j-12"] {
        let r = atlassian(&h, "/webhooks/jira", JIRA_SECRET, &body, id).await;
        assert_eq!(json_of(r).await["duplicate"], true, "{id}");
    }
    assert_eq!(h.published.inbound().len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn github_ping_is_verified_and_ignored() {
    let h = Harness::start().await;
    let body = br#"{"zen":"Keep it logically awesome.","hook_id":1}"#.to_vec();
    let sig = format!("sha256={}", hmac_hex(GITHUB_SECRET, &[&body]));
    let r = h
        .http
        .post(h.url("/webhooks/github"))
        .header("x-github-event", "ping")
        .header("x-github-delivery", "p-1")
        .header("x-hub-signature-256", sig)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let body = json_of(r).await;
    assert_eq!(body["accepted"], false);
    assert!(body["ignored"].is_string());
    assert!(h.published.inbound().is_empty());
    h.stop().await;
}

fn slack_signed(h: &Harness, handle: &str, body: &Value, secret: &str) -> reqwest::RequestBuilder {
    let body = serde_json::to_vec(body).unwrap();
    let ts = chrono::Utc::now().timestamp().to_string();
    let sig = format!(
        "v0={}",
        hmac_hex(secret, &[b"v0:", ts.as_bytes(), b":", &body])
    );
    h.http
        .post(h.url(&format!("/webhooks/slack/{handle}")))
        .header("content-type", "application/json")
        .header("x-slack-request-timestamp", ts)
        .header("x-slack-signature", sig)
        .body(body)
}

#[tokio::test]
async fn slack_message_url_verification_and_dedupe() {
    let h = Harness::start().await;
    let challenge = json!({"type": "url_verification", "challenge": "abc123", "token": "t"});
    let r = slack_signed(&h, "ceo", &challenge, SLACK_SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(json_of(r).await["challenge"], "abc123");
    assert!(h.published.inbound().is_empty());

    let message = json!({
        "type": "event_callback", "event_id": "Ev123", "team_id": "T1",
        "event": {"type": "message", "channel": "C1", "user": "U1", "text": "hello", "ts": "1700000000.000100"}
    });
    let r = slack_signed(&h, "ceo", &message, SLACK_SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(json_of(r).await["accepted"], true);
    let raw = assert_one_inbound(&h, "slack");
    assert_eq!(raw.handle.as_deref(), Some("ceo"));
    assert_eq!(raw.notification.delivery_key, "Ev123");
    let again = slack_signed(&h, "ceo", &message, SLACK_SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(json_of(again).await["duplicate"], true);
    assert_eq!(h.published.inbound().len(), 1);

    let bad = slack_signed(&h, "ceo", &message, "not-the-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 401);
    let unknown = slack_signed(&h, "nobody", &message, SLACK_SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    assert_eq!(h.published.inbound().len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn gitlab_token_accepted_and_wrong_token_refused() {
    let h = Harness::start().await;
    let body = serde_json::to_vec(&json!({
        "object_kind": "issue",
        "user": {"username": "alice"},
        "project": {"path_with_namespace": "acme/app"},
        "object_attributes": {"iid": 5, "title": "Broken", "description": "@eng help", "action": "open"}
    }))
    .unwrap();
    let send = |token: &str, uuid: &str| {
        h.http
            .post(h.url("/webhooks/gitlab"))
            .header("x-gitlab-event", "Issue Hook")
            .header("x-gitlab-event-uuid", uuid)
            .header("x-gitlab-token", token)
            .body(body.clone())
    };
    assert_eq!(send("wrong", "u-0").send().await.unwrap().status(), 401);
    assert!(h.published.inbound().is_empty());
    let r = send(GITLAB_TOKEN, "u-1").send().await.unwrap();
    assert_eq!(r.status(), 202);
    let raw = assert_one_inbound(&h, "gitlab");
    assert_eq!(raw.notification.delivery_key, "u-1");
    assert_eq!(raw.headers["x-gitlab-event-uuid"], "u-1");
    assert!(!raw.headers.contains_key("x-gitlab-token"));
    let dup = send(GITLAB_TOKEN, "u-1").send().await.unwrap();
    assert_eq!(json_of(dup).await["duplicate"], true);
    assert_eq!(h.published.inbound().len(), 1);
    h.stop().await;
}

#[tokio::test]
async fn plane_signed_accepted_and_bad_signature_refused() {
    let h = Harness::start().await;
    let body = serde_json::to_vec(&json!({
        "event": "issue", "action": "created", "delivery_id": "pd-1",
        "data": {"id": "wi-1", "name": "Add login", "project": "proj-1", "description_stripped": "please"},
        "activity": {"actor": {"id": "user-1", "display_name": "Alice"}}
    }))
    .unwrap();
    let sign = |secret: &str| hmac_hex(secret, &[&body]);
    let bad = h
        .http
        .post(h.url("/webhooks/plane"))
        .header("x-plane-signature", sign("nope"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 401);
    assert!(h.published.inbound().is_empty());
    let r = h
        .http
        .post(h.url("/webhooks/plane"))
        .header("x-plane-signature", sign(PLANE_SECRET))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let raw = assert_one_inbound(&h, "plane");
    assert_eq!(raw.notification.channel_or_project, "proj-1");
    h.stop().await;
}

async fn atlassian(
    h: &Harness,
    path: &str,
    secret: &str,
    body: &Value,
    id: &str,
) -> reqwest::Response {
    let body = serde_json::to_vec(body).unwrap();
    h.http
        .post(h.url(path))
        .header(
            "x-hub-signature",
            format!("sha256={}", hmac_hex(secret, &[&body])),
        )
        .header("x-atlassian-webhook-identifier", id)
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn jira_signed_accepted_and_bad_signature_refused() {
    let h = Harness::start().await;
    let body = json!({
        "webhookEvent": "jira:issue_created",
        "user": {"accountId": "acc-1"},
        "issue": {"key": "ENG-1", "self": "https://acme.atlassian.net/rest/api/2/issue/10001",
                  "fields": {"summary": "Broken build", "project": {"key": "ENG"}, "description": "fix it"}}
    });
    assert_eq!(
        atlassian(&h, "/webhooks/jira", "wrong", &body, "j-0")
            .await
            .status(),
        401
    );
    assert!(h.published.inbound().is_empty());
    let r = atlassian(&h, "/webhooks/jira", JIRA_SECRET, &body, "j-1").await;
    assert_eq!(r.status(), 202);
    let raw = assert_one_inbound(&h, "jira");
    assert_eq!(raw.notification.thread.as_deref(), Some("ENG-1"));
    h.stop().await;
}

#[tokio::test]
async fn confluence_signed_accepted_and_bad_signature_refused() {
    let h = Harness::start().await;
    let body = json!({
        "eventType": "page_created",
        "userAccountId": "acc-2",
        "page": {"id": "123", "title": "Runbook", "spaceKey": "OPS"}
    });
    assert_eq!(
        atlassian(&h, "/webhooks/confluence", "wrong", &body, "c-0")
            .await
            .status(),
        401
    );
    assert!(h.published.inbound().is_empty());
    let r = atlassian(
        &h,
        "/webhooks/confluence/cto",
        CONFLUENCE_SECRET,
        &body,
        "c-1",
    )
    .await;
    assert_eq!(r.status(), 202);
    let raw = assert_one_inbound(&h, "confluence");
    assert_eq!(raw.notification.channel_or_project, "OPS");
    assert_eq!(raw.handle.as_deref(), Some("cto"));
    h.stop().await;
}

#[tokio::test]
async fn webhooks_ignore_bearer_auth_even_when_reads_are_closed() {
    let h = Harness::with(Options {
        anonymous_read: false,
        ..Options::default()
    })
    .await;
    let r = h
        .post_github("/webhooks/github", "d-9", github_issue(9), GITHUB_SECRET)
        .await;
    assert_eq!(r.status(), 202);
    assert_eq!(h.published.on(topics::NOTIFICATIONS_INBOUND).len(), 1);
    h.stop().await;
}
