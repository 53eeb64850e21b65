//! The payload of the `raw_webhook` events the API publishes on
//! `crewlet.notifications.inbound`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use crewlet_core::Event;
use crewlet_integrations::{Notification, Source};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What the notification router reads from a `raw_webhook` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RawWebhook {
    /// `slack`, `github`, `gitlab`, `plane`, `jira` or `confluence`.
    #[schema(value_type = String)]
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
    #[schema(value_type = Object)]
    pub notification: Notification,
    /// The request body as JSON.
    #[schema(value_type = Object)]
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
    /// Reads the payload of a `raw_webhook` event.
    pub fn from_event(event: &Event) -> Result<Self, serde_json::Error> {
        Self::deserialize(&event.payload)
    }

    /// The notification with its `raw` payload restored.
    pub fn into_notification(self) -> Notification {
        let mut n = self.notification;
        n.raw = self.body;
        n
    }
}
