use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{AgentId, Category, EventType, SpanId, TraceContext, TraceId};

/// The tag naming the seat (its handle) an event is about.
pub const TAG_AGENT_HANDLE: &str = "agent_handle";

/// One thing that happened, as published on the queue and kept in the event
/// store. The JSON form of this struct is the wire format.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Uuid v7: time-ordered, so ids sort roughly by creation.
    pub id: Uuid,
    #[serde(rename = "type")]
    pub event_type: EventType,
    #[serde(with = "crate::wire::timestamp")]
    pub timestamp: DateTime<Utc>,
    /// Which component emitted it, e.g. `api.webhooks`, `engine.router`.
    pub source: String,
    pub category: Category,
    #[serde(default)]
    pub summary: String,
    /// Kept as text so a malformed id from a foreign producer never drops the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<TraceId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<SpanId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<SpanId>,
    #[serde(default)]
    pub delegation_depth: u32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub payload: serde_json::Value,
}

impl Event {
    /// A new event of `event_type` from `source`, stamped now, with the
    /// type's default category (`system` for unknown types).
    pub fn new(event_type: EventType, source: impl Into<String>) -> Self {
        let category = event_type.category().unwrap_or(Category::System);
        Self {
            id: Uuid::now_v7(),
            event_type,
            timestamp: Utc::now(),
            source: source.into(),
            category,
            summary: String::new(),
            agent_id: None,
            agent_role: None,
            task_id: None,
            channel_id: None,
            sender: None,
            trace_id: None,
            span_id: None,
            parent_span_id: None,
            delegation_depth: 0,
            tags: BTreeMap::new(),
            payload: serde_json::Value::Null,
        }
    }

    pub fn with_summary(mut self, summary: impl Into<String>) -> Self {
        self.summary = summary.into();
        self
    }

    pub fn with_category(mut self, category: Category) -> Self {
        self.category = category;
        self
    }

    pub fn with_agent(mut self, id: AgentId, role: impl Into<String>) -> Self {
        self.agent_id = Some(id.to_string());
        self.agent_role = Some(role.into());
        self
    }

    pub fn with_task(mut self, task_id: impl Into<String>) -> Self {
        self.task_id = Some(task_id.into());
        self
    }

    pub fn with_channel(mut self, channel_id: impl Into<String>) -> Self {
        self.channel_id = Some(channel_id.into());
        self
    }

    pub fn with_sender(mut self, sender: impl Into<String>) -> Self {
        self.sender = Some(sender.into());
        self
    }

    pub fn with_payload(mut self, payload: serde_json::Value) -> Self {
        self.payload = payload;
        self
    }

    pub fn with_tag(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.insert(key.into(), value.into());
        self
    }

    /// Tags the event with the handle of the seat it is about.
    pub fn with_agent_handle(self, handle: impl Into<String>) -> Self {
        self.with_tag(TAG_AGENT_HANDLE, handle)
    }

    /// The handle of the seat the event is about, when tagged.
    pub fn agent_handle(&self) -> Option<&str> {
        self.tags.get(TAG_AGENT_HANDLE).map(String::as_str)
    }

    pub fn with_delegation_depth(mut self, depth: u32) -> Self {
        self.delegation_depth = depth;
        self
    }

    /// Stamps the event with the span it was emitted in.
    pub fn with_trace(mut self, ctx: TraceContext) -> Self {
        self.trace_id = Some(ctx.trace_id);
        self.span_id = Some(ctx.span_id);
        self.parent_span_id = ctx.parent_span_id;
        self
    }

    /// The span this event was emitted in, when it carries one.
    pub fn trace(&self) -> Option<TraceContext> {
        Some(TraceContext {
            trace_id: self.trace_id?,
            span_id: self.span_id?,
            parent_span_id: self.parent_span_id,
        })
    }

    /// Whether the event store keeps this event (stream-only types are not kept).
    pub fn is_stored(&self) -> bool {
        !self.event_type.is_stream_only()
    }

    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full_event() -> Event {
        Event::new(EventType::AgentPhaseCompleted, "turn")
            .with_summary("plan done")
            .with_agent(AgentId::for_seat("Acme", "eng"), "Engineer")
            .with_task("task-1")
            .with_channel("C123")
            .with_sender("U42")
            .with_trace(TraceContext::new_root().child())
            .with_delegation_depth(2)
            .with_tag("phase", "plan")
            .with_payload(json!({"input_tokens": 120, "output_tokens": 30, "model": "gpt-x"}))
    }

    #[test]
    fn full_envelope_round_trips() -> Result<(), serde_json::Error> {
        let e = full_event();
        let back = Event::from_json(&e.to_json()?)?;
        assert_eq!(back, e);
        assert_eq!(back.id.get_version_num(), 7);
        Ok(())
    }

    #[test]
    fn wire_names_match_the_envelope_spec() -> Result<(), serde_json::Error> {
        let v = serde_json::to_value(full_event())?;
        for key in [
            "id",
            "type",
            "timestamp",
            "source",
            "category",
            "summary",
            "agent_id",
            "agent_role",
            "task_id",
            "channel_id",
            "sender",
            "trace_id",
            "span_id",
            "parent_span_id",
            "delegation_depth",
            "tags",
            "payload",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {v}");
        }
        assert_eq!(v["type"], "agent_phase_completed");
        assert_eq!(v["category"], "system");
        Ok(())
    }

    #[test]
    fn unknown_type_round_trips_unchanged() -> Result<(), serde_json::Error> {
        let raw = json!({
            "id": "01938a6e-7c00-7000-8000-000000000001",
            "type": "quantum.entangled",
            "timestamp": "2026-03-12T10:30:00Z",
            "source": "future-producer",
            "category": "telemetry",
            "summary": "from a newer version",
            "delegation_depth": 0,
            "tags": {"k": "v"},
            "payload": {"nested": [1, 2, {"x": null}]}
        });
        let e: Event = serde_json::from_value(raw.clone())?;
        assert_eq!(e.event_type, EventType::Other("quantum.entangled".into()));
        assert_eq!(e.category, Category::Other("telemetry".into()));
        assert_eq!(serde_json::to_value(&e)?, raw);
        Ok(())
    }

    #[test]
    fn minimal_event_fills_defaults() -> Result<(), serde_json::Error> {
        let raw = r#"{"id":"01938a6e-7c00-7000-8000-000000000002","type":"task_started",
            "timestamp":"2026-03-12T10:30:00Z","source":"engine","category":"task"}"#;
        let e = Event::from_json(raw.as_bytes())?;
        assert_eq!(e.event_type, EventType::TaskStarted);
        assert_eq!(e.delegation_depth, 0);
        assert!(e.trace().is_none());
        assert!(e.payload.is_null());
        Ok(())
    }

    #[test]
    fn trace_context_is_carried() {
        let ctx = TraceContext::new_root().child();
        let e = Event::new(EventType::TaskStarted, "x").with_trace(ctx);
        assert_eq!(e.trace(), Some(ctx));
    }

    #[test]
    fn progress_is_not_stored_and_category_defaults_from_type() {
        assert!(!Event::new(EventType::AgentTurnProgress, "turn").is_stored());
        let e = Event::new(EventType::RawWebhook, "api");
        assert!(e.is_stored());
        assert_eq!(e.category, Category::Webhook);
        assert_eq!(
            Event::new(EventType::Other("x".into()), "s").category,
            Category::System
        );
    }

    #[test]
    fn bad_trace_id_is_a_clear_error() {
        let raw = r#"{"id":"01938a6e-7c00-7000-8000-000000000002","type":"task_started",
            "timestamp":"2026-03-12T10:30:00Z","source":"e","category":"task","trace_id":"nope"}"#;
        let err = Event::from_json(raw.as_bytes())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("trace id `nope`"), "{err}");
    }
}
