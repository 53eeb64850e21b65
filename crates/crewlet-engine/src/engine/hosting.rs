//! The engine as the [`SeatHost`](crate::fleet::SeatHost)'s target: a seat
//! this node holds is attached (its inbox and control members join), a
//! seat it gives back or loses is detached. Without a fleet the engine
//! attaches every seat at boot and nothing here is called.

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use crewlet_queue::topics;
use tracing::warn;

use super::Engine;
use crate::error::EngineError;
use crate::fleet::SeatTarget;
use crate::seat::SeatState;

impl Engine {
    /// Whether this engine may run `handle` now: always without a fleet,
    /// else while the node holds the seat.
    pub(crate) fn hosts(&self, handle: &str) -> bool {
        self.shared
            .options
            .fleet
            .as_ref()
            .is_none_or(|f| f.host.holds(handle))
    }

    /// Marks `handle` attached (or about to be); `false` if it already was.
    pub(crate) fn mark_attached(&self, handle: &str) -> bool {
        self.shared.attached.lock().insert(handle.to_owned())
    }

    /// Attaches a held seat's members; `Ok(false)` when this engine does
    /// not run the seat (not in its company, or retiring).
    pub(crate) async fn attach_seat(&self, handle: &str) -> Result<bool, EngineError> {
        let shared = &self.shared;
        if shared.stopped.load(Ordering::Acquire)
            || shared.retire_begun.load(Ordering::Acquire)
            || !shared.seats.contains_key(handle)
        {
            return Ok(false);
        }
        if !self.mark_attached(handle) {
            return Ok(true);
        }
        match self.subscribe_inbox(handle.to_owned()).await {
            Ok(sub) => {
                shared.subscriptions.lock().push(sub);
                Ok(true)
            }
            Err(e) => {
                shared.attached.lock().remove(handle);
                Err(e)
            }
        }
    }

    /// Detaches a seat. `graceful`: its inbox is held while the running
    /// turn finishes, then the members leave; otherwise they leave at once
    /// (the running turn is fenced at its next journal write).
    pub(crate) async fn detach_seat(&self, handle: &str, graceful: bool) {
        let shared = &self.shared;
        if !shared.attached.lock().remove(handle) {
            return;
        }
        let route = topics::agent_inbox(handle);
        let seat = self.seat(handle);
        if graceful {
            if let Err(e) = shared.queue.pause(&route.topic, &route.group) {
                warn!(agent = %handle, error = %e, "cannot hold the inbox of a seat being handed back");
            }
            if let Some(seat) = &seat {
                loop {
                    let ended = shared.runtime.turn_ended.notified();
                    tokio::pin!(ended);
                    ended.as_mut().enable();
                    if seat.state() != SeatState::Working {
                        break;
                    }
                    ended.await;
                }
            }
        }
        let control = super::builder::control_key(handle);
        self.close_subscriptions(|key| key == handle || key == control)
            .await;
        if graceful && let Err(e) = shared.queue.resume(&route.topic, &route.group) {
            warn!(agent = %handle, error = %e, "cannot release the inbox of a seat handed back");
        }
        if let Some(seat) = seat {
            seat.set_state(SeatState::Created);
        }
    }
}

#[async_trait]
impl SeatTarget for Engine {
    async fn attach(&self, handle: &str) -> bool {
        match self.attach_seat(handle).await {
            Ok(attached) => attached,
            Err(e) => {
                warn!(agent = %handle, error = %e, "cannot attach a held seat; the next sweep retries");
                false
            }
        }
    }

    async fn detach(&self, handle: &str, graceful: bool) {
        self.detach_seat(handle, graceful).await;
    }

    fn attached_handles(&self) -> Vec<String> {
        self.shared.attached.lock().iter().cloned().collect()
    }
}
