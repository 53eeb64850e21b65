use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crewlet_core::Event;
use tracing::warn;

use super::EventStore;
use crate::error::StoreError;
use crate::patience::{Patience, retry_transient};

/// Stores published events: [`write`](Self::write) once, inline after a
/// publish (one insert per event, `ON CONFLICT DO NOTHING`, so writing an
/// event twice is harmless), or [`write_held`](Self::write_held), which
/// holds the event until the database takes it. `crewlet-queue` is not a
/// dependency: the processes register it with their queue, and hand what
/// an inline write could not store to a durable retry (`crewlet-api`'s
/// event archive).
pub struct EventStoreWriter {
    store: Arc<dyn EventStore>,
    timeout: Duration,
    written: AtomicU64,
    failed: AtomicU64,
}

/// How long one write may hold up a publish before it counts as failed.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

impl EventStoreWriter {
    pub fn new(store: Arc<dyn EventStore>) -> Self {
        Self::with_timeout(store, DEFAULT_WRITE_TIMEOUT)
    }

    pub fn with_timeout(store: Arc<dyn EventStore>, timeout: Duration) -> Self {
        Self {
            store,
            timeout,
            written: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// Stores `event` (published on `topic`); stream-only events are
    /// skipped. A failure is logged, counted and returned: the caller decides
    /// whether the event gets another chance.
    pub async fn on_publish(&self, topic: &str, event: &Event) -> Result<(), StoreError> {
        let result = self.write(event).await;
        if let Err(e) = &result {
            let failed = self.failed.load(Ordering::Relaxed);
            warn!(
                topic,
                event_id = %event.id,
                event_type = %event.event_type,
                failed_writes = failed,
                error = %e,
                "event store write failed"
            );
        }
        result
    }

    /// One attempt, bounded by the write timeout (a timeout is transient).
    pub async fn write(&self, event: &Event) -> Result<(), StoreError> {
        if !event.is_stored() {
            return Ok(());
        }
        let write = self.store.append(std::slice::from_ref(event));
        let result = match tokio::time::timeout(self.timeout, write).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable {
                what: "storing an event".into(),
                reason: format!("no answer within {:?}", self.timeout),
            }),
        };
        match &result {
            Ok(()) => self.written.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.failed.fetch_add(1, Ordering::Relaxed),
        };
        result
    }

    /// Writes `event`, holding it while the database is unavailable until
    /// it is stored or `stopping()` turns true (then the last transient
    /// error is returned, and the caller keeps the event for later). An
    /// error that is not transient is returned at once.
    pub async fn write_held(
        &self,
        event: &Event,
        stopping: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<(), StoreError> {
        retry_transient("storing an event", Patience::UNTIL_BACK, stopping, || {
            self.write(event)
        })
        .await
    }

    /// Events stored so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Write attempts that failed (each may have been retried later).
    pub fn failed_writes(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}
