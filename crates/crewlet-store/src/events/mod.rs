//! The event store (`docs/store.md`, "Event store"): every stored engine event, queryable by the
//! API (`/events`, `/events/{id}`, `/events/trace/{id}`, `/tokens/breakdown`).
//!
//! Backends: [`PostgresEventStore`] (durable), [`MemoryEventStore`] (last
//! 1000), [`CompositeEventStore`] (memory + durable), [`BufferedEventStore`]
//! (non-blocking writes in the API process). [`EventStoreWriter`] is the
//! queue publish listener; `crewlet-queue` is not a dependency: the engine
//! adapts `on_publish` to its listener type.

mod breakdown;
mod buffered;
mod composite;
mod memory;
mod postgres;
mod query;
mod writer;

use async_trait::async_trait;
use chrono::SubsecRound;
use crewlet_core::{Event, TraceId};
use uuid::Uuid;

use crate::error::StoreError;

pub use breakdown::{
    AgentGroup, BreakdownQuery, DEFAULT_RECENT_TURNS, MAX_BREAKDOWN_DAYS, MAX_PHASE_CALLS,
    MAX_TURNS_IN_BREAKDOWN, ModelGroup, PhaseGrain, PhaseGroup, PhaseTokens, TokenBreakdown,
    TokenTotals, TurnGroup, WorkerGroup, rollup,
};
pub use buffered::{BufferedEventStore, BufferedOptions};
pub use composite::CompositeEventStore;
pub use memory::{DEFAULT_MEMORY_CAPACITY, MemoryEventStore};
pub use postgres::PostgresEventStore;
pub use query::{
    Cursor, DEFAULT_PAGE_SIZE, EventPage, EventQuery, MAX_PAGE_SIZE, MAX_TRACE_EVENTS,
};
pub use writer::EventStoreWriter;

/// Stores and reads engine events. Every implementation drops stream-only
/// events (`agent_turn_progress`) on append, ignores an id it already holds,
/// and keeps timestamps to the microsecond (PostgreSQL's precision).
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Stores the events; an id already stored is ignored.
    async fn append(&self, events: &[Event]) -> Result<(), StoreError>;

    /// Newest first, filtered, keyset-paged on (timestamp, id).
    async fn recent(&self, query: &EventQuery) -> Result<EventPage, StoreError>;

    async fn get(&self, id: Uuid) -> Result<Option<Event>, StoreError>;

    /// The events of one trace, oldest first, at most [`MAX_TRACE_EVENTS`].
    async fn by_trace(&self, trace_id: &TraceId) -> Result<Vec<Event>, StoreError>;

    /// Token use of `agent_phase_completed` events over the last
    /// `since_days` days (1..=30), optionally of one agent role, by phase,
    /// model, auxiliary worker, agent role and (the `recent_turns` latest,
    /// 1..=500) turn.
    async fn token_breakdown(&self, query: &BreakdownQuery) -> Result<TokenBreakdown, StoreError>;
}

/// The events a store keeps, with timestamps cut to microseconds.
pub(crate) fn storable(events: &[Event]) -> Vec<Event> {
    events
        .iter()
        .filter(|e| e.is_stored())
        .map(|e| {
            let mut e = e.clone();
            e.timestamp = e.timestamp.trunc_subsecs(6);
            e
        })
        .collect()
}

/// `since_days` checked against 1..=30, `recent_turns` against 1..=500.
pub(crate) fn check_breakdown(query: &BreakdownQuery) -> Result<u32, StoreError> {
    if !(1..=MAX_TURNS_IN_BREAKDOWN).contains(&query.recent_turns) {
        return Err(StoreError::invalid(
            "recent_turns",
            format!(
                "{} is outside 1..={MAX_TURNS_IN_BREAKDOWN}",
                query.recent_turns
            ),
        ));
    }
    if (1..=MAX_BREAKDOWN_DAYS).contains(&query.since_days) {
        Ok(query.since_days)
    } else {
        Err(StoreError::invalid(
            "since_days",
            format!("{} is outside 1..={MAX_BREAKDOWN_DAYS}", query.since_days),
        ))
    }
}
