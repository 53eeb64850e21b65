//! Webhooks through the public API, the way the API layer calls it: an
//! `http::HeaderMap`, the raw body, the secret from the company YAML, `now`.

use chrono::{DateTime, Utc};
use crewlet_integrations::webhook::{
    confluence, github, gitlab, gitlab::GitLabSecrets, jira, plane, slack,
};
use crewlet_integrations::{Inbound, Source, WebhookError};
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::json;

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        map.insert(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    map
}

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_750_000_000, 0).unwrap()
}

/// (status, Retry-After) as the API answers a refused webhook.
fn answer(e: &WebhookError) -> (u16, Option<u64>) {
    (e.status_code(), e.retry_after_secs())
}

#[test]
fn every_source_accepts_a_correctly_signed_delivery() {
    let ts = now().timestamp().to_string();

    let body = serde_json::to_vec(&json!({
        "type": "event_callback", "event_id": "Ev1", "api_app_id": "A1",
        "event": {"type": "app_mention", "user": "U1", "channel": "C1", "text": "<@UBOT> hi", "ts": "1.2"},
    }))
    .unwrap();
    let sig = slack::signature(b"slack-secret", &ts, &body);
    let h = headers(&[
        ("X-Slack-Signature", &sig),
        ("X-Slack-Request-Timestamp", &ts),
    ]);
    let n = slack::receive(&h, &body, Some(b"slack-secret"), now()).unwrap();
    assert_eq!(n.notification().unwrap().source, Source::Slack);

    let body = serde_json::to_vec(&json!({
        "action": "opened", "issue": {"number": 1, "title": "t", "body": "@agent go"},
        "repository": {"full_name": "o/r"}, "sender": {"login": "u"},
    }))
    .unwrap();
    let sig = github::signature(b"gh-secret", &body);
    let h = headers(&[
        ("X-Hub-Signature-256", &sig),
        ("X-GitHub-Delivery", "d-1"),
        ("X-GitHub-Event", "issues"),
    ]);
    let n = github::receive(&h, &body, Some(b"gh-secret")).unwrap();
    assert_eq!(n.notification().unwrap().mentions, ["agent"]);

    let body = serde_json::to_vec(&json!({
        "object_kind": "issue", "user": {"username": "u"},
        "project": {"path_with_namespace": "g/p"},
        "object_attributes": {"iid": 5, "title": "t", "action": "open", "description": "d"},
    }))
    .unwrap();
    let whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let sig = gitlab::standard_signature(whsec, "msg_9", &ts, &body).unwrap();
    let h = headers(&[
        ("webhook-id", "msg_9"),
        ("webhook-timestamp", &ts),
        ("webhook-signature", &sig),
    ]);
    let secrets = GitLabSecrets {
        webhook_token: None,
        signing_secret: Some(whsec),
    };
    let n = gitlab::receive(&h, &body, secrets, now()).unwrap();
    assert_eq!(n.notification().unwrap().delivery_key, "msg_9");
    let classic = headers(&[("X-Gitlab-Token", "tok"), ("X-Gitlab-Event-UUID", "uuid-9")]);
    let token_only = GitLabSecrets {
        webhook_token: Some(b"tok"),
        signing_secret: None,
    };
    let n = gitlab::receive(&classic, &body, token_only, now()).unwrap();
    assert_eq!(n.notification().unwrap().delivery_key, "uuid-9");

    let body = serde_json::to_vec(&json!({
        "event": "issue", "action": "created",
        "data": {"id": "i1", "name": "n", "project": "p1", "description_stripped": "x"},
    }))
    .unwrap();
    let sig = plane::signature(b"plane-secret", &body);
    let h = headers(&[("X-Plane-Signature", &sig), ("X-Plane-Delivery", "pd-1")]);
    let n = plane::receive(&h, &body, Some(b"plane-secret")).unwrap();
    assert_eq!(n.notification().unwrap().delivery_key, "pd-1");

    let body = serde_json::to_vec(&json!({
        "webhookEvent": "jira:issue_created",
        "issue": {"key": "K-1", "fields": {"summary": "s", "project": {"key": "K"}}},
    }))
    .unwrap();
    let sig = jira::signature(b"jira-secret", &body);
    let h = headers(&[("X-Hub-Signature", &sig)]);
    let n = jira::receive(&h, &body, Some(b"jira-secret")).unwrap();
    assert_eq!(n.notification().unwrap().thread.as_deref(), Some("K-1"));

    let body = serde_json::to_vec(&json!({
        "webhookEvent": "page_created", "page": {"id": 3, "spaceKey": "S", "title": "T"},
    }))
    .unwrap();
    let sig = confluence::signature(b"conf-secret", &body);
    let h = headers(&[("X-Hub-Signature", &sig)]);
    let n = confluence::receive(&h, &body, Some(b"conf-secret")).unwrap();
    assert_eq!(n.notification().unwrap().channel_or_project, "S");
}

#[test]
fn refusals_map_to_401_400_and_503_with_retry_after() {
    let body = br#"{"action":"opened"}"#;
    let signed = github::signature(b"right", body);
    let h = headers(&[
        ("X-Hub-Signature-256", &signed),
        ("X-GitHub-Event", "issues"),
    ]);

    let wrong_secret = github::receive(&h, body, Some(b"wrong")).unwrap_err();
    assert_eq!(answer(&wrong_secret), (401, None));

    let unsigned = github::receive(&headers(&[]), body, Some(b"right")).unwrap_err();
    assert_eq!(answer(&unsigned), (401, None));

    let no_secret = github::receive(&h, body, None).unwrap_err();
    assert_eq!(answer(&no_secret), (503, Some(300)));
    let empty_secret = github::receive(&h, body, Some(b"")).unwrap_err();
    assert_eq!(answer(&empty_secret), (503, Some(300)));

    // Verified, but no delivery id: malformed, not unauthenticated.
    let no_delivery = github::receive(&h, body, Some(b"right")).unwrap_err();
    assert_eq!(answer(&no_delivery), (400, None));

    let not_json = b"{oops";
    let sig = plane::signature(b"s", not_json);
    let bad_json = plane::receive(
        &headers(&[("X-Plane-Signature", &sig)]),
        not_json,
        Some(b"s"),
    )
    .unwrap_err();
    assert_eq!(answer(&bad_json), (400, None));

    let old = (now().timestamp() - 301).to_string();
    let sig = slack::signature(b"s", &old, b"{}");
    let stale = slack::receive(
        &headers(&[
            ("X-Slack-Signature", &sig),
            ("X-Slack-Request-Timestamp", &old),
        ]),
        b"{}",
        Some(b"s"),
        now(),
    )
    .unwrap_err();
    assert_eq!(answer(&stale), (401, None));
}

#[test]
fn slack_challenge_and_ignored_deliveries_are_answered_200() {
    let ts = now().timestamp().to_string();
    let body = br#"{"type":"url_verification","challenge":"abc123"}"#;
    let sig = slack::signature(b"s", &ts, body);
    let h = headers(&[
        ("X-Slack-Signature", &sig),
        ("X-Slack-Request-Timestamp", &ts),
    ]);
    assert_eq!(
        slack::receive(&h, body, Some(b"s"), now()).unwrap(),
        Inbound::Challenge("abc123".into())
    );

    let ping = br#"{"zen":"z"}"#;
    let sig = github::signature(b"s", ping);
    let h = headers(&[
        ("X-Hub-Signature-256", &sig),
        ("X-GitHub-Delivery", "p-1"),
        ("X-GitHub-Event", "ping"),
    ]);
    match github::receive(&h, ping, Some(b"s")).unwrap() {
        Inbound::Ignored { delivery_key, .. } => assert_eq!(delivery_key.as_deref(), Some("p-1")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn notification_event_round_trips_through_the_queue_format() {
    let body = serde_json::to_vec(&json!({
        "action": "created",
        "issue": {"number": 9, "title": "t", "assignees": [{"login": "ops-agent"}]},
        "comment": {"body": "@ops-agent ping", "html_url": "https://x/9#c"},
        "repository": {"full_name": "o/r"}, "sender": {"login": "alice"},
    }))
    .unwrap();
    let sig = github::signature(b"s", &body);
    let h = headers(&[
        ("X-Hub-Signature-256", &sig),
        ("X-GitHub-Delivery", "d-9"),
        ("X-GitHub-Event", "issue_comment"),
    ]);
    let inbound = github::receive(&h, &body, Some(b"s")).unwrap();
    let n = inbound.notification().unwrap();
    let event = n.to_event();
    let wire = serde_json::to_string(&event).unwrap();
    let back: crewlet_core::Event = serde_json::from_str(&wire).unwrap();
    assert_eq!(back.event_type.as_str(), "raw_webhook");
    assert_eq!(back.payload["delivery_key"], "d-9");
    assert_eq!(back.payload["assignees"], json!(["ops-agent"]));
    assert_eq!(back.payload["mentions"], json!(["ops-agent"]));
}
