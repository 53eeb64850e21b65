//! Why a seat got a task: the routing rule, or for chat how the message
//! addressed the seat.

use crewlet_config::Seat;
use crewlet_integrations::{RawWebhook, Source};
use crewlet_store::ThreadRef;

use super::identity::{identities, same};
use super::{NotificationRouter, RouteRule};

impl NotificationRouter {
    /// Why the seat got this task: the rule, or for chat how the message
    /// addressed the seat (`dm`, `mention`, `thread_follow`, `channel`),
    /// which decides whether a working status shows.
    pub(super) async fn reason(&self, raw: &RawWebhook, seat: &Seat, rule: RouteRule) -> String {
        let n = &raw.notification;
        match n.source {
            // The seat's socket already decided.
            Source::Mattermost => raw
                .body
                .get("addressed")
                .and_then(serde_json::Value::as_str)
                .unwrap_or(rule.as_str())
                .to_owned(),
            Source::Slack if rule == RouteRule::UrlHandle => {
                let named = identities(seat, n.source)
                    .iter()
                    .any(|id| n.mentions.iter().any(|m| same(id, m)));
                if n.direct {
                    "dm".into()
                } else if named || n.kind == "app_mention" {
                    "mention".into()
                } else if let Some(thread) = &n.thread {
                    let t = ThreadRef::new(
                        n.source.as_str(),
                        n.channel_or_project.as_str(),
                        thread.as_str(),
                    );
                    match self.follows.is_following(&seat.handle, &t).await {
                        Ok(true) => "thread_follow".into(),
                        _ => "channel".into(),
                    }
                } else {
                    "channel".into()
                }
            }
            _ => rule.as_str().to_owned(),
        }
    }
}
