//! The turn engine's [`EventSink`] on the queue: every event a turn emits is
//! published on `crewlet.events.{type}` (the event store writer, a publish
//! listener, stores it; `agent_turn_progress` is stream-only and never
//! stored). The sink also tells each seat which phase its turn is in.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use crewlet_core::payload::AgentPhaseStarted;
use crewlet_core::{Event, EventPayload};
use crewlet_queue::{EventQueue, topics};
use crewlet_store::EventStoreWriter;
use crewlet_turn::EventSink;
use tracing::warn;

use crate::seat::SeatRuntime;

pub(crate) struct QueueEventSink {
    queue: Arc<dyn EventQueue>,
    seats: Arc<HashMap<String, Arc<SeatRuntime>>>,
    /// Where an event goes when the broker refuses it.
    store: Option<Arc<EventStoreWriter>>,
}

impl QueueEventSink {
    pub fn new(
        queue: Arc<dyn EventQueue>,
        seats: Arc<HashMap<String, Arc<SeatRuntime>>>,
        store: Option<Arc<EventStoreWriter>>,
    ) -> Self {
        Self {
            queue,
            seats,
            store,
        }
    }
}

#[async_trait]
impl EventSink for QueueEventSink {
    async fn emit(&self, event: Event) {
        // A sub-agent runs inside Execute: the seat stays in Execute.
        if let Some(started) = AgentPhaseStarted::read(&event)
            && started.phase != "subagent"
            && let Some(seat) = event.agent_handle().and_then(|h| self.seats.get(h))
        {
            seat.set_phase(&started.phase);
        }
        let event = Arc::new(event);
        let Err(e) = try_publish_event(self.queue.as_ref(), event.clone()).await else {
            return;
        };
        let stored = match &self.store {
            Some(store) if event.is_stored() => store.write(&event).await.is_ok(),
            _ => false,
        };
        warn!(event_id = %event.id, event_type = %event.event_type, error = %e, stored,
              "cannot publish turn event; stored directly when `stored`");
    }
}

/// Publishes `event` on `crewlet.events.{type}`.
async fn try_publish_event(
    queue: &dyn EventQueue,
    event: Arc<Event>,
) -> Result<(), crewlet_queue::QueueError> {
    queue
        .publish_shared(&topics::events(&event.event_type), event)
        .await
}

/// Publishes `event` on `crewlet.events.{type}`; a failure is logged (the
/// turn goes on: events never fail the work they describe).
pub(crate) async fn publish_event(queue: &dyn EventQueue, event: Event) {
    let (id, kind) = (event.id, event.event_type.clone());
    if let Err(e) = try_publish_event(queue, Arc::new(event)).await {
        warn!(event_id = %id, event_type = %kind, error = %e, "cannot publish engine event");
    }
}
