//! Where a turn's events go. The engine adapts [`EventSink`] to the queue;
//! this crate never sees the queue.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use crewlet_core::{Event, EventType};

/// Receives every event a turn emits, in order. Emitting never fails the
/// turn: a sink that cannot deliver logs and drops.
#[async_trait]
pub trait EventSink: Send + Sync {
    async fn emit(&self, event: Event);
}

/// Keeps every event in memory (tests, the embedded default's live view).
#[derive(Debug, Default)]
pub struct MemoryEventSink {
    events: Mutex<Vec<Event>>,
}

impl MemoryEventSink {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Vec<Event>> {
        self.events.lock()
    }

    pub fn events(&self) -> Vec<Event> {
        self.lock().clone()
    }

    /// Events of one type, in order.
    pub fn of_type(&self, event_type: &EventType) -> Vec<Event> {
        self.lock()
            .iter()
            .filter(|e| &e.event_type == event_type)
            .cloned()
            .collect()
    }

    /// The wire names of the events, in order, without stream-only progress.
    pub fn stored_types(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|e| e.is_stored())
            .map(|e| e.event_type.as_str().to_owned())
            .collect()
    }

    pub fn clear(&self) {
        self.lock().clear();
    }
}

#[async_trait]
impl EventSink for MemoryEventSink {
    async fn emit(&self, event: Event) {
        self.lock().push(event);
    }
}

/// Counts events and drops them (benchmarks).
#[derive(Debug, Default)]
pub struct CountingEventSink {
    count: AtomicU64,
}

impl CountingEventSink {
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl EventSink for CountingEventSink {
    async fn emit(&self, _event: Event) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}
