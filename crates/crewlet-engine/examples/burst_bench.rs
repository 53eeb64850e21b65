//! Inbox batching under a burst (`cargo xtask bench inbox`): one seat is
//! busy with a slow task while `--messages` comments (default 1,000) spread
//! over `--conversations` issues (default 50, interleaved) arrive in its
//! inbox; then it drains them. Prints the turns run (target: at most 2 per
//! conversation), the time from the first comment to an empty inbox with
//! every turn finished, and the process's memory.
//!
//! The engine runs on the memory broker and memory stores; the model is
//! the fake OpenAI-compatible server over loopback (`--model-ms` per call).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crewlet_config::Company;
use crewlet_core::payload::{TaskRequest, TaskSeat};
use crewlet_core::{AgentId, Event, EventType, TraceContext};
use crewlet_engine::{Backends, EngineBuilder, EngineOptions, SeatState};
use crewlet_queue::{EventQueue, MemoryBroker, topics};
use crewlet_store::{EventQuery, Stores};
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use serde_json::json;

const COMPANY: &str = "Burst Bench Co";

struct Args {
    messages: usize,
    conversations: usize,
    model_ms: u64,
    window: f64,
}

fn args() -> Result<Args> {
    let mut a = Args {
        messages: 1000,
        conversations: 50,
        model_ms: 20,
        window: 0.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--messages" => a.messages = value.parse()?,
            "--conversations" => a.conversations = value.parse()?,
            "--model-ms" => a.model_ms = value.parse()?,
            "--window" => a.window = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    if a.conversations == 0 {
        bail!("--conversations must be at least 1");
    }
    Ok(a)
}

fn script(model: Duration) -> Script {
    let plan = |why: &str| {
        Reply::tool_call(
            "submit_plan",
            json!({"decision": "direct", "reasoning": why, "steps": [{"intent": "answer"}]}),
        )
    };
    Script::new()
        .on(
            When::tool_offered("submit_plan").and_system_contains("slow job"),
            plan("slow").delay(Duration::from_secs(2)),
        )
        .on(
            When::tool_offered("submit_plan"),
            plan("quick").delay(model),
        )
        .on(When::any(), Reply::text("done").delay(model))
}

/// Comment `k` on conversation `c`, as the router posts it.
fn comment(c: usize, k: usize) -> Event {
    let mut r = TaskRequest::new("eng", "github", format!("comment {k} on issue {c}"));
    r.channel = Some("acme/api".into());
    r.thread = Some(c.to_string());
    r.sender = Some(format!("user{}", k % 3));
    let seat = TaskSeat {
        agent_id: AgentId::for_seat(COMPANY, "eng"),
        name: "Engineer",
        handle: "eng",
    };
    r.to_event(
        seat,
        &format!("conv{c}-msg{k}"),
        "github",
        TraceContext::new_root(),
    )
}

async fn events(stores: &Stores, t: EventType) -> Vec<Event> {
    stores
        .events
        .recent(&EventQuery {
            event_type: Some(t),
            limit: Some(500),
            ..EventQuery::default()
        })
        .await
        .map(|p| p.events)
        .unwrap_or_default()
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let a = args()?;
    let llm = FakeLlmServer::start(script(Duration::from_millis(a.model_ms))).await?;
    llm.set_recording(false);
    let company = Company::from_yaml(
        "bench",
        &format!(
            "name: {COMPANY}\nnotification_coalesce_window_seconds: {}\nproviders:\n  llm:\n    fake: {{type: openai-compatible, model: m, base_url: \"{}\"}}\nroles:\n  - {{name: Engineer, handle: eng}}\n",
            a.window,
            llm.openai_base_url()
        ),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let broker = MemoryBroker::new();
    let stores = Stores::memory();
    let queue: Arc<dyn EventQueue> = Arc::new(broker.client());
    let backends = Backends::new(queue.clone(), stores.clone());
    let options = EngineOptions {
        stream_progress: false,
        ..EngineOptions::default()
    };
    let engine = EngineBuilder::new(company, &backends)
        .options(options)
        .start()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let rss_before = status_kib("VmRSS:");

    engine
        .assign("eng", "test", "a slow job")
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while events(&stores, EventType::TaskStarted).await.is_empty() {
        if Instant::now() > deadline {
            bail!("the slow turn never started");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The events of the burst, read live (the memory event store keeps
    // only the newest events).
    let mut stream = queue.subscribe_stream("crewlet.events.>").await?;
    let seen_events: Arc<parking_lot::Mutex<Vec<Event>>> = Arc::default();
    let sink = seen_events.clone();
    let reader = tokio::spawn(async move {
        while let Some(item) = stream.recv().await {
            if matches!(
                item.event.event_type,
                EventType::TaskStarted | EventType::NotificationsCoalesced
            ) {
                sink.lock().push((*item.event).clone());
            }
        }
        stream.dropped()
    });

    let inbox = topics::agent_inbox("eng");
    let started = Instant::now();
    for i in 0..a.messages {
        let c = i % a.conversations;
        queue
            .publish(&inbox.topic, &comment(c, i / a.conversations))
            .await?;
    }
    let published = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(600);
    // Drained: nothing waits in the inbox and the seat is idle (no turn
    // running, no part in hand), twice in a row.
    let mut quiet = 0;
    let drained = loop {
        let backlog = broker.backlog(&inbox.topic, &inbox.group).unwrap_or(0);
        let idle = engine.agent_state("eng") == Some(SeatState::Idle);
        quiet = if backlog == 0 && idle { quiet + 1 } else { 0 };
        if quiet == 2 {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            bail!("the burst did not drain within 10 minutes (backlog {backlog})");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    let seen = seen_events.lock().clone();
    let turns: Vec<Event> = seen
        .iter()
        .filter(|e| e.event_type == EventType::TaskStarted)
        .filter(|e| e.task_id.as_deref().is_some_and(|t| t.starts_with("conv")))
        .cloned()
        .collect();
    let mut per_conversation: BTreeMap<String, usize> = BTreeMap::new();
    for t in &turns {
        let conv = t
            .task_id
            .as_deref()
            .and_then(|id| id.split("-msg").next())
            .unwrap_or_default()
            .to_owned();
        *per_conversation.entry(conv).or_default() += 1;
    }
    let merges: Vec<&Event> = seen
        .iter()
        .filter(|e| e.event_type == EventType::NotificationsCoalesced)
        .collect();
    let merged: u64 = merges
        .iter()
        .filter_map(|e| e.payload["count"].as_u64())
        .sum();
    let singles = turns.len() - merges.len();
    let reached = merged as usize + singles;
    let worst = per_conversation.values().copied().max().unwrap_or(0);
    let rss_after = status_kib("VmRSS:");
    let hwm = status_kib("VmHWM:");
    println!(
        "burst: {} comments over {} conversations into one busy seat (model {} ms per call, window {} s)",
        a.messages, a.conversations, a.model_ms, a.window
    );
    println!(
        "  published in {:.1} ms; drained (inbox empty, every turn done) {:.2} s after the first comment",
        published.as_secs_f64() * 1000.0,
        drained.as_secs_f64()
    );
    println!(
        "  turns: {} for {} conversations; per conversation max {worst} (target <= 2: {}); {} merged turns carried {merged} comments, {singles} single",
        turns.len(),
        per_conversation.len(),
        if worst <= 2 { "met" } else { "NOT met" },
        merges.len()
    );
    println!(
        "  comments that reached a turn: {reached} of {}",
        a.messages
    );
    println!(
        "  memory: RSS {:.1} MiB before the burst, {:.1} MiB after, peak {:.1} MiB",
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    engine.shutdown().await;
    queue.shutdown().await;
    let dropped = reader.await.unwrap_or(0);
    if dropped > 0 {
        bail!("the bench's own event stream dropped {dropped} events: figures incomplete");
    }
    if reached != a.messages {
        bail!(
            "{} comments never reached a turn",
            a.messages.abs_diff(reached)
        );
    }
    Ok(())
}
