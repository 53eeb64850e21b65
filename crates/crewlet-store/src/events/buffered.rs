use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use crewlet_core::{Event, TraceId};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::warn;
use uuid::Uuid;

use super::query::{EventPage, EventQuery};
use super::{BreakdownQuery, EventStore, TokenBreakdown};
use crate::error::StoreError;

/// Knobs of [`BufferedEventStore`].
#[derive(Clone, Copy, Debug)]
pub struct BufferedOptions {
    /// Background flush period (default 1 s).
    pub flush_interval: Duration,
    /// A full batch is flushed at once without waiting (default 1000).
    pub batch_size: usize,
    /// Most events held; more are dropped and counted (default 10 000).
    pub capacity: usize,
}

impl Default for BufferedOptions {
    fn default() -> Self {
        Self {
            flush_interval: Duration::from_secs(1),
            batch_size: 1000,
            capacity: 10_000,
        }
    }
}

/// Non-blocking writes for the API process: [`push`](Self::push) only
/// queues; a background task flushes every second, or as soon as a batch
/// fills. At most `capacity` events wait; overflow is dropped, counted in
/// [`dropped`](Self::dropped) and logged. A failed flush keeps its batch for
/// the next try. Call [`shutdown`](Self::shutdown) to flush what is left.
/// Reads go straight to the wrapped store.
pub struct BufferedEventStore {
    shared: Arc<Shared>,
    task: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    store: Arc<dyn EventStore>,
    options: BufferedOptions,
    queue: Mutex<VecDeque<Event>>,
    wake: Notify,
    flushing: tokio::sync::Mutex<()>,
    closing: AtomicBool,
    dropped: AtomicU64,
    written: AtomicU64,
    failed_flushes: AtomicU64,
}

impl Shared {
    fn lock(&self) -> parking_lot::MutexGuard<'_, VecDeque<Event>> {
        self.queue.lock()
    }

    fn drop_events(&self, n: usize) {
        if n == 0 {
            return;
        }
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        let total = self.dropped.fetch_add(n, Ordering::Relaxed) + n;
        // Log the first drop and then every 1000th, not every event.
        if total == n || total / 1000 != (total - n) / 1000 {
            warn!(
                dropped_total = total,
                capacity = self.options.capacity,
                "event buffer full; events dropped"
            );
        }
    }

    /// Writes everything queued, batch by batch. On failure the batch goes
    /// back to the front of the queue and the error is returned.
    async fn flush(&self) -> Result<(), StoreError> {
        let _one_at_a_time = self.flushing.lock().await;
        loop {
            let batch: Vec<Event> = {
                let mut queue = self.lock();
                let n = queue.len().min(self.options.batch_size.max(1));
                queue.drain(..n).collect()
            };
            if batch.is_empty() {
                return Ok(());
            }
            if let Err(e) = self.store.append(&batch).await {
                self.failed_flushes.fetch_add(1, Ordering::Relaxed);
                let mut queue = self.lock();
                let room = self.options.capacity.saturating_sub(queue.len());
                let keep = batch.len().min(room);
                let lost = batch.len() - keep;
                for event in batch.into_iter().take(keep).rev() {
                    queue.push_front(event);
                }
                drop(queue);
                self.drop_events(lost);
                return Err(e);
            }
            self.written.fetch_add(
                u64::try_from(batch.len()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
    }
}

async fn run(shared: Weak<Shared>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let Some(s) = shared.upgrade() else {
            return;
        };
        tokio::select! {
            _ = tick.tick() => {}
            _ = s.wake.notified() => {}
        }
        if let Err(e) = s.flush().await {
            warn!(error = %e, pending = s.lock().len(), "event buffer flush failed; will retry");
        }
        if s.closing.load(Ordering::Acquire) {
            return;
        }
    }
}

impl BufferedEventStore {
    /// Wraps `store` and starts the flush task (needs a tokio runtime).
    pub fn new(store: Arc<dyn EventStore>, options: BufferedOptions) -> Self {
        let shared = Arc::new(Shared {
            store,
            options,
            queue: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
            flushing: tokio::sync::Mutex::new(()),
            closing: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            failed_flushes: AtomicU64::new(0),
        });
        let task = tokio::spawn(run(Arc::downgrade(&shared), options.flush_interval));
        Self {
            shared,
            task: Mutex::new(Some(task)),
        }
    }

    /// Queues one event without waiting. `false` when it was dropped because
    /// the buffer is full (or the store is shut down). Stream-only events are
    /// skipped (and count as accepted).
    pub fn push(&self, event: Event) -> bool {
        if !event.is_stored() {
            return true;
        }
        let s = &self.shared;
        if s.closing.load(Ordering::Acquire) {
            s.drop_events(1);
            return false;
        }
        let mut queue = s.lock();
        if queue.len() >= s.options.capacity {
            drop(queue);
            s.drop_events(1);
            return false;
        }
        queue.push_back(event);
        let full_batch = queue.len() >= s.options.batch_size;
        drop(queue);
        if full_batch {
            s.wake.notify_one();
        }
        true
    }

    /// Events dropped because the buffer was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Events written to the wrapped store.
    pub fn written(&self) -> u64 {
        self.shared.written.load(Ordering::Relaxed)
    }

    /// Flushes that failed (their events were kept for the next try).
    pub fn failed_flushes(&self) -> u64 {
        self.shared.failed_flushes.load(Ordering::Relaxed)
    }

    /// Events waiting for a flush.
    pub fn pending(&self) -> usize {
        self.shared.lock().len()
    }

    /// Writes everything queued now.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.shared.flush().await
    }

    /// Stops the flush task and writes what is left. Later pushes are
    /// dropped (and counted). An error means events are still pending.
    pub async fn shutdown(&self) -> Result<(), StoreError> {
        self.shared.closing.store(true, Ordering::Release);
        self.shared.wake.notify_one();
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
        self.shared.flush().await
    }
}

impl Drop for BufferedEventStore {
    fn drop(&mut self) {
        let pending = self.pending();
        if pending > 0 {
            warn!(
                pending,
                "buffered event store dropped without shutdown; events lost"
            );
        }
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

#[async_trait]
impl EventStore for BufferedEventStore {
    /// Queues the events (never waits for the database); overflow is counted.
    async fn append(&self, events: &[Event]) -> Result<(), StoreError> {
        for e in events {
            self.push(e.clone());
        }
        Ok(())
    }

    async fn recent(&self, query: &EventQuery) -> Result<EventPage, StoreError> {
        self.shared.store.recent(query).await
    }

    async fn get(&self, id: Uuid) -> Result<Option<Event>, StoreError> {
        self.shared.store.get(id).await
    }

    async fn by_trace(&self, trace_id: &TraceId) -> Result<Vec<Event>, StoreError> {
        self.shared.store.by_trace(trace_id).await
    }

    async fn token_breakdown(&self, query: &BreakdownQuery) -> Result<TokenBreakdown, StoreError> {
        self.shared.store.token_breakdown(query).await
    }
}
