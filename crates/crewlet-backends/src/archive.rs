//! The event archive: how every event a process publishes reaches the event
//! store even while PostgreSQL is down, in the engine and in the
//! standalone API alike.
//!
//! - **Inline.** A publish listener stores each event right after its
//!   publish ([`EventStoreWriter::write`]). When that fails because the
//!   database is unavailable, the event is republished on the outbox topic
//!   (`crewlet.store.outbox`), where the broker keeps it; for a few seconds
//!   after such a failure events go straight to the outbox, so publishers
//!   are not held up by a database that is known to be down.
//! - **From the broker.** Members of the `event-store` group store what the
//!   outbox holds and every `raw_webhook` on `crewlet.notifications.inbound`,
//!   holding each message (unacknowledged) until the database takes it. An
//!   API process acknowledges a webhook once its `raw_webhook` is on the
//!   broker, so a crash of that process loses no audit event: whichever
//!   process runs a member of the group stores it.
//!
//! Writes are idempotent (`ON CONFLICT DO NOTHING` on the event id), so an
//! event stored twice on the way is stored once.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use crewlet_core::Event;
use crewlet_queue::{
    Delivery, EventHandler, EventQueue, HandlerError, PublishListener, QueueError,
    SubscribeOptions, Subscription, topics,
};
use crewlet_store::EventStoreWriter;
use tokio::time::Instant;
use tracing::{error, info, warn};

/// After an inline write fails on an unavailable database, events skip the
/// inline attempt (and go to the outbox) for this long.
const BYPASS_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// Messages a member of the `event-store` group takes ahead of its handler.
const ARCHIVE_PREFETCH: usize = 256;

/// Counters of one process's archive.
#[derive(Debug, Default)]
struct Counters {
    inline: AtomicU64,
    outboxed: AtomicU64,
    archived: AtomicU64,
    lost: AtomicU64,
}

/// One process's event archive; see the module docs.
pub struct EventArchive {
    writer: Arc<EventStoreWriter>,
    queue: Weak<dyn EventQueue>,
    /// Inline writes are skipped until then.
    bypass_until: Mutex<Option<Instant>>,
    counters: Counters,
}

/// Numbers for the shutdown line and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArchiveStats {
    /// Stored right after their publish.
    pub inline: u64,
    /// Handed to the outbox because the database was unavailable.
    pub outboxed: u64,
    /// Stored by this process's members of the `event-store` group.
    pub archived: u64,
    /// Neither stored nor handed to the outbox (the broker refused too).
    pub lost: u64,
}

impl EventArchive {
    /// Registers the inline listener on `queue` (inline writes with the
    /// outbox as fallback). Call [`EventArchive::subscribe`] to also store
    /// from the broker.
    pub fn install(queue: &Arc<dyn EventQueue>, writer: Arc<EventStoreWriter>) -> Arc<Self> {
        let archive = Self::detached(queue, writer);
        queue.add_publish_listener(Arc::new(Inline(archive.clone())));
        archive
    }

    /// An archive without the inline listener: the process stores only from
    /// the broker (the standalone API, whose only events are `raw_webhook`).
    pub fn detached(queue: &Arc<dyn EventQueue>, writer: Arc<EventStoreWriter>) -> Arc<Self> {
        Arc::new(Self {
            writer,
            queue: Arc::downgrade(queue),
            bypass_until: Mutex::new(None),
            counters: Counters::default(),
        })
    }

    /// Joins the `event-store` group on the outbox and on the inbound
    /// notifications topic. The members stop with [`ArchiveMembers::close`]
    /// (or the queue's shutdown).
    pub async fn subscribe(self: &Arc<Self>) -> Result<ArchiveMembers, QueueError> {
        let Some(queue) = self.queue.upgrade() else {
            return Err(QueueError::ShutDown {
                operation: "subscribe to",
                topic: topics::EVENT_STORE_OUTBOX.to_owned(),
            });
        };
        let stopping = Arc::new(AtomicBool::new(false));
        let mut subs = Vec::with_capacity(2);
        for topic in [topics::EVENT_STORE_OUTBOX, topics::NOTIFICATIONS_INBOUND] {
            let handler = Arc::new(FromBroker {
                archive: self.clone(),
                stopping: stopping.clone(),
            });
            subs.push(
                queue
                    .subscribe_with(
                        topic,
                        topics::EVENT_STORE_GROUP,
                        handler,
                        SubscribeOptions::default().with_prefetch(ARCHIVE_PREFETCH),
                    )
                    .await?,
            );
        }
        Ok(ArchiveMembers { subs, stopping })
    }

    pub fn stats(&self) -> ArchiveStats {
        let c = &self.counters;
        ArchiveStats {
            inline: c.inline.load(Ordering::Relaxed),
            outboxed: c.outboxed.load(Ordering::Relaxed),
            archived: c.archived.load(Ordering::Relaxed),
            lost: c.lost.load(Ordering::Relaxed),
        }
    }

    pub fn writer(&self) -> &Arc<EventStoreWriter> {
        &self.writer
    }

    fn bypassing(&self) -> bool {
        let mut until = self.bypass_until.lock();
        match *until {
            Some(t) if Instant::now() < t => true,
            Some(_) => {
                *until = None;
                false
            }
            None => false,
        }
    }

    fn start_bypass(&self) {
        *self.bypass_until.lock() = Some(Instant::now() + BYPASS_AFTER_FAILURE);
    }

    async fn store_inline(&self, topic: &str, event: &Event) {
        if topic == topics::EVENT_STORE_OUTBOX || !event.is_stored() {
            return;
        }
        if !self.bypassing() {
            match self.writer.on_publish(topic, event).await {
                Ok(()) => {
                    self.counters.inline.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(e) if e.is_transient() => self.start_bypass(),
                // The database refused this event itself: the outbox member
                // tries once more and dead-letters it, so it is kept.
                Err(_) => {}
            }
        }
        let Some(queue) = self.queue.upgrade() else {
            self.lose(event, "the queue is gone");
            return;
        };
        match queue.publish(topics::EVENT_STORE_OUTBOX, event).await {
            Ok(()) => {
                self.counters.outboxed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.lose(event, &e.to_string()),
        }
    }

    fn lose(&self, event: &Event, why: &str) {
        let lost = self.counters.lost.fetch_add(1, Ordering::Relaxed) + 1;
        error!(event_id = %event.id, event_type = %event.event_type, lost, reason = why,
               "event neither stored nor handed to the outbox; it is not in the event store");
    }

    async fn store_from_broker(
        &self,
        delivery: &Delivery,
        stopping: &AtomicBool,
    ) -> Result<(), HandlerError> {
        let event = &delivery.event;
        if delivery.topic.as_ref() == topics::NOTIFICATIONS_INBOUND
            && event.event_type != crewlet_core::EventType::RawWebhook
        {
            return Ok(());
        }
        let stopping = || stopping.load(Ordering::Acquire);
        match self.writer.write_held(event, &stopping).await {
            Ok(()) => {
                let n = self.counters.archived.fetch_add(1, Ordering::Relaxed) + 1;
                if delivery.topic.as_ref() == topics::EVENT_STORE_OUTBOX && n % 1000 == 1 {
                    info!(archived = n, "outbox events stored");
                }
                Ok(())
            }
            Err(e) if e.is_transient() => Err(HandlerError::new(format!(
                "stopping while the database is unavailable; event {} stays on the broker: {e}",
                event.id
            ))),
            Err(e) => {
                warn!(event_id = %event.id, error = %e, attempt = delivery.attempt,
                      "the event store refuses this event");
                Err(HandlerError::new(e.to_string()))
            }
        }
    }
}

struct Inline(Arc<EventArchive>);

#[async_trait]
impl PublishListener for Inline {
    async fn on_publish(&self, topic: &str, event: &Event) -> Result<(), HandlerError> {
        self.0.store_inline(topic, event).await;
        Ok(())
    }
}

struct FromBroker {
    archive: Arc<EventArchive>,
    stopping: Arc<AtomicBool>,
}

#[async_trait]
impl EventHandler for FromBroker {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        self.archive
            .store_from_broker(&delivery, &self.stopping)
            .await
    }
}

/// This process's members of the `event-store` group.
pub struct ArchiveMembers {
    subs: Vec<Subscription>,
    stopping: Arc<AtomicBool>,
}

impl ArchiveMembers {
    /// Stops holding (a member waiting for the database gives its message
    /// back to the broker, for another process or the next start) and
    /// detaches the members.
    pub async fn close(mut self) {
        self.stopping.store(true, Ordering::Release);
        let subs = std::mem::take(&mut self.subs);
        futures::future::join_all(subs.into_iter().map(Subscription::close)).await;
    }
}

impl Drop for ArchiveMembers {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for ArchiveMembers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveMembers")
            .field("members", &self.subs.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use crewlet_core::EventType;
    use crewlet_queue::MemoryQueue;
    use crewlet_store::{EventStore, MemoryEventStore, StoreError};

    use super::*;

    /// A store that is "down" until told otherwise.
    struct Flaky {
        inner: MemoryEventStore,
        down: AtomicBool,
        attempts: AtomicUsize,
    }

    #[async_trait]
    impl EventStore for Flaky {
        async fn append(&self, events: &[Event]) -> Result<(), StoreError> {
            self.attempts.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable {
                    what: "append".into(),
                    reason: "down".into(),
                });
            }
            self.inner.append(events).await
        }
        async fn recent(
            &self,
            q: &crewlet_store::EventQuery,
        ) -> Result<crewlet_store::EventPage, StoreError> {
            self.inner.recent(q).await
        }
        async fn get(&self, id: uuid::Uuid) -> Result<Option<Event>, StoreError> {
            self.inner.get(id).await
        }
        async fn by_trace(&self, t: &crewlet_core::TraceId) -> Result<Vec<Event>, StoreError> {
            self.inner.by_trace(t).await
        }
        async fn token_breakdown(
            &self,
            q: &crewlet_store::BreakdownQuery,
        ) -> Result<crewlet_store::TokenBreakdown, StoreError> {
            self.inner.token_breakdown(q).await
        }
    }

    /// Polls `f` for up to 60 s (sized for a loaded CI machine, not an idle one).
    async fn eventually<F: Fn() -> bool>(what: &str, f: F) {
        for _ in 0..6000 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {what}");
    }

    #[tokio::test]
    async fn events_published_while_the_database_is_down_are_stored_once_it_is_back() {
        let store = Arc::new(Flaky {
            inner: MemoryEventStore::new(),
            down: AtomicBool::new(true),
            attempts: AtomicUsize::new(0),
        });
        let queue: Arc<dyn EventQueue> = Arc::new(MemoryQueue::standalone());
        let writer = Arc::new(EventStoreWriter::new(store.clone()));
        let archive = EventArchive::install(&queue, writer);
        let _subs = archive.subscribe().await.unwrap_or_else(|e| panic!("{e}"));

        let events: Vec<Event> = (0..5)
            .map(|_| Event::new(EventType::TaskStarted, "t"))
            .collect();
        for e in &events {
            queue
                .publish(&topics::events(&e.event_type), e)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        assert!(store.inner.is_empty(), "nothing can be stored yet");
        // The first event failed inline; the rest skipped straight to the outbox.
        assert_eq!(archive.stats().outboxed, 5);
        eventually("the outbox members to retry", || {
            store.attempts.load(Ordering::SeqCst) > 3
        })
        .await;

        store.down.store(false, Ordering::SeqCst);
        eventually("every event stored", || store.inner.len() == 5).await;
        for e in &events {
            assert!(store.inner.get(e.id).await.ok().flatten().is_some());
        }
        assert_eq!(archive.stats().lost, 0);
        _subs.close().await;
    }

    #[tokio::test]
    async fn raw_webhooks_on_the_inbound_topic_are_stored_from_the_broker_only() {
        let store = Arc::new(MemoryEventStore::new());
        let queue: Arc<dyn EventQueue> = Arc::new(MemoryQueue::standalone());
        let archive =
            EventArchive::detached(&queue, Arc::new(EventStoreWriter::new(store.clone())));
        let _subs = archive.subscribe().await.unwrap_or_else(|e| panic!("{e}"));
        let raw = Event::new(EventType::RawWebhook, "api");
        let other = Event::new(EventType::ExternalNotification, "api");
        for e in [&raw, &other] {
            queue
                .publish(topics::NOTIFICATIONS_INBOUND, e)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        eventually("the raw_webhook stored", || store.len() == 1).await;
        assert!(store.get(raw.id).await.ok().flatten().is_some());
        assert_eq!(archive.stats().inline, 0);
    }
}
