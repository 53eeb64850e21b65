//! [`FleetInbox`]: what the fleet does with each post a seat's socket sees.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use crewlet_core::payload::EventPayload;
use crewlet_integrations::RawWebhook;
use crewlet_integrations::mattermost::{Addressed, SeatAccount, SeatInbox, SeatPost, Verdict};
use crewlet_queue::{EventQueue, topics};
use crewlet_store::{ThreadFollows, ThreadRef};
use tracing::{debug, warn};

use super::Mattermost;

/// The `thread_follows` backend (and notification source) name.
pub(crate) const BACKEND: &str = "mattermost";
/// The `source` of the `raw_webhook` events the fleet publishes.
const EVENT_SOURCE: &str = "engine.mattermost";

pub(crate) struct FleetInbox {
    mm: Arc<Mattermost>,
    queue: Arc<dyn EventQueue>,
    follows: Arc<dyn ThreadFollows>,
}

impl FleetInbox {
    pub fn new(
        mm: Arc<Mattermost>,
        queue: Arc<dyn EventQueue>,
        follows: Arc<dyn ThreadFollows>,
    ) -> Self {
        Self { mm, queue, follows }
    }

    async fn publish(
        &self,
        seat: &SeatAccount,
        post: &SeatPost,
        why: Addressed,
    ) -> Result<(), String> {
        let n = post.notification(seat, why, &self.mm.base, &self.mm.team);
        let raw = RawWebhook::new(n, Some(seat.handle.clone()), BTreeMap::new(), None, false);
        let event = crewlet_telemetry::stamp(raw.to_event(EVENT_SOURCE));
        self.queue
            .publish_shared(topics::NOTIFICATIONS_INBOUND, Arc::new(event))
            .await
            .map(drop)
            .map_err(|e| format!("cannot publish the post: {e}"))
    }
}

#[async_trait]
impl SeatInbox for FleetInbox {
    async fn seen(
        &self,
        seat: &SeatAccount,
        post: SeatPost,
        verdict: Verdict,
    ) -> Result<(), String> {
        let p = &post.post;
        match verdict {
            Verdict::Deliver(why) => self.publish(seat, &post, why).await,
            Verdict::IfFollowing => {
                let thread = ThreadRef::new(BACKEND, p.channel_id.as_str(), p.root_id.as_str());
                match self.follows.is_following(&seat.handle, &thread).await {
                    Ok(true) => self.publish(seat, &post, Addressed::Thread).await,
                    Ok(false) => {
                        debug!(seat = %seat.handle, post = %p.id, "a reply in a thread the seat does not follow");
                        Ok(())
                    }
                    // Read again after the reconnect rather than guessed.
                    Err(e) => Err(format!("cannot read thread follows: {e}")),
                }
            }
            Verdict::Own => {
                if !p.root_id.is_empty() {
                    let thread = ThreadRef::new(BACKEND, p.channel_id.as_str(), p.root_id.as_str());
                    if let Err(e) = self.follows.follow(&seat.handle, &thread).await {
                        warn!(seat = %seat.handle, error = %e, "cannot record the seat's thread participation");
                    }
                }
                Ok(())
            }
            Verdict::Skip(reason) => {
                debug!(seat = %seat.handle, post = %p.id, %reason, "mattermost post skipped");
                Ok(())
            }
        }
    }
}
