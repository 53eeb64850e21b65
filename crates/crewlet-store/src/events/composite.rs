use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use crewlet_core::{Event, TraceId};
use tracing::warn;
use uuid::Uuid;

use super::memory::MemoryEventStore;
use super::query::{Cursor, EventPage, EventQuery, MAX_TRACE_EVENTS};
use super::{BreakdownQuery, EventStore, TokenBreakdown};
use crate::error::StoreError;

/// Memory + durable: writes go to both; reads merge both, dedupe by id and
/// prefer the durable copy. The memory leg answers for events that have not
/// reached PostgreSQL yet; if the durable store cannot be read, reads fall
/// back to memory alone (logged).
pub struct CompositeEventStore {
    memory: Arc<MemoryEventStore>,
    durable: Arc<dyn EventStore>,
}

impl CompositeEventStore {
    pub fn new(memory: Arc<MemoryEventStore>, durable: Arc<dyn EventStore>) -> Self {
        Self { memory, durable }
    }

    pub fn memory(&self) -> &Arc<MemoryEventStore> {
        &self.memory
    }

    pub fn durable(&self) -> &Arc<dyn EventStore> {
        &self.durable
    }
}

fn durable_or_warn<T>(what: &str, r: Result<T, StoreError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            warn!(error = %e, "durable event store unavailable for {what}; answering from memory");
            None
        }
    }
}

/// Durable first, so the first copy of an id kept is the durable one.
fn merge(durable: Vec<Event>, memory: Vec<Event>) -> Vec<Event> {
    let mut seen = HashSet::new();
    durable
        .into_iter()
        .chain(memory)
        .filter(|e| seen.insert(e.id))
        .collect()
}

#[async_trait]
impl EventStore for CompositeEventStore {
    /// Memory first (always succeeds), then durable; a durable error is returned.
    async fn append(&self, events: &[Event]) -> Result<(), StoreError> {
        self.memory.append(events).await?;
        self.durable.append(events).await
    }

    async fn recent(&self, query: &EventQuery) -> Result<EventPage, StoreError> {
        let (durable, memory) =
            futures::join!(self.durable.recent(query), self.memory.recent(query));
        let memory = memory?;
        let Some(durable) = durable_or_warn("recent events", durable) else {
            return Ok(memory);
        };
        let more = durable.next.is_some() || memory.next.is_some();
        Ok(EventPage::from_sorted_candidates(
            merge(durable.events, memory.events),
            query.page_size(),
            more,
        ))
    }

    async fn get(&self, id: Uuid) -> Result<Option<Event>, StoreError> {
        if let Some(Some(e)) = durable_or_warn("an event", self.durable.get(id).await) {
            return Ok(Some(e));
        }
        self.memory.get(id).await
    }

    async fn by_trace(&self, trace_id: &TraceId) -> Result<Vec<Event>, StoreError> {
        let (durable, memory) = futures::join!(
            self.durable.by_trace(trace_id),
            self.memory.by_trace(trace_id)
        );
        let memory = memory?;
        let durable = durable_or_warn("a trace", durable).unwrap_or_default();
        let mut events = merge(durable, memory);
        events.sort_by_key(Cursor::of);
        events.truncate(MAX_TRACE_EVENTS);
        Ok(events)
    }

    async fn token_breakdown(&self, query: &BreakdownQuery) -> Result<TokenBreakdown, StoreError> {
        match self.durable.token_breakdown(query).await {
            Ok(b) => Ok(b),
            Err(e @ StoreError::InvalidInput { .. }) => Err(e),
            Err(e) => {
                warn!(error = %e, "durable event store unavailable for the token breakdown; answering from memory");
                self.memory.token_breakdown(query).await
            }
        }
    }
}
