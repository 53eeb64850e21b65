//! Queue benchmark, run by `cargo xtask bench queue` (release build).
//!
//! publish -> handler -> ack throughput and publish latency, for the memory
//! broker and for Pulsar on loopback; 1 producer with 1 group and with 4
//! competing members; Pulsar also with pipelined sends and at a paced
//! 1,000 events/s.
//!
//! ```text
//! cargo run --release -p crewlet-queue --features pulsar --example queue_bench -- \
//!     [--only memory|pulsar] [--memory-events N] [--pulsar-events N] [--url pulsar://127.0.0.1:6650]
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crewlet_core::{Event, EventType};
use crewlet_queue::{
    DeliveryOptions, EventHandler, EventQueue, MemoryBroker, PulsarOptions, PulsarQueue,
    Subscription, handler_fn,
};
use futures::StreamExt;
use tokio::sync::Notify;

struct Args {
    only: Option<String>,
    memory_events: usize,
    pulsar_events: usize,
    url: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        only: None,
        memory_events: 2_000_000,
        pulsar_events: 50_000,
        url: std::env::var("CREWLET_TEST_PULSAR_URL")
            .unwrap_or_else(|_| "pulsar://127.0.0.1:6650".into()),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--only" => args.only = Some(value()?),
            "--memory-events" => {
                args.memory_events = value()?.parse().map_err(|e| format!("{e}"))?
            }
            "--pulsar-events" => {
                args.pulsar_events = value()?.parse().map_err(|e| format!("{e}"))?
            }
            "--url" => args.url = value()?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

struct Row {
    backend: &'static str,
    scenario: String,
    events: usize,
    per_sec: f64,
    p50: Duration,
    p99: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Counts handled messages and wakes the bench when all arrived.
struct Counter {
    handled: AtomicUsize,
    target: usize,
    done: Notify,
}

impl Counter {
    fn new(target: usize) -> Arc<Self> {
        Arc::new(Self {
            handled: AtomicUsize::new(0),
            target,
            done: Notify::new(),
        })
    }

    fn handler(self: &Arc<Self>) -> Arc<dyn EventHandler> {
        let me = self.clone();
        handler_fn(move |_d| {
            if me.handled.fetch_add(1, Ordering::Relaxed) + 1 == me.target {
                me.done.notify_one();
            }
            async { Ok(()) }
        })
    }

    async fn wait(&self) {
        while self.handled.load(Ordering::Relaxed) < self.target {
            let _ = tokio::time::timeout(Duration::from_millis(50), self.done.notified()).await;
        }
    }
}

fn event() -> Event {
    Event::new(EventType::Other("bench.event".into()), "queue_bench")
        .with_summary("a benchmark event with a short summary")
        .with_payload(serde_json::json!({"n": 1, "text": "payload of a typical size"}))
}

async fn subscribe_members(
    nodes: &[Arc<dyn EventQueue>],
    topic: &str,
    handler: &Arc<dyn EventHandler>,
) -> Result<Vec<Subscription>, String> {
    let mut subs = Vec::new();
    for q in nodes {
        subs.push(
            q.subscribe(topic, "bench", handler.clone())
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(subs)
}

/// `bench.{scenario}.{uuid}` with the scenario reduced to topic characters.
fn bench_topic(scenario: &str) -> String {
    let slug: String = scenario
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    // An event scenario publishes to an event topic (batched producers).
    let prefix = if scenario.contains("event topic") {
        "crewlet.events.bench"
    } else {
        "bench"
    };
    format!("{prefix}.{slug}.{}", uuid::Uuid::new_v4().simple())
}

/// Sequential publishes (each awaited), latency sampled every `sample`th.
async fn run_sequential(
    backend: &'static str,
    scenario: &str,
    publisher: &dyn EventQueue,
    members: &[Arc<dyn EventQueue>],
    events: usize,
    sample: usize,
) -> Result<Row, String> {
    let topic = bench_topic(scenario);
    let counter = Counter::new(events);
    let subs = subscribe_members(members, &topic, &counter.handler()).await?;
    let shared = Arc::new(event());
    let mut lat = Vec::with_capacity(events / sample + 1);
    let start = Instant::now();
    for i in 0..events {
        if i % sample == 0 {
            let t = Instant::now();
            publisher
                .publish_shared(&topic, shared.clone())
                .await
                .map_err(|e| e.to_string())?;
            lat.push(t.elapsed());
        } else {
            publisher
                .publish_shared(&topic, shared.clone())
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    counter.wait().await;
    let elapsed = start.elapsed();
    for s in subs {
        s.close().await;
    }
    lat.sort_unstable();
    Ok(Row {
        backend,
        scenario: scenario.to_owned(),
        events,
        per_sec: events as f64 / elapsed.as_secs_f64(),
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
    })
}

/// Up to `in_flight` publishes at once.
async fn run_pipelined(
    scenario: &str,
    publisher: &dyn EventQueue,
    members: &[Arc<dyn EventQueue>],
    events: usize,
    in_flight: usize,
) -> Result<Row, String> {
    let topic = bench_topic(scenario);
    let counter = Counter::new(events);
    let subs = subscribe_members(members, &topic, &counter.handler()).await?;
    let e = event();
    let start = Instant::now();
    let results: Vec<Result<Duration, String>> = futures::stream::iter(0..events)
        .map(|_| async {
            let t = Instant::now();
            publisher
                .publish(&topic, &e)
                .await
                .map_err(|e| e.to_string())?;
            Ok(t.elapsed())
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    let mut lat = Vec::with_capacity(events);
    for r in results {
        lat.push(r?);
    }
    counter.wait().await;
    let elapsed = start.elapsed();
    for s in subs {
        s.close().await;
    }
    lat.sort_unstable();
    Ok(Row {
        backend: "pulsar",
        scenario: scenario.to_owned(),
        events,
        per_sec: events as f64 / elapsed.as_secs_f64(),
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
    })
}

/// 1,000 events/s for `seconds`: publish latency when the broker is not saturated.
async fn run_paced(
    publisher: Arc<dyn EventQueue>,
    member: Arc<dyn EventQueue>,
    seconds: u64,
) -> Result<Row, String> {
    let events = (seconds * 1000) as usize;
    let topic = format!("bench.paced.{}", uuid::Uuid::new_v4().simple());
    let counter = Counter::new(events);
    let subs = subscribe_members(&[member], &topic, &counter.handler()).await?;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(events);
    let start = Instant::now();
    for _ in 0..events {
        tick.tick().await;
        let (q, topic) = (publisher.clone(), topic.clone());
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            q.publish(&topic, &event())
                .await
                .map(|()| t.elapsed())
                .map_err(|e| e.to_string())
        }));
    }
    let mut lat = Vec::with_capacity(events);
    for t in tasks {
        lat.push(t.await.map_err(|e| e.to_string())??);
    }
    counter.wait().await;
    let elapsed = start.elapsed();
    for s in subs {
        s.close().await;
    }
    lat.sort_unstable();
    Ok(Row {
        backend: "pulsar",
        scenario: "paced 1,000 events/s, 1 group, prefetch 64".into(),
        events,
        per_sec: events as f64 / elapsed.as_secs_f64(),
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
    })
}

async fn memory_rows(events: usize) -> Result<Vec<Row>, String> {
    let broker = MemoryBroker::new();
    let node = |b: &MemoryBroker| -> Arc<dyn EventQueue> {
        Arc::new(b.client_with(DeliveryOptions::default()))
    };
    let publisher = node(&broker);
    let mut rows = Vec::new();
    // Warm-up (allocator, thread pool).
    run_sequential(
        "memory",
        "warm-up",
        &*publisher,
        std::slice::from_ref(&publisher),
        events / 10,
        64,
    )
    .await?;
    rows.push(
        run_sequential(
            "memory",
            "1 producer / 1 group",
            &*publisher,
            std::slice::from_ref(&publisher),
            events,
            64,
        )
        .await?,
    );
    let members: Vec<_> = (0..4).map(|_| node(&broker)).collect();
    rows.push(
        run_sequential(
            "memory",
            "1 producer / 4 members",
            &*publisher,
            &members,
            events,
            64,
        )
        .await?,
    );
    Ok(rows)
}

async fn pulsar_rows(url: &str, events: usize) -> Result<Vec<Row>, String> {
    let connect = |prefetch: usize| async move {
        let mut o = PulsarOptions::new(url);
        o.delivery.prefetch = prefetch;
        PulsarQueue::connect(o)
            .await
            .map(|q| Arc::new(q) as Arc<dyn EventQueue>)
            .map_err(|e| e.to_string())
    };
    let publisher = connect(64).await?;
    let mut rows = Vec::new();
    let mut nodes = vec![publisher.clone()];
    // 64 is the default (inboxes: a member must not hoard work it cannot start);
    // event-topic consumers with quick handlers can take more ahead.
    for prefetch in [64, 256] {
        let consumer = connect(prefetch).await?;
        let mut members = Vec::new();
        for _ in 0..4 {
            members.push(connect(prefetch).await?);
        }
        if prefetch == 64 {
            let sequential = (events / 20).max(1000);
            rows.push(
                run_sequential(
                    "pulsar",
                    "1 producer / 1 group, sequential, prefetch 64",
                    &*publisher,
                    std::slice::from_ref(&consumer),
                    sequential,
                    1,
                )
                .await?,
            );
        }
        let one = format!("1 producer / 1 group, 1000 in flight, prefetch {prefetch}");
        rows.push(
            run_pipelined(
                &one,
                &*publisher,
                std::slice::from_ref(&consumer),
                events,
                1000,
            )
            .await?,
        );
        let four = format!("1 producer / 4 members, 1000 in flight, prefetch {prefetch}");
        rows.push(run_pipelined(&four, &*publisher, &members, events, 1000).await?);
        if prefetch == 64 {
            rows.push(run_paced(publisher.clone(), consumer.clone(), 5).await?);
        }
        if prefetch == 256 {
            let one = "event topic (batched), 1 group, 1000 in flight, prefetch 256";
            rows.push(
                run_pipelined(
                    one,
                    &*publisher,
                    std::slice::from_ref(&consumer),
                    events,
                    1000,
                )
                .await?,
            );
            let four = "event topic (batched), 4 members, 1000 in flight, prefetch 256";
            rows.push(run_pipelined(four, &*publisher, &members, events, 1000).await?);
        }
        nodes.push(consumer);
        nodes.extend(members);
    }
    for q in nodes {
        q.shutdown().await;
    }
    Ok(rows)
}

/// The figure `key` of `cargo xtask bench ceilings`, when the xtask passed
/// its file (`CREWLET_BENCH_CEILINGS`).
fn ceiling(key: &str) -> Option<f64> {
    let path = std::env::var_os("CREWLET_BENCH_CEILINGS")?;
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn print(rows: &[Row]) {
    let e2e = ceiling("pulsar_end_to_end");
    println!(
        "{:<8} {:<64} {:>9} {:>12} {:>13} {:>13} {:>12}",
        "backend", "scenario", "events", "events/s", "publish p50", "publish p99", "of ceiling"
    );
    for r in rows {
        let share = match (r.backend, e2e) {
            ("pulsar", Some(c)) if c > 0.0 => format!("{:.1}%", 100.0 * r.per_sec / c),
            _ => "-".to_owned(),
        };
        println!(
            "{:<8} {:<64} {:>9} {:>12.0} {:>10.1} µs {:>10.1} µs {:>12}",
            r.backend,
            r.scenario,
            r.events,
            r.per_sec,
            r.p50.as_secs_f64() * 1e6,
            r.p99.as_secs_f64() * 1e6,
            share
        );
    }
    if let Some(c) = e2e {
        println!(
            "ceiling: pulsar-perf produce -> consume (Shared, unbatched) {c:.0} events/s on this broker"
        );
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("queue_bench: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("queue_bench: cannot start tokio: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(async {
        let mut rows = Vec::new();
        let mut failed = false;
        if args.only.as_deref().is_none_or(|o| o == "memory") {
            match memory_rows(args.memory_events).await {
                Ok(r) => rows.extend(r),
                Err(e) => {
                    eprintln!("memory bench failed: {e}");
                    failed = true;
                }
            }
        }
        if args.only.as_deref().is_none_or(|o| o == "pulsar") {
            match pulsar_rows(&args.url, args.pulsar_events).await {
                Ok(r) => rows.extend(r),
                Err(e) => {
                    eprintln!("pulsar bench failed (is it up? `cargo xtask services up`): {e}");
                    failed = true;
                }
            }
        }
        print(&rows);
        i32::from(failed)
    });
    std::process::exit(code);
}
