use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};

use async_trait::async_trait;
use chrono::{Duration, Utc};
use crewlet_core::{Event, TraceId};
use uuid::Uuid;

use super::breakdown::{BreakdownQuery, PhaseGrain, rollup};
use super::query::{Cursor, EventPage, EventQuery, MAX_TRACE_EVENTS};
use super::{EventStore, TokenBreakdown, check_breakdown, storable};
use crate::error::StoreError;

/// How many events [`MemoryEventStore::new`] keeps.
pub const DEFAULT_MEMORY_CAPACITY: usize = 1000;

/// The last N appended events (default 1000) in process memory, with the
/// same queries as the durable store. The embedded default, and the instant
/// leg of [`super::CompositeEventStore`].
#[derive(Debug)]
pub struct MemoryEventStore {
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    events: VecDeque<Event>,
    ids: HashSet<Uuid>,
}

impl Default for MemoryEventStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryEventStore {
    pub fn new() -> Self {
        Self::with_capacity(DEFAULT_MEMORY_CAPACITY)
    }

    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            state: Mutex::new(State::default()),
        }
    }

    /// How many events are held.
    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    fn select(&self, keep: impl Fn(&Event) -> bool) -> Vec<Event> {
        self.lock()
            .events
            .iter()
            .filter(|e| keep(e))
            .cloned()
            .collect()
    }
}

#[async_trait]
impl EventStore for MemoryEventStore {
    async fn append(&self, events: &[Event]) -> Result<(), StoreError> {
        let mut state = self.lock();
        for event in storable(events) {
            if !state.ids.insert(event.id) {
                continue;
            }
            state.events.push_back(event);
            while state.events.len() > self.capacity {
                if let Some(old) = state.events.pop_front() {
                    state.ids.remove(&old.id);
                }
            }
        }
        Ok(())
    }

    async fn recent(&self, query: &EventQuery) -> Result<EventPage, StoreError> {
        let candidates = self.select(|e| query.matches(e));
        Ok(EventPage::from_sorted_candidates(
            candidates,
            query.page_size(),
            false,
        ))
    }

    async fn get(&self, id: Uuid) -> Result<Option<Event>, StoreError> {
        Ok(self.lock().events.iter().find(|e| e.id == id).cloned())
    }

    async fn by_trace(&self, trace_id: &TraceId) -> Result<Vec<Event>, StoreError> {
        let mut events = self.select(|e| e.trace_id.as_ref() == Some(trace_id));
        events.sort_by_key(Cursor::of);
        events.truncate(MAX_TRACE_EVENTS);
        Ok(events)
    }

    async fn token_breakdown(&self, query: &BreakdownQuery) -> Result<TokenBreakdown, StoreError> {
        let since_days = check_breakdown(query)?;
        let since = Utc::now() - Duration::days(i64::from(since_days));
        let role = query.agent_role.as_deref();
        let events = self.select(|e| {
            e.timestamp >= since && role.is_none_or(|r| e.agent_role.as_deref() == Some(r))
        });
        Ok(rollup(
            events.iter().filter_map(PhaseGrain::from_event),
            query,
            since,
        ))
    }
}
