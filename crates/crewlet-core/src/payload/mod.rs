//! Typed event payloads: the contract between an event's writer and the
//! crates that read it.
//!
//! An event that any crate other than its writer reads has a payload type
//! here (or in the crate that owns the concept, e.g. the raw webhook
//! envelope in `crewlet-integrations`). The writer builds the event with
//! [`EventPayload::to_event`], readers get the type back with
//! [`EventPayload::from_event`]; nobody indexes another crate's payload by
//! string key. The stored JSON is the serde form of the type, pinned by
//! round-trip tests against stored samples, so changing a field name is a
//! visible, reviewed change of the wire format.

pub mod learning;
pub mod lenient;
pub mod provider;
pub mod task;
pub mod turn;

pub use turn::{
    AgentPhaseCompleted, AgentPhaseStarted, AgentTurnCompleted, AgentTurnProgress, BudgetExhausted,
    BudgetWarning, EffectUncertain, ExecuteMissingTool, LlmUnavailable, ProviderFallback,
    TaskCompleted, TaskFailed, TaskStarted, ToolActivated, ToolExecution, ToolSkillBlocked,
    TriggerSummary, TurnGuardBreach,
};

pub use provider::{ProviderCircuitClosed, ProviderCircuitOpened};

pub use task::{AskRef, CoalescedMessage, TaskPriority, TaskRequest, TaskSeat};

pub use learning::{
    AgentOnboarded, DiaryWritten, EpisodeRecorded, MemoryPrefetched, PrefetchBlock, ProfileUpdated,
    SkillRefined, SkillSynthesized,
};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Event, EventType};

/// Why an event's payload could not be read as a given type.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("event {id} is a {found} event, not {expected}")]
    WrongType {
        id: uuid::Uuid,
        expected: EventType,
        found: EventType,
    },
    #[error("the payload of {event_type} event {id} is malformed: {source}")]
    Malformed {
        id: uuid::Uuid,
        event_type: EventType,
        #[source]
        source: serde_json::Error,
    },
}

/// A payload type bound to the one event type it travels in.
pub trait EventPayload: Serialize + DeserializeOwned {
    /// The `type` of the events that carry this payload.
    const EVENT_TYPE: EventType;

    /// A new event of [`Self::EVENT_TYPE`] from `source` carrying `self`
    /// (stamped now, the type's default category).
    fn to_event(&self, source: impl Into<String>) -> Event {
        Event::new(Self::EVENT_TYPE, source).with_payload(self.to_payload())
    }

    /// The JSON form of `self`, as stored in `payload`.
    fn to_payload(&self) -> serde_json::Value {
        // Payload types are plain records with string keys: serializing
        // them cannot fail. Should a future type break that, the event
        // still goes out (without its payload) and the failure is logged.
        serde_json::to_value(self).unwrap_or_else(|e| {
            tracing::error!(event_type = %Self::EVENT_TYPE, error = %e, "cannot serialize an event payload");
            serde_json::Value::Null
        })
    }

    /// The payload of `event` as `Self`; an error when the event is of
    /// another type or its payload does not have this shape.
    fn from_event(event: &Event) -> Result<Self, PayloadError> {
        if event.event_type != Self::EVENT_TYPE {
            return Err(PayloadError::WrongType {
                id: event.id,
                expected: Self::EVENT_TYPE,
                found: event.event_type.clone(),
            });
        }
        Self::deserialize_payload(event)
    }

    /// Reads the payload as `Self` without checking the event's type (for
    /// payloads shared by several types, or events re-typed in transit).
    fn deserialize_payload(event: &Event) -> Result<Self, PayloadError> {
        serde_json::from_value(event.payload.clone()).map_err(|source| PayloadError::Malformed {
            id: event.id,
            event_type: event.event_type.clone(),
            source,
        })
    }

    /// `Some` when `event` is of this type and its payload reads; `None`
    /// otherwise (for readers that skip what they do not understand).
    fn read(event: &Event) -> Option<Self> {
        Self::from_event(event).ok()
    }
}
