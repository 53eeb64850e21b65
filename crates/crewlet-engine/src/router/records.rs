//! The router's records: the payloads of `external_notification` (a
//! notification routed to a seat) and `notification_skipped` (one that woke
//! nobody). Read by the dashboard, the e2e tests and SQL audits by field
//! name, so the field names are pinned by round-trip tests against the
//! JSON the router has always written.

use crewlet_core::payload::EventPayload;
use crewlet_core::{Event, EventType};
use crewlet_integrations::{Notification, RawWebhook, Source};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::RouteRule;

/// A notification routed to a seat as a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExternalNotification {
    pub source: Source,
    pub kind: String,
    pub delivery_key: String,
    /// The notification's `channel_or_project`.
    pub channel: String,
    pub thread: Option<String>,
    pub sender: Option<String>,
    /// The seat it was routed to.
    pub handle: String,
    /// Which rule chose the seat ([`RouteRule::as_str`]).
    pub rule: String,
    /// The task published on the seat's inbox.
    pub task_id: String,
    /// The `raw_webhook` event it came from.
    pub webhook_event_id: Uuid,
}

impl EventPayload for ExternalNotification {
    const EVENT_TYPE: EventType = EventType::ExternalNotification;
}

impl ExternalNotification {
    /// The record of `n` (from `raw_webhook` event `webhook_event_id`)
    /// routed to `handle` by `rule` as task `task_id`.
    pub fn routed(
        n: &Notification,
        handle: &str,
        rule: RouteRule,
        task_id: &str,
        webhook_event_id: Uuid,
    ) -> Self {
        Self {
            source: n.source,
            kind: n.kind.clone(),
            delivery_key: n.delivery_key.clone(),
            channel: n.channel_or_project.clone(),
            thread: n.thread.clone(),
            sender: n.sender.clone(),
            handle: handle.to_owned(),
            rule: rule.as_str().to_owned(),
            task_id: task_id.to_owned(),
            webhook_event_id,
        }
    }
}

/// A notification that woke no seat, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotificationSkipped {
    pub reason: String,
    /// The `raw_webhook` event it came from.
    pub webhook_event_id: Uuid,
    /// `None` (with `kind`, `delivery_key`, `channel`) when the
    /// `raw_webhook` payload could not be read.
    pub source: Option<Source>,
    pub kind: Option<String>,
    pub delivery_key: Option<String>,
    pub channel: Option<String>,
    /// The seat named in the webhook URL, if any.
    pub handle: Option<String>,
}

impl EventPayload for NotificationSkipped {
    const EVENT_TYPE: EventType = EventType::NotificationSkipped;
}

impl NotificationSkipped {
    /// The skip of `raw_webhook` event `event` (its payload `raw`, when readable).
    pub fn of(event: &Event, raw: Option<&RawWebhook>, reason: String) -> Self {
        Self {
            reason,
            webhook_event_id: event.id,
            source: raw.map(|r| r.source),
            kind: raw.map(|r| r.notification.kind.clone()),
            delivery_key: raw.map(|r| r.notification.delivery_key.clone()),
            channel: raw.map(|r| r.notification.channel_or_project.clone()),
            handle: raw.and_then(|r| r.handle.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// An `external_notification` payload as the router has stored it.
    const STORED_ROUTED: &str = r#"{"source":"github","kind":"issues.opened","delivery_key":"d1","channel":"acme/app","thread":"7","sender":"someone","handle":"cto","rule":"unit_lead","task_id":"0b0c8f3e-3a39-5b8e-9a4e-2f1f3f0e6c11","webhook_event_id":"01890a5d-ac96-774b-bcce-b302099a8057"}"#;
    /// A `notification_skipped` payload for an unreadable `raw_webhook`.
    const STORED_UNREADABLE: &str = r#"{"reason":"unreadable raw_webhook payload: missing field `source`","webhook_event_id":"01890a5d-ac96-774b-bcce-b302099a8057","source":null,"kind":null,"delivery_key":null,"channel":null,"handle":null}"#;
    /// A `notification_skipped` payload for a readable one.
    const STORED_SKIPPED: &str = r#"{"reason":"the sender `UENG` is seat `eng` itself","webhook_event_id":"01890a5d-ac96-774b-bcce-b302099a8057","source":"slack","kind":"message","delivery_key":"Ev1","channel":"C9","handle":"eng"}"#;

    fn round_trip<T: EventPayload + std::fmt::Debug + PartialEq>(sample: &str) -> T {
        let payload: Value = serde_json::from_str(sample).unwrap_or_else(|e| panic!("{e}"));
        let event = Event::new(T::EVENT_TYPE, "engine.router").with_payload(payload);
        let typed = T::from_event(&event).unwrap_or_else(|e| panic!("{e}"));
        let again = serde_json::to_string(&typed.to_payload()).unwrap_or_default();
        assert_eq!(again, sample);
        typed
    }

    #[test]
    fn stored_records_read_and_write_back_byte_for_byte() {
        let routed: ExternalNotification = round_trip(STORED_ROUTED);
        assert_eq!(routed.handle, "cto");
        assert_eq!(routed.source, Source::Github);
        let skipped: NotificationSkipped = round_trip(STORED_UNREADABLE);
        assert_eq!(skipped.source, None);
        let skipped: NotificationSkipped = round_trip(STORED_SKIPPED);
        assert_eq!(skipped.handle.as_deref(), Some("eng"));
    }

    /// The typed records write exactly what the router's `json!` payloads
    /// wrote before they had a type.
    #[test]
    fn the_typed_records_are_the_former_json() {
        let n = Notification {
            source: Source::Github,
            kind: "issues.opened".into(),
            delivery_key: "d1".into(),
            channel_or_project: "acme/app".into(),
            thread: None,
            sender: Some("someone".into()),
            sender_is_bot: false,
            direct: false,
            title: None,
            text: String::new(),
            assignees: vec![],
            mentions: vec![],
            url: None,
            raw: Value::Null,
        };
        let event = Event::new(EventType::RawWebhook, "api.webhooks");
        let rule = RouteRule::Mention;
        let former = json!({
            "source": n.source.as_str(),
            "kind": n.kind,
            "delivery_key": n.delivery_key,
            "channel": n.channel_or_project,
            "thread": n.thread,
            "sender": n.sender,
            "handle": "eng",
            "rule": rule.as_str(),
            "task_id": "t-1",
            "webhook_event_id": event.id,
        });
        let typed = ExternalNotification::routed(&n, "eng", rule, "t-1", event.id).to_payload();
        assert_eq!(typed.to_string(), former.to_string());

        let raw = RawWebhook::new(n, Some("eng".into()), Default::default(), None, false);
        for raw in [None, Some(&raw)] {
            let former = json!({
                "reason": "r",
                "webhook_event_id": event.id,
                "source": raw.map(|r| r.source.as_str()),
                "kind": raw.map(|r| r.notification.kind.clone()),
                "delivery_key": raw.map(|r| r.notification.delivery_key.clone()),
                "channel": raw.map(|r| r.notification.channel_or_project.clone()),
                "handle": raw.and_then(|r| r.handle.clone()),
            });
            let typed = NotificationSkipped::of(&event, raw, "r".into()).to_payload();
            assert_eq!(typed.to_string(), former.to_string());
        }
    }
}
