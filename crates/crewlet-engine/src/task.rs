//! The work a seat's inbox carries: a `task_created` event whose payload is a
//! [`TaskRequest`], published on `crewlet.agent.{handle}.inbox` by the
//! notification router, the scheduler or any embedder
//! ([`Engine::assign`](crate::Engine::assign)).

use std::time::Duration;

use crewlet_config::Seat;
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_turn::Trigger;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Namespace of the deterministic task ids derived from what caused a task
/// (a webhook event, a schedule fire), so a redelivered cause gives the same id.
const TASK_ID_NAMESPACE: Uuid = Uuid::from_u128(0x3c2b_7f1e_84a5_4d09_b6e1_52c7_a90d_1f44);

/// What a seat is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRequest {
    /// The seat that does the work.
    pub handle: String,
    /// The request as the seat reads it.
    pub content: String,
    /// Where it came from: `slack`, `github`, `schedule`, `api`, ...
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// Chat channel or project the reply belongs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Conversation inside the channel (Slack thread ts, issue number, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The routing rule or schedule that chose the seat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Time allowed for the turn (a schedule's `timeout_seconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

impl TaskRequest {
    pub fn new(
        handle: impl Into<String>,
        source: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            handle: handle.into(),
            content: content.into(),
            source: source.into(),
            sender: None,
            channel: None,
            thread: None,
            url: None,
            reason: None,
            timeout_seconds: None,
        }
    }

    /// The `task_created` event for `seat`, stamped with the span it is
    /// created in: `emitted_in`, else the current tracing span, else a new
    /// trace. The seat's turn then nests under that (exported) span.
    /// `task_id` names the task in every event of the turn.
    pub fn to_event(
        &self,
        seat: &Seat,
        task_id: &str,
        source: &str,
        emitted_in: Option<TraceContext>,
    ) -> Event {
        let trace = emitted_in
            .or_else(crewlet_telemetry::current_trace_context)
            .unwrap_or_else(TraceContext::new_root);
        let mut summary: String = self.content.chars().take(120).collect();
        if self.content.chars().count() > 120 {
            summary.push_str("...");
        }
        let mut event = Event::new(EventType::TaskCreated, source)
            .with_summary(format!("task for {}: {summary}", seat.handle))
            .with_agent(seat.agent_id, seat.name.as_str())
            .with_task(task_id)
            .with_trace(trace)
            .with_agent_handle(seat.handle.as_str())
            .with_tag("task_source", self.source.as_str())
            .with_payload(serde_json::to_value(self).unwrap_or_default());
        if let Some(channel) = &self.channel {
            event = event.with_channel(channel.as_str());
        }
        if let Some(sender) = &self.sender {
            event = event.with_sender(sender.as_str());
        }
        event
    }

    /// Reads the request of an inbox event.
    pub fn from_event(event: &Event) -> Result<Self, serde_json::Error> {
        Self::deserialize(&event.payload)
    }

    /// The turn trigger for this request, continuing the inbox event's trace.
    pub fn trigger(&self, event: &Event) -> Trigger {
        let task_id = event
            .task_id
            .clone()
            .unwrap_or_else(|| event.id.to_string());
        let mut content = self.content.clone();
        if let Some(url) = &self.url
            && !content.contains(url.as_str())
        {
            content.push_str(&format!("\n\nLink: {url}"));
        }
        Trigger {
            task_id,
            source: self.source.clone(),
            sender: self.sender.clone(),
            channel: self.channel.clone(),
            content,
            delegation_depth: event.delegation_depth,
            trace: event.trace(),
            timeout: self.timeout_seconds.map(Duration::from_secs),
        }
    }
}

/// A task id derived from what caused the task, stable across redeliveries.
pub fn derived_task_id(cause: &str) -> String {
    Uuid::new_v5(&TASK_ID_NAMESPACE, cause.as_bytes()).to_string()
}

#[cfg(test)]
mod tests {
    use crewlet_config::Company;

    use super::*;

    fn seat() -> Seat {
        let company = Company::from_yaml(
            "t",
            &format!(
                "name: T\nroles:\n  - name: Eng\n    handle: eng\n{}",
                crate::TEST_LLM
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        company.organization().seats()[0].clone()
    }

    #[test]
    fn request_round_trips_through_the_inbox_event() {
        let mut req = TaskRequest::new("eng", "slack", "fix the build");
        req.channel = Some("C1".into());
        req.url = Some("https://x/1".into());
        let routing = TraceContext::new_root().child();
        let e = req.to_event(&seat(), "task-1", "engine.router", Some(routing));
        assert_eq!(e.event_type, EventType::TaskCreated);
        // The task carries the span it was created in, unchanged.
        assert_eq!(e.trace(), Some(routing));
        let back = TaskRequest::from_event(&e).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(back, req);
        let t = back.trigger(&e);
        assert_eq!(t.task_id, "task-1");
        assert_eq!(t.trace, e.trace());
        assert!(t.content.contains("https://x/1"));
    }

    #[test]
    fn derived_ids_are_stable() {
        assert_eq!(derived_task_id("a"), derived_task_id("a"));
        assert_ne!(derived_task_id("a"), derived_task_id("b"));
    }
}
