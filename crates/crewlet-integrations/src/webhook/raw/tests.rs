use serde_json::{Value, json};

use super::*;

/// A `raw_webhook` payload exactly as the API has stored it (serde form of
/// the envelope the API owned before it moved here): a GitHub comment
/// addressed through the seat URL, with a replay key.
const STORED: &str = r#"{"source":"github","handle":"eng","headers":{"user-agent":"GitHub-Hookshot/1","x-github-delivery":"d-9","x-github-event":"issue_comment"},"notification":{"source":"github","kind":"issue_comment.created","delivery_key":"d-9","channel_or_project":"acme/app","thread":"9","sender":"alice","sender_is_bot":false,"title":"Bug","text":"@eng ping","assignees":["eng"],"mentions":["eng"],"url":"https://x/9#c","raw":null},"body":{"action":"created","issue":{"number":9}},"received_at":"2025-05-01T12:00:00.123456Z","replay_key":"sha256:ab12"}"#;

/// The same delivery published while the API's dedupe store was down: no
/// handle, no replay key, `dedupe_deferred` set.
const STORED_DEFERRED: &str = r#"{"source":"slack","headers":{},"notification":{"source":"slack","kind":"message","delivery_key":"Ev1","channel_or_project":"C1","thread":"1712.5","sender":"U1","sender_is_bot":true,"title":null,"text":"hi","assignees":[],"mentions":[],"url":null,"raw":null},"body":{"event_id":"Ev1"},"received_at":"2025-05-01T12:00:00Z","dedupe_deferred":true}"#;

fn stored_event(sample: &str) -> Event {
    let payload: Value = serde_json::from_str(sample).unwrap_or_else(|e| panic!("{e}"));
    Event::new(EventType::RawWebhook, EVENT_SOURCE).with_payload(payload)
}

#[test]
fn stored_samples_read_and_write_back_byte_for_byte() {
    for sample in [STORED, STORED_DEFERRED] {
        let raw = RawWebhook::from_event(&stored_event(sample)).unwrap_or_else(|e| panic!("{e}"));
        let again = serde_json::to_string(&raw.to_payload()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, sample);
    }
    let raw = RawWebhook::from_event(&stored_event(STORED)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(raw.source, Source::Github);
    assert_eq!(raw.handle.as_deref(), Some("eng"));
    assert_eq!(raw.notification.delivery_key, "d-9");
    assert_eq!(raw.replay_key.as_deref(), Some("sha256:ab12"));
    assert!(!raw.dedupe_deferred);
    let deferred =
        RawWebhook::from_event(&stored_event(STORED_DEFERRED)).unwrap_or_else(|e| panic!("{e}"));
    assert!(deferred.dedupe_deferred);
    assert_eq!(deferred.handle, None);
}

#[test]
fn the_published_event_carries_the_envelope_and_its_tags() {
    let raw = RawWebhook::from_event(&stored_event(STORED)).unwrap_or_else(|e| panic!("{e}"));
    let event = raw.event();
    assert_eq!(event.event_type, EventType::RawWebhook);
    assert_eq!(event.source, "api.webhooks");
    assert_eq!(event.timestamp, raw.received_at);
    assert_eq!(
        event.summary,
        "github issue_comment.created in acme/app (9)"
    );
    assert_eq!(event.channel_id.as_deref(), Some("acme/app"));
    assert_eq!(event.sender.as_deref(), Some("alice"));
    assert_eq!(event.tags[TAG_WEBHOOK_SOURCE], "github");
    assert_eq!(delivery_key_tag(&event), Some("d-9"));
    assert_eq!(event.tags[TAG_HANDLE], "eng");
    assert_eq!(
        serde_json::to_string(&event.payload).unwrap_or_default(),
        STORED
    );
    assert_eq!(RawWebhook::read(&event), Some(raw));
}

#[test]
fn the_envelope_moves_the_body_out_of_the_notification_and_back() {
    let raw = RawWebhook::from_event(&stored_event(STORED)).unwrap_or_else(|e| panic!("{e}"));
    let n = raw.clone().into_notification();
    assert_eq!(n.raw, json!({"action": "created", "issue": {"number": 9}}));
    let again = RawWebhook::new(n, raw.handle.clone(), raw.headers.clone(), None, false);
    assert_eq!(again.notification, raw.notification);
    assert_eq!(again.body, raw.body);
}

#[test]
fn other_events_are_not_read_as_raw_webhooks() {
    let other = Event::new(EventType::ExternalNotification, "engine.router")
        .with_payload(serde_json::from_str(STORED).unwrap_or_default());
    assert!(RawWebhook::from_event(&other).is_err());
    let broken = Event::new(EventType::RawWebhook, EVENT_SOURCE).with_payload(json!({"x": 1}));
    assert!(RawWebhook::from_event(&broken).is_err());
}
