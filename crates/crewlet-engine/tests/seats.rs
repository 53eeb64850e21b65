//! Seat runtimes on the memory broker: work waits in the durable inbox
//! across an engine restart and runs exactly once; one turn at a time per
//! seat under the global cap; hooks see spawns and task state changes.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_engine::{Backends, Engine, EngineBuilder, EngineOptions, SeatState};
use crewlet_queue::{MemoryBroker, topics};
use crewlet_store::Stores;
use crewlet_test_support::fake_llm::FakeLlmServer;

const WAIT: Duration = Duration::from_secs(60);

fn company(name: &str, base_url: &str, seats: &[&str], max_concurrent: u32) -> Company {
    let mut yaml = format!(
        "name: \"{name}\"\nturn_engine:\n  max_concurrent_turns: {max_concurrent}\nproviders:\n  llm:\n    fake: {{type: openai-compatible, model: fake-model, base_url: \"{base_url}\"}}\nroles:\n"
    );
    for s in seats {
        yaml.push_str(&format!("  - {{name: Seat {s}, handle: {s}}}\n"));
    }
    Company::from_yaml("test company", &yaml).unwrap_or_else(|e| panic!("{e}"))
}

fn options() -> EngineOptions {
    EngineOptions {
        drain_timeout: Duration::from_secs(30),
        stream_progress: false,
        ..EngineOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_waiting_in_the_inbox_survive_a_restart_and_run_exactly_once() {
    let llm = FakeLlmServer::start(direct_turn(Duration::from_millis(250)))
        .await
        .unwrap_or_else(|e| panic!("fake llm: {e}"));
    let broker = MemoryBroker::new();
    let stores = Stores::memory();
    let c = company("Restart Co", &llm.openai_base_url(), &["eng"], 10);

    let a = Backends::new(Arc::new(broker.client()), stores.clone());
    let first = EngineBuilder::new(c.clone(), &a)
        .options(options())
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut task_ids = Vec::new();
    for i in 0..5 {
        let id = first
            .assign("eng", "test", &format!("task number {i}"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        task_ids.push(id);
    }
    // Stop while the first turn runs and the rest sit in the inbox.
    wait_for("the first turn to start", WAIT, || async {
        (!events_of(&stores, EventType::TaskStarted).await.is_empty()).then_some(())
    })
    .await;
    let summary = first.shutdown().await;
    assert_eq!(summary.abandoned_turns, 0);
    a.queue.shutdown().await;
    assert_eq!(first.agent_state("eng"), Some(SeatState::Terminated));
    let inbox = topics::agent_inbox("eng");
    let waiting = broker.backlog(&inbox.topic, &inbox.group).unwrap_or(0);
    let done_before = events_of(&stores, EventType::TaskCompleted).await.len();
    assert!(
        waiting >= 1,
        "tasks should be waiting in the inbox (waiting {waiting}, done {done_before})"
    );
    assert_eq!(waiting + done_before, 5, "nothing dropped, nothing doubled");

    // A new engine on the same broker picks the waiting work up.
    let b = Backends::new(Arc::new(broker.client()), stores.clone());
    let builder = EngineBuilder::new(c, &b).options(options());
    let spawned = Arc::new(Mutex::new(Vec::new()));
    let seen = spawned.clone();
    let _spawn_hook = builder.on_agent_spawn(move |e| {
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(e.agent_role.clone());
    });
    let completed = Arc::new(Mutex::new(Vec::new()));
    let seen = completed.clone();
    let _task_hook = builder.on_task_state_change(move |e| {
        if e.event_type == EventType::TaskCompleted {
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(e.task_id.clone());
        }
    });
    let second = builder.start().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spawned.lock().map(|v| v.len()).unwrap_or(0), 1);
    wait_for("all five tasks to complete", WAIT, || async {
        (events_of(&stores, EventType::TaskCompleted).await.len() >= 5).then_some(())
    })
    .await;
    // Anything doubled would show up by now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = per_task(&events_of(&stores, EventType::TaskStarted).await);
    let completed_by_task = per_task(&events_of(&stores, EventType::TaskCompleted).await);
    for id in &task_ids {
        assert_eq!(started.get(id), Some(&1), "task {id} started {started:?}");
        assert_eq!(
            completed_by_task.get(id),
            Some(&1),
            "task {id} completed {completed_by_task:?}"
        );
    }
    assert_eq!(started.len(), 5);
    assert_eq!(
        completed.lock().map(|v| v.len()).unwrap_or(0),
        5 - done_before,
        "the hook saw the second engine's completions"
    );
    assert_eq!(broker.backlog(&inbox.topic, &inbox.group), Some(0));
    let usage = second.usage_summary();
    assert!(
        usage.engine.call_count >= 2 * (5 - done_before as u64),
        "{usage:?}"
    );
    second.shutdown().await;
    b.queue.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_turn_per_seat_and_a_global_cap() {
    let llm = FakeLlmServer::start(direct_turn(Duration::from_millis(150)))
        .await
        .unwrap_or_else(|e| panic!("fake llm: {e}"));
    let backends = Backends::memory();
    let c = company("Cap Co", &llm.openai_base_url(), &["a", "b", "c"], 2);
    let builder = EngineBuilder::new(c, &backends).options(options());

    #[derive(Default)]
    struct Tally {
        running: HashMap<String, i64>,
        total: i64,
        max_total: i64,
        max_per_seat: i64,
        completed: usize,
        created: usize,
    }
    let tally = Arc::new(Mutex::new(Tally::default()));
    let t = tally.clone();
    let _hook = builder.on_task_state_change(move |e| {
        let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
        let seat = e.tags.get("agent_handle").cloned().unwrap_or_default();
        match e.event_type {
            EventType::TaskStarted => {
                let n = t.running.entry(seat).or_insert(0);
                *n += 1;
                let per = *n;
                t.total += 1;
                t.max_total = t.max_total.max(t.total);
                t.max_per_seat = t.max_per_seat.max(per);
            }
            EventType::TaskCompleted | EventType::TaskFailed => {
                *t.running.entry(seat).or_insert(0) -= 1;
                t.total -= 1;
                t.completed += 1;
            }
            // Published on the inbox and on the event stream: seen once.
            EventType::TaskCreated => t.created += 1,
            _ => {}
        }
    });
    let engine: Engine = builder.start().await.unwrap_or_else(|e| panic!("{e}"));
    for seat in ["a", "b", "c"] {
        for i in 0..2 {
            engine
                .assign(seat, "test", &format!("job {i} for {seat}"))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    wait_for("six tasks to finish", WAIT, || async {
        (tally.lock().map(|t| t.completed).unwrap_or(0) >= 6).then_some(())
    })
    .await;
    let (max_per_seat, max_total, created) = {
        let t = tally.lock().unwrap_or_else(|p| p.into_inner());
        (t.max_per_seat, t.max_total, t.created)
    };
    assert_eq!(created, 6, "each task_created reaches the hook once");
    assert_eq!(max_per_seat, 1, "a seat ran two turns at once");
    assert!(
        max_total <= 2,
        "the global cap of 2 was exceeded: {max_total}"
    );
    // `task_completed` is published inside the turn, just before the seat
    // marks itself idle: wait for that, do not sample it.
    wait_for("seat a to be idle", WAIT, || async {
        (engine.agent_state("a") == Some(SeatState::Idle)).then_some(())
    })
    .await;
    let summary = engine.usage_summary();
    assert_eq!(summary.agents.len(), 3);
    assert_eq!(
        summary.engine.call_count, 12,
        "two completions per direct turn"
    );
    engine.shutdown().await;
    backends.queue.shutdown().await;
}
