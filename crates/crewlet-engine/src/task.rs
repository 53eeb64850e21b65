//! The work a seat's inbox carries: a `task_created` event whose payload is
//! a [`TaskRequest`] (`crewlet_core::payload`, shared with the API, which
//! posts tasks too), published on `crewlet.agent.{handle}.inbox` by the
//! notification router, the scheduler or any embedder
//! ([`Engine::assign`](crate::Engine::assign)). This module adds what only
//! the engine knows: the seat's identity and the turn's trigger.

use std::time::Duration;

use crewlet_config::Seat;
use crewlet_core::payload::TaskSeat;
use crewlet_core::{Event, TraceContext};
use crewlet_turn::Trigger;
use uuid::Uuid;

pub use crewlet_core::payload::{TaskPriority, TaskRequest};

/// Namespace of the deterministic task ids derived from what caused a task
/// (a webhook event, a schedule fire), so a redelivered cause gives the same id.
const TASK_ID_NAMESPACE: Uuid = Uuid::from_u128(0x3c2b_7f1e_84a5_4d09_b6e1_52c7_a90d_1f44);

/// A config seat as a task names it.
pub(crate) fn task_seat(seat: &Seat) -> TaskSeat<'_> {
    TaskSeat {
        agent_id: seat.agent_id,
        name: seat.name.as_str(),
        handle: seat.handle.as_str(),
    }
}

/// The `task_created` event of `request` for `seat`, stamped with the span
/// it is created in: `emitted_in`, else the current tracing span, else a
/// new trace. The seat's turn then nests under that (exported) span.
pub(crate) fn task_event(
    request: &TaskRequest,
    seat: &Seat,
    task_id: &str,
    source: &str,
    emitted_in: Option<TraceContext>,
) -> Event {
    let trace = emitted_in
        .or_else(crewlet_telemetry::current_trace_context)
        .unwrap_or_else(TraceContext::new_root);
    request.to_event(task_seat(seat), task_id, source, trace)
}

/// The turn trigger for `request`, continuing the inbox event's trace.
pub(crate) fn trigger(request: &TaskRequest, event: &Event) -> Trigger {
    let task_id = event
        .task_id
        .clone()
        .unwrap_or_else(|| event.id.to_string());
    Trigger {
        task_id,
        source: request.source.clone(),
        sender: request.sender.clone(),
        channel: request.channel.clone(),
        content: request.text(),
        delegation_depth: event.delegation_depth,
        delegation_chain: request
            .ask
            .as_ref()
            .map(|a| a.chain.clone())
            .unwrap_or_default(),
        earlier: request
            .coalesced
            .iter()
            .take(request.coalesced.len().saturating_sub(1))
            .map(|m| (m.sender.clone(), m.content.clone()))
            .collect(),
        trace: event.trace(),
        timeout: request.timeout_seconds.map(Duration::from_secs),
    }
}

/// A task id derived from what caused the task, stable across redeliveries.
pub fn derived_task_id(cause: &str) -> String {
    Uuid::new_v5(&TASK_ID_NAMESPACE, cause.as_bytes()).to_string()
}

#[cfg(test)]
mod tests {
    use crewlet_config::Company;
    use crewlet_core::EventType;

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
        Seat::clone(&company.organization().seats()[0])
    }

    #[test]
    fn request_round_trips_through_the_inbox_event() {
        let mut req = TaskRequest::new("eng", "slack", "fix the build");
        req.channel = Some("C1".into());
        req.url = Some("https://x/1".into());
        let routing = TraceContext::new_root().child();
        let e = task_event(&req, &seat(), "task-1", "engine.router", Some(routing));
        assert_eq!(e.event_type, EventType::TaskCreated);
        // The task carries the span it was created in, unchanged.
        assert_eq!(e.trace(), Some(routing));
        let back = TaskRequest::from_event(&e).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(back, req);
        let t = trigger(&back, &e);
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
