//! Time to first render of Mission control (`cargo xtask bench dashboard
//! --render`): a company of `--seats` seats (default 1,000) and
//! `--events` stored events (default 1,000,000, spread over the last 7
//! days) in a fresh PostgreSQL database; the API on those stores (as
//! `crewlet run api` serves it); then headless Chromium opens
//! `/dashboard#/mission` `--runs` times, each in a fresh browser context
//! (empty cache), and `tests/browser/render-bench.mjs` measures from the
//! navigation's start to the org chart showing every seat with its state
//! and the day's figures painted.
//!
//! Needs PostgreSQL (`cargo xtask services up`) and the browser service
//! (Chromium and `tests/browser/node_modules`).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use chrono::{Duration as Days, Utc};
use crewlet_api::ApiBuilder;
use crewlet_config::{ApiConfig, check_company};
use crewlet_core::{AgentId, Event, EventType};
use crewlet_queue::{EventQueue, MemoryQueue};
use crewlet_store::migrate::{MigrationOptions, Migrator};
use crewlet_store::partitions::ensure_partitions_between;
use crewlet_store::{Database, NewRevision, PostgresEventStore, Stores};
use crewlet_test_support::database::FreshDatabase;
use serde_json::json;

const COMPANY: &str = "Render Bench Co";

struct Args {
    seats: usize,
    events: usize,
    runs: usize,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        seats: 1000,
        events: 1_000_000,
        runs: 10,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--seats" => a.seats = value.parse()?,
            "--events" => a.events = value.parse()?,
            "--runs" => a.runs = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

/// Ten units, each with a lead and its reports.
fn company(seats: usize) -> String {
    let mut y = format!(
        "name: {COMPANY}\nproviders:\n  llm:\n    main: {{type: openai, model: m, api_keys: [\"${{OPENAI_API_KEY}}\"]}}\nunits:\n"
    );
    let per = seats.div_ceil(10);
    for u in 0..10 {
        let first = u * per;
        if first >= seats {
            break;
        }
        y.push_str(&format!(
            "  - name: Unit {u}\n    lead: s{first}\n    roles:\n"
        ));
        for i in first..(first + per).min(seats) {
            y.push_str(&format!(
                "      - name: Seat {i}\n        handle: s{i}\n        token_budget: 5000000\n"
            ));
        }
    }
    y
}

/// The `n`th stored event: a turn's events in turn, seats round robin,
/// spread over the last 7 days, oldest first.
fn event(n: usize, total: usize, seats: usize) -> Event {
    let turn = n / 6;
    let seat = turn % seats;
    let handle = format!("s{seat}");
    let week_ms = Days::days(7).num_milliseconds();
    let age = week_ms - (week_ms as f64 * (n as f64 / total as f64)) as i64;
    let at = Utc::now() - Days::milliseconds(age.max(1));
    let task = format!("task-{turn}");
    let turn_id = uuid::Uuid::from_u128(turn as u128);
    let (kind, payload) = match n % 6 {
        0 => (
            EventType::TaskStarted,
            json!({"turn_id": turn_id, "trigger": {"source": "github", "task_id": task,
                   "delegation_depth": 0, "summary": format!("issue #{turn}")}}),
        ),
        1 => (
            EventType::AgentPhaseStarted,
            json!({"phase": "plan", "turn_id": turn_id, "iteration": 1, "provider": "main", "model": "m"}),
        ),
        2 => (
            EventType::AgentPhaseCompleted,
            json!({"phase": "plan", "turn_id": turn_id, "model": "m", "outcome": "completed",
                   "input_tokens": 900 + n % 500, "output_tokens": 120 + n % 80, "duration_ms": 1200}),
        ),
        3 => (
            EventType::AgentPhaseStarted,
            json!({"phase": "execute", "turn_id": turn_id, "iteration": 1, "provider": "main", "model": "m"}),
        ),
        4 => (
            EventType::AgentTurnCompleted,
            json!({"turn_id": turn_id, "input_tokens": 2400, "output_tokens": 300, "total_tokens": 2700,
                   "duration_ms": 5100, "iterations": 1}),
        ),
        _ => (EventType::TaskCompleted, json!({"turn_id": turn_id})),
    };
    let mut e = Event::new(kind, "bench")
        .with_summary(format!("{handle} {task}"))
        .with_agent(AgentId::for_seat(COMPANY, &handle), format!("Seat {seat}"))
        .with_agent_handle(handle)
        .with_task(task)
        .with_payload(payload);
    e.timestamp = at;
    let ms = u64::try_from(at.timestamp_millis()).unwrap_or_default();
    let mut random = [0u8; 10];
    random.copy_from_slice(&uuid::Uuid::new_v4().into_bytes()[..10]);
    e.id = uuid::Builder::from_unix_timestamp_millis(ms, &random).into_uuid();
    e
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let a = parse_args()?;
    let admin = std::env::var("CREWLET_BENCH_DATABASE_URL")
        .unwrap_or_else(|_| crewlet_test_support::services::postgres_dsn());
    if crewlet_test_support::services::require_postgres().is_none() {
        bail!("PostgreSQL is not reachable; start it with `cargo xtask services up`");
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/browser/render-bench.mjs"
    );
    let modules = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/browser/node_modules"
    );
    if !std::path::Path::new(modules).is_dir() {
        bail!("the browser service is missing; start it with `cargo xtask services up`");
    }

    let fresh = FreshDatabase::create(&admin).await;
    let db = Database::connect(&fresh.dsn).await?;
    Migrator::new(db.clone(), MigrationOptions::default())
        .run()
        .await?;
    ensure_partitions_between(&db, Utc::now() - Days::days(8), Utc::now()).await?;
    let stores = Stores::postgres(db.clone());
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

    let loading = Instant::now();
    let pg = PostgresEventStore::new(db.clone());
    let chunk = 20_000;
    let mut n = 0;
    while n < a.events {
        let batch: Vec<Event> = (n..(n + chunk).min(a.events))
            .map(|i| event(i, a.events, a.seats))
            .collect();
        pg.copy_in(&batch).await?;
        n += batch.len();
    }
    let client = db.client().await?;
    client.batch_execute("ANALYZE crewlet_events").await?;
    let stored: i64 = client
        .query_one("SELECT count(*) FROM crewlet_events", &[])
        .await?
        .get(0);
    drop(client);
    println!(
        "stored: {stored} events for {} seats in {:.1} s",
        a.seats,
        loading.elapsed().as_secs_f64()
    );

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
    // The API is up once it answers; the live view is seeded from the
    // store in the background: wait until the snapshot has its cursor.
    let http = reqwest::Client::new();
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let snap: serde_json::Value = match http.get(format!("{base}/stream/snapshot")).send().await
        {
            Ok(r) => r.json().await.unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        };
        if snap["cursor"].is_string() {
            break;
        }
        if Instant::now() > deadline {
            bail!("the API never seeded its live view from the store");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    let status = tokio::process::Command::new("node")
        .arg(script)
        .env("CREWLET_URL", &base)
        .env("RUNS", a.runs.to_string())
        .env("SEATS", a.seats.to_string())
        .status()
        .await
        .context("running node tests/browser/render-bench.mjs")?;
    drop(fresh);
    if !status.success() {
        bail!("the render bench failed ({status})");
    }
    Ok(())
}
