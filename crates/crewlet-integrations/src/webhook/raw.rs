//! The `raw_webhook` event: what the API publishes on
//! `crewlet.notifications.inbound` for every verified delivery, and what the
//! engine's router reads back. This crate owns the envelope (it owns the
//! [`Notification`] inside it); both sides use [`RawWebhook`] through
//! [`EventPayload`], nobody reads the payload by string key.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use crewlet_core::payload::EventPayload;
use crewlet_core::{Event, EventType};
use serde::{Deserialize, Serialize};

use super::{Notification, Source};

/// The tag naming the webhook's source (`slack`, `github`, ...), set on the
/// `raw_webhook` event and on the router's records of it.
pub const TAG_WEBHOOK_SOURCE: &str = "webhook_source";
/// The tag carrying the delivery's dedupe key on the `raw_webhook` event.
pub const TAG_DELIVERY_KEY: &str = "delivery_key";
/// The tag carrying the seat named in the webhook URL.
pub const TAG_HANDLE: &str = "handle";
/// The `source` of the `raw_webhook` events the API publishes.
pub const EVENT_SOURCE: &str = "api.webhooks";

/// The delivery key tag of a `raw_webhook` event.
pub fn delivery_key_tag(event: &Event) -> Option<&str> {
    event.tags.get(TAG_DELIVERY_KEY).map(String::as_str)
}

/// What the notification router reads from a `raw_webhook` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RawWebhook {
    /// `slack`, `github`, `gitlab`, `plane`, `jira`, `confluence` or
    /// `mattermost` (read over the seat sockets by the engine).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub source: Source,
    /// The seat named in the URL (`/webhooks/slack/{handle}`,
    /// `/webhooks/github/{handle}`, ...): the router's first choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// The delivery's identifying headers (event name, delivery id, retry
    /// count, user agent); never signatures or tokens. Names in lower case.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The normalized notification; its `raw` is `null` here (see `body`).
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub notification: Notification,
    /// The request body as JSON.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub body: serde_json::Value,
    pub received_at: DateTime<Utc>,
    /// `sha256:{hex}` of the signed body, for sources whose signature does
    /// not cover the delivery id: a second dedupe key, so a captured
    /// request resent under a fresh id is refused as a replay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_key: Option<String>,
    /// Set when the API could not reach the dedupe store and published the
    /// delivery anyway: the router's own claims decide whether it is new.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dedupe_deferred: bool,
}

impl RawWebhook {
    /// The envelope of a verified `notification`, received now: its `raw`
    /// payload moves to `body`.
    pub fn new(
        mut notification: Notification,
        handle: Option<String>,
        headers: BTreeMap<String, String>,
        replay_key: Option<String>,
        dedupe_deferred: bool,
    ) -> Self {
        let body = std::mem::take(&mut notification.raw);
        Self {
            source: notification.source,
            handle,
            headers,
            notification,
            body,
            received_at: Utc::now(),
            replay_key,
            dedupe_deferred,
        }
    }

    /// The `raw_webhook` event the API publishes: the notification's
    /// envelope ([`Notification::to_event`]: summary, channel, sender, the
    /// `webhook_source` and `delivery_key` tags), the `handle` tag, stamped
    /// at `received_at`, carrying `self`.
    pub fn event(&self) -> Event {
        self.to_event(EVENT_SOURCE)
    }

    /// The notification with its `raw` payload restored.
    pub fn into_notification(self) -> Notification {
        let mut n = self.notification;
        n.raw = self.body;
        n
    }
}

impl EventPayload for RawWebhook {
    const EVENT_TYPE: EventType = EventType::RawWebhook;

    fn to_event(&self, source: impl Into<String>) -> Event {
        let mut event = self.notification.to_event();
        event.source = source.into();
        event.timestamp = self.received_at;
        if let Some(h) = &self.handle {
            event = event.with_tag(TAG_HANDLE, h.clone());
        }
        event.with_payload(self.to_payload())
    }
}

#[cfg(test)]
mod tests;
