//! Event envelope round trip (`cargo xtask bench queue` prints it first):
//! an event as the queue and the store carry it (~370 bytes of JSON: ids,
//! trace context, a tag, a small payload) serialized to bytes and read
//! back, on one thread, with the allocator the `crewlet` binary uses
//! (jemalloc). Prints round trips per second, and each half alone.
//!
//! Checks on the way that the bytes are unchanged by the round trip, so a
//! faster path that changed the stored JSON would fail here.
//!
//! Beside each figure, the JSON library's own floor on the same bytes:
//! `scan` reads them into `IgnoredAny` (tokenizes and validates, builds
//! nothing), `value` round-trips them through `serde_json::Value` (the
//! generic, allocating way). A typed round trip cannot beat `scan` plus
//! writing the bytes.

use std::time::{Duration, Instant};

use crewlet_core::{AgentId, Event, EventType, SpanId, TraceId};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// ~370 bytes: the size the issue measured (a task event with trace context).
fn small() -> Event {
    let mut e = Event::new(EventType::TaskCompleted, "engine.seat")
        .with_summary("eng completed the task")
        .with_task("0193a7c2-5d1e-7c44-9d1f-2b7e4c1a9f00")
        .with_agent_handle("eng")
        .with_payload(serde_json::json!({"status": "done", "turns": 1}));
    e.agent_role = Some("Engineer".into());
    e.trace_id = Some(TraceId::random());
    e.span_id = Some(SpanId::random());
    e
}

/// ~680 bytes: a phase event with its token counts.
fn phase() -> Event {
    let mut e = Event::new(EventType::AgentPhaseCompleted, "engine.turn")
        .with_summary("eng finished execute")
        .with_agent(AgentId::from_uuid(uuid::Uuid::now_v7()), "Engineer")
        .with_task("task-0193a7c2-5d1e-7c44-9d1f-2b7e4c1a9f00")
        .with_agent_handle("eng")
        .with_payload(serde_json::json!({
            "phase": "execute",
            "model": "gpt-4.1-mini",
            "provider": "openai",
            "turn_id": "0193a7c2-5d1e-7c44-9d1f-2b7e4c1a9f01",
            "input_tokens": 1834,
            "output_tokens": 212,
            "calls": 3,
            "duration_ms": 2210
        }));
    e.trace_id = Some(TraceId::random());
    e.span_id = Some(SpanId::random());
    e.parent_span_id = Some(SpanId::random());
    e
}

fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64()
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    println!(
        "| envelope | bytes | serialize /s | deserialize /s | round trip /s | ns per round trip | scan only /s | Value round trip /s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, event) in [("task event", small()), ("phase event", phase())] {
        measure(name, &event, n);
    }
}

fn measure(name: &str, event: &Event, n: usize) {
    let event = event.clone();
    let bytes = match serde_json::to_vec(&event) {
        Ok(b) => b,
        Err(e) => panic!("cannot serialize the sample: {e}"),
    };
    let back: Event = match serde_json::from_slice(&bytes) {
        Ok(e) => e,
        Err(e) => panic!("cannot read the sample back: {e}"),
    };
    assert_eq!(back, event, "the round trip changed the event");
    assert_eq!(
        serde_json::to_vec(&back).ok().as_deref(),
        Some(bytes.as_slice()),
        "the round trip changed the JSON"
    );
    // Warm-up.
    for _ in 0..n / 10 {
        let b = serde_json::to_vec(&event).unwrap_or_default();
        std::hint::black_box(serde_json::from_slice::<Event>(&b).ok());
    }
    let started = Instant::now();
    let mut total = 0usize;
    for _ in 0..n {
        let b = serde_json::to_vec(std::hint::black_box(&event)).unwrap_or_default();
        total += b.len();
    }
    let ser = started.elapsed();
    let started = Instant::now();
    for _ in 0..n {
        std::hint::black_box(serde_json::from_slice::<Event>(std::hint::black_box(&bytes)).ok());
    }
    let de = started.elapsed();
    let started = Instant::now();
    for _ in 0..n {
        let b = serde_json::to_vec(std::hint::black_box(&event)).unwrap_or_default();
        std::hint::black_box(serde_json::from_slice::<Event>(&b).ok());
    }
    let both = started.elapsed();
    std::hint::black_box(total);
    let started = Instant::now();
    for _ in 0..n {
        std::hint::black_box(
            serde_json::from_slice::<serde::de::IgnoredAny>(std::hint::black_box(&bytes)).ok(),
        );
    }
    let scan = started.elapsed();
    let started = Instant::now();
    for _ in 0..n {
        let v = serde_json::from_slice::<serde_json::Value>(std::hint::black_box(&bytes))
            .unwrap_or_default();
        std::hint::black_box(serde_json::to_vec(&v).unwrap_or_default());
    }
    let value = started.elapsed();

    println!(
        "| {name} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
        bytes.len(),
        rate(n, ser),
        rate(n, de),
        rate(n, both),
        both.as_nanos() as f64 / n as f64,
        rate(n, scan),
        rate(n, value),
    );
}
