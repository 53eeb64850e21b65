//! `cargo xtask bench store` (or `cargo run --release -p crewlet-store
//! --example store_bench -- [--events N] [--quick]`): event store throughput
//! and token-breakdown latency against the PostgreSQL from
//! `cargo xtask services up`, in a throw-away database.
//!
//! Measures, in order:
//! 1. sustained inserts/s through `BufferedEventStore` (the producer waits
//!    only when the 10 000-event buffer is full, so nothing is dropped);
//! 2. inserts/s through `EventStoreWriter::on_publish`, one awaited insert
//!    per event, like a publish listener;
//! 3. a raw binary `COPY` of the same rows, 20 000 per COPY (the practical
//!    ceiling);
//! 4. `token_breakdown` latency over N stored events (default 1 000 000,
//!    loaded with COPY over the last 30 days, 40% `agent_phase_completed`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{Duration as Days, Utc};
use crewlet_core::{AgentId, Event, EventType, TraceContext};
use crewlet_store::partitions::ensure_partitions_between;
use crewlet_store::{
    BufferedEventStore, BufferedOptions, Database, EventStore, EventStoreWriter, MigrationOptions,
    Migrator, PostgresEventStore,
};
use crewlet_test_support::database::FreshDatabase;
use serde_json::json;

struct Args {
    events: usize,
    buffered: usize,
    per_publish: usize,
    phase_share: f64,
    /// Only the raw COPY (the ceiling `cargo xtask bench ceilings` reads).
    copy_only: bool,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        events: 1_000_000,
        buffered: 200_000,
        per_publish: 20_000,
        phase_share: 0.4,
        copy_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--events" => a.events = value()?.parse()?,
            "--buffered" => a.buffered = value()?.parse()?,
            "--per-publish" => a.per_publish = value()?.parse()?,
            "--phase-share" => a.phase_share = value()?.parse()?,
            "--copy-only" => a.copy_only = true,
            "--quick" => {
                a.events = 100_000;
                a.buffered = 20_000;
                a.per_publish = 2_000;
            }
            other => bail!(
                "unknown flag {other}; flags: --events N --buffered N --per-publish N --phase-share F --copy-only --quick"
            ),
        }
    }
    Ok(a)
}

/// A deterministic mix of engine events spread over `span` before now.
struct Generator {
    agents: Vec<(AgentId, String)>,
    n: u64,
    phase_share: f64,
}

impl Generator {
    fn new(phase_share: f64) -> Self {
        let agents = (0..20)
            .map(|i| {
                let handle = format!("agent-{i}");
                (AgentId::for_seat("Bench", &handle), handle)
            })
            .collect();
        Self {
            agents,
            n: 0,
            phase_share,
        }
    }

    fn next(&mut self, span: Days) -> Event {
        self.n += 1;
        let n = self.n;
        // splitmix-style scramble: cheap, deterministic, well spread
        let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 31;
        let agent = &self.agents[(x % 20) as usize];
        let span_ms = span.num_milliseconds().max(1) as u64;
        let ts = Utc::now() - Days::milliseconds(((x >> 8) % span_ms) as i64);
        let turn = format!("turn-{}", n / 12);
        let is_phase = ((x >> 40) % 1000) as f64 / 1000.0 < self.phase_share;
        let base = if is_phase {
            let phases = ["plan", "execute", "execute", "review", "auxiliary"];
            let phase = phases[((x >> 16) % 5) as usize];
            let model = ["gpt-large", "gpt-mini", "claude-big", "local"][((x >> 20) % 4) as usize];
            let mut payload = json!({
                "phase": phase, "model": model, "provider": "openai",
                "input_tokens": 500 + (x % 4000), "output_tokens": 50 + (x % 700),
                "turn_id": turn, "iteration": (x % 3), "duration_ms": 800 + (x % 5000),
                "calls": 1 + ((x >> 28) % 3),
            });
            if phase == "auxiliary" {
                payload["auxiliary"] = json!(
                    ["diary_filter", "persist_decider", "skill_synth"][((x >> 24) % 3) as usize]
                );
            }
            Event::new(EventType::AgentPhaseCompleted, "turn")
                .with_summary(format!("{phase} done"))
                .with_payload(payload)
        } else {
            let kinds = [
                EventType::TaskStarted,
                EventType::TaskCompleted,
                EventType::MessageSent,
                EventType::AgentTurnCompleted,
                EventType::RawWebhook,
            ];
            Event::new(kinds[((x >> 16) % 5) as usize].clone(), "engine")
                .with_summary("something happened")
                .with_payload(json!({"detail": "x".repeat(((x >> 12) % 200) as usize), "n": n}))
        };
        Event {
            timestamp: ts,
            ..base
                .with_agent(agent.0, agent.1.clone())
                .with_task(format!("task-{}", n / 40))
                .with_trace(TraceContext::new_root())
                .with_tag("bench", "1")
        }
    }

    fn batch(&mut self, n: usize, span: Days) -> Vec<Event> {
        (0..n).map(|_| self.next(span)).collect()
    }
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

async fn count(db: &Database) -> anyhow::Result<i64> {
    let c = db.client().await?;
    Ok(c.query_one("SELECT count(*) FROM crewlet_events", &[])
        .await?
        .get(0))
}

/// Phase events in the last `days` days (what a breakdown of that window reads).
async fn phase_events(db: &Database, days: u32) -> anyhow::Result<i64> {
    let c = db.client().await?;
    let since = Utc::now() - Days::days(i64::from(days));
    Ok(c.query_one(
        "SELECT count(*) FROM crewlet_events
         WHERE event_type = 'agent_phase_completed' AND event_time >= $1",
        &[&since],
    )
    .await?
    .get(0))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    let admin = std::env::var("CREWLET_BENCH_DATABASE_URL")
        .unwrap_or_else(|_| crewlet_test_support::services::postgres_dsn());
    let Some(admin) = crewlet_test_support::services::require_postgres().map(|_| admin) else {
        bail!("PostgreSQL is not reachable; start it with `cargo xtask services up`");
    };
    let fresh = FreshDatabase::create(&admin).await;
    let db = Database::connect(&fresh.dsn).await?;
    Migrator::new(db.clone(), MigrationOptions::default())
        .run()
        .await?;
    ensure_partitions_between(&db, Utc::now() - Days::days(32), Utc::now()).await?;
    let pg = Arc::new(PostgresEventStore::new(db.clone()));
    let mut generator = Generator::new(args.phase_share);
    let today = Days::hours(12);
    if args.copy_only {
        let events = generator.batch(args.buffered, today);
        let started = Instant::now();
        for chunk in events.chunks(20_000) {
            pg.copy_in(chunk).await?;
        }
        println!(
            "copy_rows_per_sec {:.0}",
            rate(args.buffered, started.elapsed())
        );
        drop(fresh);
        return Ok(());
    }

    // 1. buffered
    let events = generator.batch(args.buffered, today);
    let buffered = BufferedEventStore::new(pg.clone(), BufferedOptions::default());
    let cap = BufferedOptions::default().capacity - BufferedOptions::default().batch_size;
    let started = Instant::now();
    for e in events {
        while buffered.pending() >= cap {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        buffered.push(e);
    }
    buffered.shutdown().await?;
    let buffered_time = started.elapsed();
    let buffered_rate = rate(args.buffered, buffered_time);
    let dropped = buffered.dropped();

    // 2. per-publish writer
    let events = generator.batch(args.per_publish, today);
    let writer = EventStoreWriter::new(pg.clone());
    let started = Instant::now();
    for e in &events {
        writer.on_publish("crewlet.events.bench", e).await?;
    }
    let publish_time = started.elapsed();
    let publish_rate = rate(args.per_publish, publish_time);
    if writer.failed_writes() > 0 {
        bail!("{} per-publish writes failed", writer.failed_writes());
    }

    // 3. raw binary COPY of the same shape of rows
    let events = generator.batch(args.buffered, today);
    let started = Instant::now();
    for chunk in events.chunks(20_000) {
        pg.copy_in(chunk).await?;
    }
    let copy_time = started.elapsed();
    let copy_rate = rate(args.buffered, copy_time);

    // 4. breakdown over N stored events
    let have = usize::try_from(count(&db).await?)?;
    let started = Instant::now();
    let mut remaining = args.events.saturating_sub(have);
    while remaining > 0 {
        let n = remaining.min(50_000);
        pg.copy_in(&generator.batch(n, Days::days(30))).await?;
        remaining -= n;
    }
    let load_time = started.elapsed();
    {
        let c = db.client().await?;
        c.batch_execute("VACUUM ANALYZE crewlet_events").await?;
    }
    let stored = count(&db).await?;
    let mut rows = Vec::new();
    for days in [1u32, 7, 30] {
        let _warm = pg
            .token_breakdown(&crewlet_store::BreakdownQuery::days(days))
            .await?;
        let mut times = Vec::new();
        let mut calls = 0;
        for _ in 0..5 {
            let started = Instant::now();
            let b = pg
                .token_breakdown(&crewlet_store::BreakdownQuery::days(days))
                .await?;
            times.push(started.elapsed());
            calls = b.totals.calls;
        }
        times.sort();
        let phases = phase_events(&db, days).await?;
        rows.push((days, phases, calls, times[times.len() / 2], times[0]));
    }

    println!();
    println!(
        "store bench: PostgreSQL {}, {} stored events",
        db.target(),
        stored
    );
    println!("{:<44} {:>12} {:>14}", "measure", "events", "result");
    println!("{}", "-".repeat(72));
    println!(
        "{:<44} {:>12} {:>10.0} ev/s   (dropped {dropped})",
        "BufferedEventStore, sustained", args.buffered, buffered_rate
    );
    println!(
        "{:<44} {:>12} {:>10.0} ev/s",
        "EventStoreWriter::on_publish, sequential", args.per_publish, publish_rate
    );
    println!(
        "{:<44} {:>12} {:>10.0} ev/s",
        "raw binary COPY, 20k rows each (ceiling)", args.buffered, copy_rate
    );
    println!(
        "{:<44} {:>12} {:>10.1} %",
        "buffered / COPY",
        "",
        100.0 * buffered_rate / copy_rate
    );
    println!(
        "{:<44} {:>12} {:>10.1} s",
        "bulk load for the breakdown (COPY)",
        args.events.saturating_sub(have),
        load_time.as_secs_f64()
    );
    for (days, phases, calls, median, best) in rows {
        println!(
            "{:<44} {:>12} {:>10.1} ms   (best {:.1} ms; {calls} LLM calls)",
            format!("token_breakdown({days} d), median of 5"),
            phases,
            median.as_secs_f64() * 1000.0,
            best.as_secs_f64() * 1000.0
        );
    }
    drop(fresh);
    Ok(())
}
