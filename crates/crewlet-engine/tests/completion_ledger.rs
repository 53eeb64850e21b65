//! The completion ledger across engine restarts: a trigger a seat already
//! worked is acknowledged without a turn when the broker delivers it again
//! to a fresh engine (another node, or this one restarted), and
//! `turn_trigger_skipped` says so; a new trigger still runs.

mod common;

use std::time::Duration;

use common::*;
use crewlet_core::payload::{TaskRequest, TaskSeat};
use crewlet_core::{EventType, TraceContext};
use crewlet_engine::{Backends, EngineBuilder, EngineOptions};
use crewlet_test_support::fake_llm::FakeLlmServer;

const WAIT: Duration = Duration::from_secs(60);

fn options() -> EngineOptions {
    EngineOptions {
        start_mcp: false,
        maintenance_interval: None,
        stream_progress: false,
        ..EngineOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_trigger_that_was_worked_runs_no_second_turn() {
    let llm = FakeLlmServer::start(direct_turn(Duration::ZERO))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let yaml = format!(
        "name: Ledger Co\nproviders:\n  llm:\n    m: {{type: openai-compatible, model: m, base_url: \"{}\"}}\nroles:\n  - {{name: Engineer, handle: eng}}\n",
        llm.openai_base_url()
    );
    let company = crewlet_config::Company::from_yaml("t", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let backends = Backends::memory();
    let org = company.organization();
    let seat = org.seat("eng").unwrap_or_else(|| panic!("no seat"));
    let trigger = TaskRequest::new("eng", "test", "do the thing").to_event(
        TaskSeat {
            agent_id: seat.agent_id,
            name: &seat.name,
            handle: &seat.handle,
        },
        "task-ledger-1",
        "test",
        TraceContext::new_root(),
    );
    let inbox = crewlet_queue::topics::agent_inbox("eng");

    // The first engine works the trigger.
    let first = EngineBuilder::new(company.clone(), &backends)
        .options(options())
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = backends.queue.publish(&inbox.topic, &trigger).await;
    wait_for("the task to complete", WAIT, || async {
        let done = events_of(&backends.stores, EventType::TaskCompleted).await;
        (!done.is_empty()).then_some(())
    })
    .await;
    first.shutdown().await;
    let asked = llm.request_count();

    // A fresh engine gets the same delivery again: no turn.
    let second = EngineBuilder::new(company, &backends)
        .options(options())
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = backends.queue.publish(&inbox.topic, &trigger).await;
    let skipped = wait_for("the repeat to be skipped", WAIT, || async {
        let s = events_of(&backends.stores, EventType::TurnTriggerSkipped).await;
        (!s.is_empty()).then_some(s)
    })
    .await;
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].task_id.as_deref(), Some("task-ledger-1"));
    assert_eq!(llm.request_count(), asked, "the model was asked again");
    assert_eq!(
        events_of(&backends.stores, EventType::TaskCompleted)
            .await
            .len(),
        1
    );
    let rows = backends
        .stores
        .completions
        .for_task("task-ledger-1")
        .await
        .unwrap_or_default();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].trigger_id, trigger.id);
    assert_eq!(rows[0].outcome, "direct");

    // A new trigger of the same seat still runs.
    let again = engine_assign(&second).await;
    wait_for("the new task to complete", WAIT, || async {
        let done = events_of(&backends.stores, EventType::TaskCompleted).await;
        done.iter()
            .any(|e| e.task_id.as_deref() == Some(again.as_str()))
            .then_some(())
    })
    .await;
    second.shutdown().await;
}

async fn engine_assign(engine: &crewlet_engine::Engine) -> String {
    engine
        .assign("eng", "test", "another thing")
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
