//! The payloads of a model provider's circuit breaker (`crewlet-llm`
//! decides, the engine publishes).

use serde::{Deserialize, Serialize};

use super::EventPayload;
use crate::EventType;

/// `provider_circuit_opened`: a provider failed too many calls in a row;
/// calls to it fail at once (and fall back along their chains) for the
/// cool-down, then one trial call decides whether it closes again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderCircuitOpened {
    /// The entry's name in `providers.llm`.
    pub provider: String,
    /// Failed calls in a row (the trial call's failure re-opens at 1).
    pub consecutive_failures: u32,
    pub cool_down_ms: u64,
    /// The last failure.
    pub error: String,
    pub error_class: String,
}

/// `provider_circuit_closed`: a trial call after the cool-down succeeded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderCircuitClosed {
    pub provider: String,
    /// How long the circuit was open, trial call included.
    pub open_ms: u64,
}

impl EventPayload for ProviderCircuitOpened {
    const EVENT_TYPE: EventType = EventType::ProviderCircuitOpened;
}

impl EventPayload for ProviderCircuitClosed {
    const EVENT_TYPE: EventType = EventType::ProviderCircuitClosed;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn breaker_payloads_round_trip_with_their_types() {
        let opened = ProviderCircuitOpened {
            provider: "main".into(),
            consecutive_failures: 5,
            cool_down_ms: 30_000,
            error: "provider `main`: http 503 (server): down".into(),
            error_class: "server".into(),
        };
        let event = opened.to_event("llm");
        assert_eq!(event.event_type.as_str(), "provider_circuit_opened");
        assert_eq!(event.payload["cool_down_ms"], json!(30_000));
        assert_eq!(ProviderCircuitOpened::from_event(&event).ok(), Some(opened));
        let closed = ProviderCircuitClosed {
            provider: "main".into(),
            open_ms: 31_000,
        };
        let event = closed.to_event("llm");
        assert_eq!(event.event_type.as_str(), "provider_circuit_closed");
        assert_eq!(ProviderCircuitClosed::from_event(&event).ok(), Some(closed));
    }
}
