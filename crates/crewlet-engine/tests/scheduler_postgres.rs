//! Two engines on one fresh PostgreSQL database fire each schedule time once:
//! the `scheduled_runs` claim decides which one publishes.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_engine::{Backends, EngineBuilder, EngineOptions};
use crewlet_queue::{MemoryBroker, topics};
use crewlet_store::{EventQuery, MigrationOptions, Stores};
use crewlet_test_support::database::FreshDatabase;

const COMPANY: &str = r#"
name: Schedules Co
providers:
  llm:
    nowhere: {type: openai-compatible, model: m, base_url: "http://127.0.0.1:9/v1", timeout_seconds: 1}
roles:
  - name: CEO
    handle: ceo
    schedules:
      - {name: weekly-plan, cron: "0 9 * * MON", timezone: Europe/Paris, task: plan the week}
units:
  - name: Eng
    lead: cto
    roles:
      - {name: CTO, handle: cto}
      - {name: Engineer, handle: eng}
    schedules:
      - {name: standup, cron: "*/30 * * * *", task: post the standup, target: lead}
      - {name: tidy, cron: "0 * * * *", task: tidy the backlog, target: each}
"#;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_engines_on_one_database_fire_each_time_once() {
    let admin = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin).await;
    let company = Company::from_yaml("schedules", COMPANY).unwrap_or_else(|e| panic!("{e}"));
    let broker = MemoryBroker::new();
    let mut engines = Vec::new();
    for node in ["engine-a", "engine-b"] {
        let (stores, _) = Stores::open(&db.dsn, MigrationOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let backends = Backends::new(Arc::new(broker.client()), stores);
        let options = EngineOptions {
            node_name: node.into(),
            // The windows below are fired by hand; the tick loop stays off.
            run_scheduler: false,
            run_router: false,
            ..EngineOptions::default()
        };
        let engine = EngineBuilder::new(company.clone(), &backends)
            .options(options)
            .start()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        engines.push((engine, backends));
    }

    // Monday 2026-03-09 07:59 -> 09:00 UTC: standup at 08:00, 08:30, 09:00
    // (cto); tidy at 08:00 and 09:00 (cto, eng); the weekly plan at 09:00
    // Paris = 08:00 UTC (ceo).
    let (from, to) = (at("2026-03-09T07:59:00Z"), at("2026-03-09T09:00:00Z"));
    let (a, b) = tokio::join!(
        engines[0].0.fire_schedules(from, to),
        engines[1].0.fire_schedules(from, to)
    );
    let mut fired: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for f in a.iter().chain(b.iter()) {
        *fired
            .entry((
                f.schedule.clone(),
                f.fire_time.format("%H:%M").to_string(),
                f.handle.clone(),
            ))
            .or_insert(0) += 1;
    }
    let expected: Vec<(&str, &str, &str)> = vec![
        ("standup", "08:00", "cto"),
        ("standup", "08:30", "cto"),
        ("standup", "09:00", "cto"),
        ("tidy", "08:00", "cto"),
        ("tidy", "08:00", "eng"),
        ("tidy", "09:00", "cto"),
        ("tidy", "09:00", "eng"),
        ("weekly-plan", "08:00", "ceo"),
    ];
    let got: Vec<(&str, &str, &str)> = fired
        .keys()
        .map(|(s, t, h)| (s.as_str(), t.as_str(), h.as_str()))
        .collect();
    assert_eq!(got, expected);
    assert!(
        fired.values().all(|n| *n == 1),
        "a fire was published twice: {fired:?}"
    );
    assert!(!a.is_empty() || !b.is_empty());

    // Firing the same window again publishes nothing.
    let again = engines[0].0.fire_schedules(from, to).await;
    assert!(again.is_empty(), "{again:?}");

    // The tasks in the database: one per fire.
    let stores = &engines[0].1.stores;
    let query = EventQuery {
        event_type: Some(EventType::TaskCreated),
        limit: Some(500),
        ..EventQuery::default()
    };
    let created = stores
        .events
        .recent(&query)
        .await
        .map(|p| p.events)
        .unwrap_or_default();
    let mut ids: Vec<String> = created.iter().filter_map(|e| e.task_id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), expected.len(), "{created:?}");
    let inbox = topics::agent_inbox("cto");
    assert!(broker.backlog(&inbox.topic, &inbox.group).is_some());

    for (engine, backends) in engines {
        engine.shutdown().await;
        backends.queue.shutdown().await;
    }
}
