//! The live stream's figures (`cargo xtask bench dashboard`):
//!
//! - **page weight**: every dashboard asset, raw and gzip-compressed (what
//!   a first visit downloads);
//! - **snapshot**: `GET /stream/snapshot` p50/p99 with `--seats` seats
//!   (default 1,000), after `--events` events applied, one request at a
//!   time over a keep-alive connection;
//! - **fan-out**: `--clients` sockets (default 50) on `WS /ws/stream` while
//!   events are published at `--rate` per second (default 10,000) for
//!   `--seconds` (default 10); each event carries its publish instant, each
//!   client measures its lag on receipt. Per second: p50 / p99 / max lag
//!   over every client, frames received, clients closed. The lag must not
//!   grow from the first second to the last.
//!
//! The API runs embedded on the memory broker with memory stores, as in
//! the engine process.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crewlet_api::ApiBuilder;
use crewlet_config::{ApiConfig, check_company};
use crewlet_core::{AgentId, Event, EventType};
use crewlet_queue::{EventQueue, MemoryQueue, topics};
use crewlet_store::{NewRevision, Stores};
use futures::StreamExt;
use parking_lot::Mutex;

struct Args {
    seats: usize,
    events: usize,
    requests: usize,
    clients: usize,
    rate: usize,
    seconds: u64,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        seats: 1000,
        events: 20_000,
        requests: 500,
        clients: 50,
        rate: 10_000,
        seconds: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--seats" => a.seats = value.parse()?,
            "--events" => a.events = value.parse()?,
            "--requests" => a.requests = value.parse()?,
            "--clients" => a.clients = value.parse()?,
            "--rate" => a.rate = value.parse()?,
            "--seconds" => a.seconds = value.parse()?,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

fn company(seats: usize) -> String {
    let mut y = String::from(
        "name: Stream Bench Co\nproviders:\n  llm:\n    main: {type: openai, model: m, api_keys: [\"${OPENAI_API_KEY}\"]}\nunits:\n",
    );
    // Ten units of seats/10 seats each.
    let per = seats.div_ceil(10);
    for u in 0..10 {
        y.push_str(&format!("  - name: Unit {u}\n    roles:\n"));
        for s in 0..per {
            let i = u * per + s;
            if i >= seats {
                break;
            }
            y.push_str(&format!("      - name: Seat {i}\n        handle: s{i}\n"));
        }
    }
    y
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn seat_event(i: usize, kind: EventType, summary: String) -> Event {
    let handle = format!("s{i}");
    Event::new(kind, "bench")
        .with_summary(summary)
        .with_agent(
            AgentId::for_seat("Stream Bench Co", &handle),
            format!("Seat {i}"),
        )
        .with_agent_handle(handle)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let a = parse_args()?;
    let (raw, gz) = crewlet_api::dashboard_page_weight();
    println!(
        "page weight: {:.1} KB raw, {:.1} KB gzip (target < 300 KB compressed: {})",
        raw as f64 / 1024.0,
        gz as f64 / 1024.0,
        if gz < 300 * 1024 { "met" } else { "NOT met" }
    );

    let stores = Stores::memory();
    let (checked, _) = check_company("bench", &company(a.seats))
        .map_err(|p| anyhow::anyhow!("bench company: {p:?}"))?;
    stores
        .config
        .create(NewRevision {
            parent_revision_id: None,
            created_by: "bench".into(),
            source: "bench".into(),
            summary: "bench".into(),
            payload: serde_json::to_value(&checked)?,
            activate: true,
        })
        .await?;
    let queue = MemoryQueue::standalone();
    let api = ApiBuilder::new(
        ApiConfig::default(),
        Arc::new(queue.clone()) as Arc<dyn EventQueue>,
        &stores,
    )
    .build()
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = api.serve(listener, std::future::pending()).await;
    });
    let http = reqwest::Client::new();
    // The feed is up once a published event reaches the snapshot.
    let probe = seat_event(0, EventType::MessageSent, "probe".into());
    queue
        .publish(&topics::events(&probe.event_type), &probe)
        .await?;
    loop {
        let snap: serde_json::Value = http
            .get(format!("{base}/stream/snapshot"))
            .send()
            .await?
            .json()
            .await?;
        if snap["cursor"] == probe.id.to_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // --- snapshot at N seats
    for n in 0..a.events {
        let i = n % a.seats;
        let kind = if n % 3 == 0 {
            EventType::MessageSent
        } else {
            EventType::ExternalNotification
        };
        let e = seat_event(i, kind, format!("event {n}"));
        queue.publish(&topics::events(&e.event_type), &e).await?;
        if n % 500 == 499 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut times = Vec::with_capacity(a.requests);
    let mut bytes = 0usize;
    for i in 0..a.requests + 50 {
        let started = Instant::now();
        let body = http
            .get(format!("{base}/stream/snapshot"))
            .send()
            .await?
            .bytes()
            .await?;
        let took = started.elapsed().as_secs_f64() * 1000.0;
        if i >= 50 {
            times.push(took);
            bytes = body.len();
        }
    }
    times.sort_by(f64::total_cmp);
    println!(
        "snapshot, {} seats, {} requests: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, {:.0} KB each (target p99 < 20 ms: {})",
        a.seats,
        a.requests,
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times.last().copied().unwrap_or(0.0),
        bytes as f64 / 1024.0,
        if percentile(&times, 0.99) < 20.0 {
            "met"
        } else {
            "NOT met"
        }
    );

    // --- fan-out
    let epoch = Instant::now();
    let seconds = usize::try_from(a.seconds)?;
    // Per second of the run: every lag seen (ms).
    let lags: Arc<Mutex<Vec<Vec<f64>>>> = Arc::new(Mutex::new(vec![Vec::new(); seconds + 5]));
    let closed = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let ws = base.replacen("http", "ws", 1);
    let mut tasks = Vec::new();
    for _ in 0..a.clients {
        let (mut socket, _) = tokio_tungstenite::connect_async(format!(
            "{ws}/ws/stream?subjects=crewlet.events.message_sent"
        ))
        .await?;
        let (lags, closed, received) = (lags.clone(), closed.clone(), received.clone());
        tasks.push(tokio::spawn(async move {
            while let Some(Ok(msg)) = socket.next().await {
                match msg {
                    tokio_tungstenite::tungstenite::Message::Text(t) => {
                        // The publish instant rides in the summary: "fan <micros>".
                        let Some(rest) = t.as_str().split("\"summary\":\"fan ").nth(1) else {
                            continue;
                        };
                        let Some(us) = rest.split('"').next().and_then(|v| v.parse::<u64>().ok())
                        else {
                            continue;
                        };
                        let now = epoch.elapsed().as_micros() as u64;
                        let lag = now.saturating_sub(us) as f64 / 1000.0;
                        let second = (us / 1_000_000) as usize;
                        received.fetch_add(1, Ordering::Relaxed);
                        if let Some(v) = lags.lock().get_mut(second) {
                            v.push(lag);
                        }
                    }
                    tokio_tungstenite::tungstenite::Message::Close(_) => {
                        closed.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    _ => {}
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let total = a.rate * seconds;
    let batch = (a.rate / 100).max(1); // every 10 ms
    let publish_started = Instant::now();
    let mut sent = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let fan_epoch = epoch.elapsed();
    while sent < total {
        tick.tick().await;
        for _ in 0..batch {
            let us = epoch.elapsed().as_micros() as u64;
            let e = seat_event(sent % a.seats, EventType::MessageSent, format!("fan {us}"));
            queue.publish(&topics::events(&e.event_type), &e).await?;
            sent += 1;
        }
    }
    let publish_secs = publish_started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(2)).await;
    for t in &tasks {
        t.abort();
    }
    println!(
        "fan-out: {} clients, {} events in {:.1} s ({:.0}/s published), {} frames received of {} expected, {} clients closed",
        a.clients,
        sent,
        publish_secs,
        sent as f64 / publish_secs,
        received.load(Ordering::Relaxed),
        sent * a.clients,
        closed.load(Ordering::Relaxed)
    );
    let first = fan_epoch.as_secs() as usize;
    println!("| second | frames | lag p50 | lag p99 | lag max |\n|---:|---:|---:|---:|---:|");
    let mut per_second = lags.lock().clone();
    for (s, v) in per_second.iter_mut().enumerate().skip(first) {
        if v.is_empty() {
            continue;
        }
        v.sort_by(f64::total_cmp);
        println!(
            "| {} | {} | {:.2} ms | {:.2} ms | {:.2} ms |",
            s - first + 1,
            v.len(),
            percentile(v, 0.5),
            percentile(v, 0.99),
            v.last().copied().unwrap_or(0.0)
        );
    }
    Ok(())
}
