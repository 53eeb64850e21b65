//! Event store behaviour beyond the conformance suite: the publish writer,
//! the buffered store, the composite's merge rules, and durability.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use crewlet_core::{AgentId, Event, EventType, TraceId};
use crewlet_store::*;
use uuid::Uuid;

/// A memory store that can be switched to fail like an unreachable database.
#[derive(Default)]
struct Flaky {
    inner: MemoryEventStore,
    down: AtomicBool,
}

impl Flaky {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Query {
                what: "flaky store".into(),
                reason: "down".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl EventStore for Flaky {
    async fn append(&self, events: &[Event]) -> Result<(), StoreError> {
        self.check()?;
        self.inner.append(events).await
    }
    async fn recent(&self, q: &EventQuery) -> Result<EventPage, StoreError> {
        self.check()?;
        self.inner.recent(q).await
    }
    async fn get(&self, id: Uuid) -> Result<Option<Event>, StoreError> {
        self.check()?;
        self.inner.get(id).await
    }
    async fn by_trace(&self, t: &TraceId) -> Result<Vec<Event>, StoreError> {
        self.check()?;
        self.inner.by_trace(t).await
    }
    async fn token_breakdown(&self, q: &BreakdownQuery) -> Result<TokenBreakdown, StoreError> {
        self.check()?;
        self.inner.token_breakdown(q).await
    }
}

fn event() -> Event {
    Event::new(EventType::TaskStarted, "test")
}

#[tokio::test]
async fn writer_stores_published_events_and_skips_turn_progress() -> anyhow::Result<()> {
    let store = Arc::new(MemoryEventStore::new());
    let writer = EventStoreWriter::new(store.clone());
    let e = event();
    writer.on_publish("crewlet.events.task_started", &e).await?;
    writer
        .on_publish(
            "crewlet.events.agent_turn_progress",
            &Event::new(EventType::AgentTurnProgress, "t"),
        )
        .await?;
    assert_eq!(store.len(), 1);
    assert!(store.get(e.id).await?.is_some());
    assert_eq!((writer.written(), writer.failed_writes()), (1, 0));
    Ok(())
}

#[tokio::test]
async fn writer_counts_an_outage_and_says_it_is_transient() {
    // A pool towards a closed port: every write fails, none is returned.
    let db = match Database::lazy(
        "postgres://crewlet:pw@127.0.0.1:1/crewlet",
        DatabaseOptions {
            connect_timeout: Duration::from_secs(1),
            ..DatabaseOptions::default()
        },
    ) {
        Ok(db) => db,
        Err(e) => panic!("building a lazy pool: {e}"),
    };
    let writer = EventStoreWriter::new(Arc::new(PostgresEventStore::new(db)));
    for _ in 0..3 {
        let r = writer
            .on_publish("crewlet.events.task_started", &event())
            .await;
        assert!(r.as_ref().is_err_and(|e| e.is_transient()), "{r:?}");
    }
    // Held writes give up as soon as the caller stops.
    let held = writer.write_held(&event(), &|| true).await;
    assert!(held.is_err_and(|e| e.is_transient()));
    assert_eq!(writer.failed_writes(), 4);
    assert_eq!(writer.written(), 0);
}

#[tokio::test]
async fn buffered_flushes_a_full_batch_without_waiting_for_the_tick() -> anyhow::Result<()> {
    let store = Arc::new(MemoryEventStore::with_capacity(10_000));
    let buffered = BufferedEventStore::new(
        store.clone(),
        BufferedOptions {
            flush_interval: Duration::from_secs(3600),
            batch_size: 10,
            capacity: 100,
        },
    );
    // The first tick fires at once; let it pass so only the batch trigger remains.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..10 {
        assert!(buffered.push(event()));
    }
    for _ in 0..200 {
        if store.len() == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(store.len(), 10);
    buffered.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn buffered_flushes_on_the_interval() -> anyhow::Result<()> {
    let store = Arc::new(MemoryEventStore::new());
    let buffered = BufferedEventStore::new(
        store.clone(),
        BufferedOptions {
            flush_interval: Duration::from_millis(50),
            batch_size: 1000,
            capacity: 10_000,
        },
    );
    buffered.push(event());
    buffered.push(Event::new(EventType::AgentTurnProgress, "t"));
    for _ in 0..200 {
        if store.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(store.len(), 1, "one stored event, progress skipped");
    assert_eq!(buffered.pending(), 0);
    buffered.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn buffered_counts_overflow_keeps_failed_batches_and_flushes_on_shutdown()
-> anyhow::Result<()> {
    let flaky = Arc::new(Flaky::default());
    flaky.down.store(true, Ordering::SeqCst);
    let buffered = BufferedEventStore::new(
        flaky.clone(),
        BufferedOptions {
            flush_interval: Duration::from_millis(20),
            batch_size: 4,
            capacity: 10,
        },
    );
    let accepted = (0..15).filter(|_| buffered.push(event())).count();
    assert_eq!(accepted, 10);
    assert_eq!(buffered.dropped(), 5, "overflow is counted, not silent");
    // Failed flushes keep the events.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(buffered.failed_flushes() > 0);
    assert_eq!(buffered.pending(), 10);
    assert_eq!(flaky.inner.len(), 0);
    // The database comes back; shutdown writes what is left.
    flaky.down.store(false, Ordering::SeqCst);
    buffered.shutdown().await?;
    assert_eq!(flaky.inner.len(), 10);
    assert_eq!(buffered.pending(), 0);
    assert_eq!(buffered.written(), 10);
    assert!(!buffered.push(event()), "closed after shutdown");
    Ok(())
}

#[tokio::test]
async fn buffered_into_postgres_writes_everything_on_shutdown() -> anyhow::Result<()> {
    let Some((_guard, db)) = common::migrated().await else {
        return Ok(());
    };
    let buffered = BufferedEventStore::new(
        Arc::new(PostgresEventStore::new(db.clone())),
        BufferedOptions::default(),
    );
    for _ in 0..2500 {
        buffered.push(event());
    }
    buffered.shutdown().await?;
    let n: i64 = db
        .client()
        .await?
        .query_one("SELECT count(*) FROM crewlet_events", &[])
        .await?
        .get(0);
    assert_eq!(n, 2500);
    assert_eq!(buffered.dropped(), 0);
    Ok(())
}

#[tokio::test]
async fn composite_prefers_the_durable_copy_and_merges_memory_only_events() -> anyhow::Result<()> {
    let memory = Arc::new(MemoryEventStore::new());
    let durable = Arc::new(MemoryEventStore::new());
    let composite = CompositeEventStore::new(memory.clone(), durable.clone());
    let shared = event().with_summary("memory copy");
    let mut durable_copy = shared.clone();
    durable_copy.summary = "durable copy".into();
    memory.append(std::slice::from_ref(&shared)).await?;
    durable.append(std::slice::from_ref(&durable_copy)).await?;
    let only_in_memory = event();
    memory.append(std::slice::from_ref(&only_in_memory)).await?;

    let page = composite.recent(&EventQuery::default()).await?;
    assert_eq!(page.events.len(), 2, "deduped by id");
    let got = page.events.iter().find(|e| e.id == shared.id);
    assert_eq!(got.map(|e| e.summary.as_str()), Some("durable copy"));
    assert_eq!(
        composite.get(shared.id).await?.map(|e| e.summary),
        Some("durable copy".into())
    );
    assert!(composite.get(only_in_memory.id).await?.is_some());
    Ok(())
}

#[tokio::test]
async fn composite_answers_from_memory_when_the_durable_store_is_down() -> anyhow::Result<()> {
    let memory = Arc::new(MemoryEventStore::new());
    let flaky = Arc::new(Flaky::default());
    let composite = CompositeEventStore::new(memory.clone(), flaky.clone());
    let e = event();
    composite.append(std::slice::from_ref(&e)).await?;
    flaky.down.store(true, Ordering::SeqCst);
    assert!(
        composite.append(&[event()]).await.is_err(),
        "the durable error is returned"
    );
    assert_eq!(memory.len(), 2, "memory kept both");
    assert_eq!(
        composite.recent(&EventQuery::default()).await?.events.len(),
        2
    );
    assert!(composite.get(e.id).await?.is_some());
    assert!(
        composite
            .token_breakdown(&BreakdownQuery::days(1))
            .await
            .is_ok()
    );
    assert!(
        composite
            .token_breakdown(&BreakdownQuery::days(0))
            .await
            .is_err()
    );
    Ok(())
}

#[tokio::test]
async fn memory_store_keeps_the_last_1000_events() -> anyhow::Result<()> {
    let store = MemoryEventStore::new();
    let events: Vec<Event> = (0..1005).map(|_| event()).collect();
    store.append(&events).await?;
    assert_eq!(store.len(), 1000);
    assert!(store.get(events[0].id).await?.is_none());
    assert!(store.get(events[1004].id).await?.is_some());
    Ok(())
}

#[tokio::test]
async fn usage_and_budgets_survive_a_new_repository_instance() -> anyhow::Result<()> {
    let Some((guard, db)) = common::migrated().await else {
        return Ok(());
    };
    let agent_id = AgentId::for_seat("Acme", "eng");
    {
        let ledger = PostgresTokenLedger::new(db.clone());
        ledger.record_usage("eng", 1234).await?;
        let charge = BudgetCharge::new(agent_id, "eng", 300, 0, 1000);
        assert_eq!(ledger.charge(&charge).await?, ChargeOutcome::Charged);
    }
    drop(db);
    // A new pool and a new repository, as after a restart.
    let db = Database::connect(&guard.dsn).await?;
    let ledger = PostgresTokenLedger::new(db);
    let usage = ledger.usage().await?;
    assert_eq!(usage.len(), 1);
    assert_eq!(
        (usage[0].agent_handle.as_str(), usage[0].tokens_used),
        ("eng", 1234)
    );
    let budgets = ledger.budgets().await?;
    let agent = budgets.iter().find(|b| b.scope == agent_scope(&agent_id));
    assert_eq!(agent.map(|b| b.used_tokens), Some(300));
    Ok(())
}

#[tokio::test]
async fn postgres_events_survive_a_new_store_and_keep_payload_and_tags() -> anyhow::Result<()> {
    let Some((guard, db)) = common::migrated().await else {
        return Ok(());
    };
    let e = event()
        .with_tag("k", "v")
        .with_payload(serde_json::json!({"a": [1, 2, {"b": null}]}));
    PostgresEventStore::new(db.clone())
        .append(std::slice::from_ref(&e))
        .await?;
    let again = PostgresEventStore::new(Database::connect(&guard.dsn).await?);
    let got = again.get(e.id).await?;
    assert_eq!(got.as_ref().map(|g| &g.payload), Some(&e.payload));
    assert_eq!(got.map(|g| g.tags), Some(e.tags));
    Ok(())
}

#[tokio::test]
async fn postgres_stores_llm_calls_on_both_write_paths_and_sums_them() -> anyhow::Result<()> {
    let Some((_guard, db)) = common::migrated().await else {
        return Ok(());
    };
    use crewlet_store::testsuite::events::{phase_event, with_calls};
    let store = PostgresEventStore::new(db.clone());
    let appended = [
        with_calls(phase_event("eng", "plan", "m", "t1", 10, 1), 3),
        phase_event("eng", "execute", "m", "t1", 10, 1),
        event().with_payload(serde_json::json!({"calls": 7})),
    ];
    let copied = [
        with_calls(phase_event("eng", "plan", "m", "t2", 10, 1), 4),
        phase_event("eng", "review", "m", "t2", 10, 1),
    ];
    store.append(&appended).await?;
    assert_eq!(store.copy_in(&copied).await?, 2);

    let client = db.client().await?;
    let column = |id: Uuid| {
        let client = &client;
        async move {
            client
                .query_one(
                    "SELECT llm_calls FROM crewlet_events WHERE event_id = $1",
                    &[&id],
                )
                .await
                .map(|r| r.get::<_, Option<i32>>(0))
        }
    };
    assert_eq!(column(appended[0].id).await?, Some(3));
    assert_eq!(column(appended[1].id).await?, None, "no `calls`: NULL");
    assert_eq!(column(appended[2].id).await?, None, "not a phase event");
    assert_eq!(column(copied[0].id).await?, Some(4));
    assert_eq!(column(copied[1].id).await?, None);

    let b = store.token_breakdown(&BreakdownQuery::days(1)).await?;
    assert_eq!(b.totals.calls, 3 + 1 + 4 + 1);
    let mut turns: Vec<(String, u64)> = b
        .by_turn
        .iter()
        .map(|g| (g.turn_id.clone(), g.tokens.calls))
        .collect();
    turns.sort();
    assert_eq!(turns, vec![("t1".into(), 4), ("t2".into(), 5)]);
    Ok(())
}

#[tokio::test]
async fn postgres_token_rollup_index_covers_every_breakdown_column() -> anyhow::Result<()> {
    let Some((_guard, db)) = common::migrated().await else {
        return Ok(());
    };
    let client = db.client().await?;
    // With sequential and bitmap scans off, an index-only scan is the plan
    // only if the partial index carries every column the breakdown reads.
    client
        .batch_execute("VACUUM ANALYZE crewlet_events")
        .await?;
    client
        .batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
        .await?;
    let plan: Vec<String> = client
        .query(
            "EXPLAIN SELECT phase, model, provider, auxiliary, turn_id, agent_id, agent_role,
                            input_tokens, output_tokens, llm_calls
             FROM crewlet_events
             WHERE event_type = 'agent_phase_completed' AND event_time >= now() - INTERVAL '30 days'",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let scans: Vec<&String> = plan.iter().filter(|l| l.contains("Scan")).collect();
    assert!(!scans.is_empty(), "{plan:?}");
    assert!(
        scans.iter().all(|l| l.contains("Index Only Scan")),
        "every partition should be read index-only:\n{}",
        plan.join("\n")
    );
    Ok(())
}
