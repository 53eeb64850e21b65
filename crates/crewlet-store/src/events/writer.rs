use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crewlet_core::Event;
use tracing::warn;

use super::EventStore;

/// The queue's publish listener: stores each published event as it is
/// published (one insert per event, `ON CONFLICT DO NOTHING`). A database
/// outage is logged and counted, never returned: the event still reaches the
/// queue. `crewlet-queue` is not a dependency; the engine registers
/// `on_publish` with the queue.
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

    /// Stores `event` (published on `topic`); stream-only events are skipped.
    pub async fn on_publish(&self, topic: &str, event: &Event) {
        if !event.is_stored() {
            return;
        }
        let write = self.store.append(std::slice::from_ref(event));
        let error = match tokio::time::timeout(self.timeout, write).await {
            Ok(Ok(())) => {
                self.written.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("timed out after {:?}", self.timeout),
        };
        let failed = self.failed.fetch_add(1, Ordering::Relaxed) + 1;
        warn!(
            topic,
            event_id = %event.id,
            event_type = %event.event_type,
            failed_writes = failed,
            error = %error,
            "event store write failed; the event was still published"
        );
    }

    /// Events stored so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Writes that failed (logged, not retried).
    pub fn failed_writes(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}
