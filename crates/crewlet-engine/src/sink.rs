//! The turn engine's [`EventSink`] on the queue: every event a turn emits is
//! published on `crewlet.events.{type}` (the event store writer, a publish
//! listener, stores it; `agent_turn_progress` is stream-only and never
//! stored). The sink also tells each seat which phase its turn is in.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use crewlet_core::{Event, EventType};
use crewlet_queue::{EventQueue, topics};
use crewlet_turn::EventSink;
use tracing::warn;

use crate::seat::SeatRuntime;

pub(crate) struct QueueEventSink {
    queue: Arc<dyn EventQueue>,
    seats: Arc<HashMap<String, Arc<SeatRuntime>>>,
}

impl QueueEventSink {
    pub fn new(queue: Arc<dyn EventQueue>, seats: Arc<HashMap<String, Arc<SeatRuntime>>>) -> Self {
        Self { queue, seats }
    }
}

#[async_trait]
impl EventSink for QueueEventSink {
    async fn emit(&self, event: Event) {
        if event.event_type == EventType::AgentPhaseStarted
            && let Some(seat) = event
                .tags
                .get("agent_handle")
                .and_then(|h| self.seats.get(h))
            && let Some(phase) = event.payload.get("phase").and_then(|p| p.as_str())
        {
            seat.set_phase(phase);
        }
        publish_event(self.queue.as_ref(), event).await;
    }
}

/// Publishes `event` on `crewlet.events.{type}`; a failure is logged (the
/// turn goes on: events never fail the work they describe).
pub(crate) async fn publish_event(queue: &dyn EventQueue, event: Event) {
    let topic = topics::events(&event.event_type);
    let (id, kind) = (event.id, event.event_type.clone());
    if let Err(e) = queue.publish_shared(&topic, Arc::new(event)).await {
        warn!(topic, event_id = %id, event_type = %kind, error = %e, "cannot publish engine event");
    }
}
