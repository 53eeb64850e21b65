//! Applying a new company revision without a restart: the next engine
//! boots beside the running one and takes its seats over one by one.
//!
//! 1. The next engine ([`EngineBuilder::taking_over`]) assembles its
//!    providers, tools, MCP servers and seat runtimes while the running one
//!    keeps serving. Seats new in the revision subscribe at once and are
//!    announced `agent_spawned`; seats in both wait for the running engine
//!    to give them up, and a seat whose role, place or credentials changed
//!    is announced `role_updated`.
//! 2. Once the next engine is up, the running one retires
//!    ([`Engine::begin_retire`]): it starts no more turns (its router,
//!    scheduler and sockets stop; inbox deliveries are held, not refused),
//!    and gives each seat up the moment that seat runs no turn: its inbox
//!    member detaches and the next engine's attaches. A running turn is
//!    never interrupted and sees its own revision from start to end; the
//!    next task of that seat runs on the new one.
//! 3. [`Engine::retire`] waits for the retiring engine's turns (the drain
//!    timeout), terminates the seats the revision removed (`agent_terminated`,
//!    their inbox member gone), and stops its MCP servers. The next engine
//!    publishes `config_revision_applied` with what changed.
//!
//! [`EngineBuilder::taking_over`]: super::EngineBuilder::taking_over

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crewlet_config::{Organization, Seat};
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_queue::topics;
use serde_json::json;
use tracing::{info, warn};

use super::{EVENT_SOURCE, Engine};
use crate::seat::SeatState;

/// How long a seat's hand-over retries attaching its inbox member after a
/// queue error, between tries.
const ATTACH_RETRY: Duration = Duration::from_secs(1);

/// How long [`Engine::finish_takeover`] waits for the idle seats to move.
const TAKEOVER_WAIT: Duration = Duration::from_secs(30);

/// What a revision changed for one seat kept across it; empty when
/// nothing that reaches its turns did.
pub(crate) fn seat_changes(before: &Seat, after: &Seat) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if before.name != after.name {
        changed.push("name");
    }
    if before.role != after.role {
        changed.push("role");
    }
    if before.unit_path != after.unit_path {
        changed.push("unit");
    }
    if before.managers != after.managers || before.reports != after.reports {
        changed.push("reporting");
    }
    if before.mcp_env != after.mcp_env {
        changed.push("mcp_env");
    }
    changed
}

impl Engine {
    /// Starts retiring this engine in favour of its successor (idempotent):
    /// no new turns, deliveries held in the inboxes, the router, scheduler,
    /// upkeep and chat sockets stopped. Running turns go on.
    pub fn begin_retire(&self) {
        let shared = &self.shared;
        if shared.retire_begun.swap(true, Ordering::AcqRel) {
            return;
        }
        shared.ready.store(false, Ordering::Release);
        // Held, not refused: a refused delivery would count towards the
        // dead-letter limit while the successor waits for the seat.
        for handle in &shared.order {
            let route = topics::agent_inbox(handle);
            if let Err(e) = shared.queue.pause(&route.topic, &route.group) {
                warn!(agent = %handle, error = %e, "cannot hold the inbox of a retiring seat");
            }
        }
        shared.runtime.start_draining();
        if let Some(router) = shared.router.lock().as_ref() {
            router.stop();
        }
        for task in shared.tasks.lock().drain(..) {
            task.abort();
        }
        // Only now may the successor take seats: their inboxes are held.
        shared.retiring.send_replace(true);
    }

    /// Waits until [`begin_retire`](Self::begin_retire) was called.
    pub(crate) async fn retiring(&self) {
        let mut rx = self.shared.retiring.subscribe();
        let _ = rx.wait_for(|r| *r).await;
    }

    /// Gives seat `handle` up once it runs no turn: its inbox member
    /// detaches and the inbox is released for the successor's member.
    pub(crate) async fn release_seat(&self, handle: &str) {
        let shared = &self.shared;
        if let Some(seat) = self.seat(handle) {
            loop {
                let ended = shared.runtime.turn_ended.notified();
                tokio::pin!(ended);
                ended.as_mut().enable();
                if seat.state() != SeatState::Working {
                    break;
                }
                ended.await;
            }
            seat.set_state(SeatState::Terminated);
        }
        let control = super::builder::control_key(handle);
        self.close_subscriptions(|key| key == handle || key == control)
            .await;
        let route = topics::agent_inbox(handle);
        if let Err(e) = shared.queue.resume(&route.topic, &route.group) {
            warn!(agent = %handle, error = %e, "cannot release the inbox of a retired seat");
        }
    }

    /// Takes the members whose key matches out of the engine and detaches
    /// them.
    pub(super) async fn close_subscriptions(&self, matches: impl Fn(&str) -> bool) {
        let taken: Vec<crewlet_queue::Subscription> = {
            let mut subs = self.shared.subscriptions.lock();
            let (taken, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut *subs)
                .into_iter()
                .partition(|(key, _)| matches(key));
            *subs = kept;
            taken.into_iter().map(|(_, s)| s).collect()
        };
        futures::future::join_all(taken.into_iter().map(|s| s.close())).await;
    }

    /// Finishes retiring (after [`begin_retire`](Self::begin_retire)): waits
    /// for the running turns (up to the drain timeout), terminates the seats
    /// `next` no longer has, stops the MCP servers and leaves the queue.
    /// The seats `next` keeps are given up to the successor as they finish.
    pub async fn retire(&self, next: &Organization) {
        self.begin_retire();
        let shared = &self.shared;
        if let Some(fleet) = shared.fleet.lock().await.take() {
            fleet.stop().await;
        }
        let abandoned = shared.runtime.wait_idle(shared.options.drain_timeout).await;
        if abandoned > 0 {
            warn!(
                abandoned,
                "turns of the previous revision still running after the drain timeout; their tasks will be redelivered"
            );
        }
        let trace = TraceContext::new_root();
        let usage = self.usage_summary();
        let removed: Vec<String> = shared
            .order
            .iter()
            .filter(|h| !next.seat(h).is_some_and(|s| s.is_agent()))
            .cloned()
            .collect();
        for handle in &removed {
            self.release_seat(handle).await;
            let Some(seat) = self.seat(handle) else {
                continue;
            };
            let s = &seat.seat;
            let tokens = usage
                .agents
                .get(&s.agent_id.to_string())
                .map(|a| a.tokens)
                .unwrap_or_default();
            self.publish(
                Event::new(EventType::AgentTerminated, EVENT_SOURCE)
                    .with_summary(format!(
                        "{} terminated (removed from the company)",
                        s.handle
                    ))
                    .with_agent(s.agent_id, s.name.as_str())
                    .with_trace(trace.child())
                    .with_agent_handle(s.handle.as_str())
                    .with_payload(json!({
                        "handle": s.handle,
                        "tokens": tokens,
                        "reason": "removed",
                        "revision_id": shared.revision_id,
                    })),
            )
            .await;
        }
        // The router's member, and any seat member the successor did not
        // take (it stopped first).
        self.close_subscriptions(|key| key == "router").await;
        if let Some(hub) = shared.mcp.lock().await.take() {
            hub.shutdown().await;
        }
        if let Some(members) = shared.archive_members.lock().await.take() {
            members.close().await;
        }
        shared.stopped.store(true, Ordering::Release);
        info!(
            revision_id = shared
                .revision_id
                .map_or_else(|| "-".to_owned(), |r| r.to_string()),
            removed = removed.len(),
            "previous revision retired"
        );
    }

    /// The successor's side of a seat kept across a revision: once the
    /// predecessor retires and gives the seat up, attach its inbox member
    /// (retrying a queue error until this engine stops).
    pub(crate) fn take_over_seat(&self, from: Engine, handle: String) {
        let me = self.clone();
        let task = tokio::spawn(async move {
            from.retiring().await;
            from.release_seat(&handle).await;
            drop(from);
            loop {
                if me.shared.stopped.load(Ordering::Acquire) {
                    return;
                }
                if !me.hosts(&handle) {
                    // The node gave the seat up meanwhile.
                    me.shared.attached.lock().remove(&handle);
                    me.shared.taken_over.notify_waiters();
                    return;
                }
                match me.subscribe_inbox(handle.clone()).await {
                    Ok(sub) => {
                        me.shared.subscriptions.lock().push(sub);
                        me.shared.taken_over.notify_waiters();
                        return;
                    }
                    Err(e) => {
                        warn!(agent = %handle, error = %e, "cannot attach the inbox of a seat taken over; retrying");
                        tokio::time::sleep(ATTACH_RETRY).await;
                    }
                }
            }
        });
        self.shared.tasks.lock().push(task);
    }

    /// Once the revision is live (every seat it keeps taken over, except
    /// those still finishing a turn of the previous one, whose next turn
    /// will run here), publishes `config_revision_applied`. Called after
    /// [`begin_retire`](Self::begin_retire) on `from`; gives up waiting
    /// after [`TAKEOVER_WAIT`] and says so.
    pub async fn finish_takeover(&self, from: &Engine, started: Instant) {
        let deadline = tokio::time::Instant::now() + TAKEOVER_WAIT;
        loop {
            let notified = self.shared.taken_over.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let waiting = self
                .shared
                .order
                .iter()
                .filter(|h| {
                    let mine = self
                        .seat(h)
                        .is_some_and(|s| s.state() == SeatState::Created);
                    let busy = from
                        .seat(h)
                        .is_some_and(|s| s.state() == SeatState::Working);
                    mine && !busy
                })
                .count();
            if self.shared.stopped.load(Ordering::Acquire) {
                return;
            }
            if waiting == 0 {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                warn!(
                    waiting,
                    "seats not taken over yet; announcing the revision anyway"
                );
                break;
            }
            // A turn of the predecessor ending changes `busy` too: look
            // again now and then.
            let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
        }
        self.announce_applied(from, started, TraceContext::new_root())
            .await;
    }

    /// `config_revision_applied`: the revision is live in this engine.
    async fn announce_applied(&self, from: &Engine, started: Instant, boot: TraceContext) {
        let (org, old) = (&self.shared.org, &from.shared.org);
        let added: Vec<&str> = self
            .shared
            .order
            .iter()
            .filter(|h| !old.seat(h).is_some_and(|s| s.is_agent()))
            .map(String::as_str)
            .collect();
        let removed: Vec<&str> = from
            .shared
            .order
            .iter()
            .filter(|h| !org.seat(h).is_some_and(|s| s.is_agent()))
            .map(String::as_str)
            .collect();
        let updated: Vec<&str> = self
            .shared
            .order
            .iter()
            .filter(|h| match (old.seat(h), org.seat(h)) {
                (Some(a), Some(b)) => a.is_agent() && !seat_changes(a, b).is_empty(),
                _ => false,
            })
            .map(String::as_str)
            .collect();
        let revision = self.shared.revision_id;
        let apply_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        info!(
            revision_id = revision.map_or_else(|| "-".to_owned(), |r| r.to_string()),
            previous = from
                .shared
                .revision_id
                .map_or_else(|| "-".to_owned(), |r| r.to_string()),
            added = added.len(),
            removed = removed.len(),
            updated = updated.len(),
            apply_ms,
            "company revision applied without a restart"
        );
        self.publish(
            Event::new(EventType::ConfigRevisionApplied, EVENT_SOURCE)
                .with_summary(format!(
                    "company revision {} applied ({} added, {} removed, {} updated)",
                    revision.map_or_else(|| "-".to_owned(), |r| r.to_string()),
                    added.len(),
                    removed.len(),
                    updated.len()
                ))
                .with_trace(boot)
                .with_payload(json!({
                    "revision_id": revision,
                    "previous_revision_id": from.shared.revision_id,
                    "status": "ok",
                    "added": added,
                    "removed": removed,
                    "updated": updated,
                    "apply_ms": apply_ms,
                    "node": self.shared.options.node_name,
                })),
        )
        .await;
    }

    /// `role_updated` for a seat kept across the revision whose role,
    /// place or credentials changed.
    pub(crate) async fn announce_role_updated(
        &self,
        before: &Arc<Seat>,
        after: &Seat,
        changed: &[&str],
        boot: TraceContext,
    ) {
        self.publish(
            Event::new(EventType::RoleUpdated, EVENT_SOURCE)
                .with_summary(format!(
                    "{} updated ({}); its next turn uses revision {}",
                    after.handle,
                    changed.join(", "),
                    self.shared
                        .revision_id
                        .map_or_else(|| "-".to_owned(), |r| r.to_string())
                ))
                .with_agent(after.agent_id, after.name.as_str())
                .with_trace(boot.child())
                .with_agent_handle(after.handle.as_str())
                .with_payload(json!({
                    "handle": after.handle,
                    "role": after.name,
                    "previous_role": before.name,
                    "changed_fields": changed,
                    "revision_id": self.shared.revision_id,
                })),
        )
        .await;
    }
}
