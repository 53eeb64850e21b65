//! The webhook -> dedupe -> event store path on real PostgreSQL stores.

mod common;

use common::*;
use crewlet_store::{Database, EventStore, MigrationOptions, PostgresEventStore, Stores};
use crewlet_test_support::database::FreshDatabase;

#[tokio::test]
async fn github_webhook_is_deduped_and_stored_in_postgresql() {
    let admin = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin).await;
    let (stores, _) = Stores::open(&db.dsn, MigrationOptions::default())
        .await
        .expect("migrated test database");

    let h = Harness::on_stores(stores.clone(), Options::default()).await;
    let r = h
        .post_github(
            "/webhooks/github",
            "pg-delivery-1",
            github_issue(11),
            GITHUB_SECRET,
        )
        .await;
    assert_eq!(r.status(), 202);
    let dup = h
        .post_github(
            "/webhooks/github",
            "pg-delivery-1",
            github_issue(11),
            GITHUB_SECRET,
        )
        .await;
    assert_eq!(dup.status(), 202);
    let body: serde_json::Value = dup.json().await.unwrap();
    assert_eq!(body["duplicate"], true);
    let inbound = h.published.inbound();
    assert_eq!(inbound.len(), 1);
    let event = inbound[0].clone();
    h.stop().await;

    // The durable copy, read straight from PostgreSQL.
    let database = Database::connect(&db.dsn).await.unwrap();
    let durable = PostgresEventStore::new(database.clone());
    let stored = durable
        .get(event.id)
        .await
        .unwrap()
        .expect("event in crewlet_events");
    assert_eq!(stored.trace_id, event.trace_id);
    assert_eq!(
        stored.payload["notification"]["delivery_key"],
        "pg-delivery-1"
    );
    let trace = durable.by_trace(&event.trace_id.unwrap()).await.unwrap();
    assert_eq!(trace.len(), 1);

    // A new API process on the same database still knows the delivery.
    let h2 = Harness::on_stores(
        Stores::postgres(database),
        Options {
            company: None,
            ..Options::default()
        },
    )
    .await;
    let again = h2
        .post_github(
            "/webhooks/github",
            "pg-delivery-1",
            github_issue(11),
            GITHUB_SECRET,
        )
        .await;
    assert_eq!(again.status(), 202);
    let body: serde_json::Value = again.json().await.unwrap();
    assert_eq!(body["duplicate"], true, "{body}");
    assert!(h2.published.inbound().is_empty());
    let fresh = h2
        .post_github(
            "/webhooks/github",
            "pg-delivery-2",
            github_issue(12),
            GITHUB_SECRET,
        )
        .await;
    assert_eq!(fresh.status(), 202);
    assert_eq!(h2.published.inbound().len(), 1);
    h2.stop().await;
}

/// The standalone API (`crewlet run api`) opens PostgreSQL's memory stores
/// and answers `GET /agents/{id}/memory` from them.
#[tokio::test]
async fn standalone_api_reads_agent_memory_from_postgresql() {
    use chrono::{Duration as ChronoDuration, Utc};
    use crewlet_memory::{DiaryKind, MemoryStores, NewDiaryEntry};

    let admin = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin).await;
    let (stores, _) = Stores::open(&db.dsn, MigrationOptions::default())
        .await
        .expect("migrated test database");
    import(&stores, COMPANY).await;
    let database = Database::connect(&db.dsn).await.unwrap();
    let memory = MemoryStores::postgres(database).await.unwrap();
    let eng = crewlet_core::AgentId::for_seat("Test Co", "eng");
    let now = Utc::now();
    for (content, ttl_until) in [
        ("prefers small PRs", None),
        ("expired note", Some(now - ChronoDuration::minutes(1))),
    ] {
        let entry = NewDiaryEntry {
            agent_id: eng,
            kind: if ttl_until.is_some() {
                DiaryKind::Short
            } else {
                DiaryKind::Long
            },
            content: content.into(),
            ttl_until,
            embedding: Some(vec![0.5, 0.5]),
        };
        memory
            .diary
            .write(entry, now - ChronoDuration::minutes(5))
            .await
            .unwrap();
    }
    memory.onboarding.mark(&eng, "chain-1").await.unwrap();

    let yaml = format!("providers:\n  database:\n    dsn: \"{}\"\n", db.dsn);
    let bootstrap = crewlet_config::Bootstrap::from_yaml("test bootstrap", &yaml).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crewlet_api::standalone::serve(bootstrap, listener, async {
        let _ = rx.await;
    }));
    let port = listener_port(&base);
    let http = reqwest::Client::new();
    let url = format!("{base}/agents/eng/memory");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // Memory is content: read it with the local operator token the
    // loopback listener wrote (anonymous reads are metadata only).
    let body = loop {
        if let Some(token) = crewlet_api::read_local_token(port)
            && let Ok(r) = http.get(&url).bearer_auth(token).send().await
            && r.status() == 200
        {
            break r.json::<serde_json::Value>().await.unwrap();
        }
        assert!(
            !server.is_finished() && std::time::Instant::now() < deadline,
            "the standalone api never answered 200 on {url}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(body["agent_id"], eng.to_string());
    assert_eq!(body["diary"]["total"], 1, "{body}");
    assert_eq!(body["diary"]["items"][0]["content"], "prefers small PRs");
    assert_eq!(body["episodes"]["raw"], 0);
    assert_eq!(body["onboarding"]["chain_hash"], "chain-1");
    assert!(!body.to_string().contains("embedding"));
    let anonymous: serde_json::Value = http.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(anonymous["diary"]["total"], 1, "{anonymous}");
    assert!(
        anonymous["diary"]["items"][0].get("content").is_none(),
        "{anonymous}"
    );
    let _ = tx.send(());
    server.await.unwrap().unwrap();
}

/// The port of `http://127.0.0.1:{port}`.
fn listener_port(base: &str) -> u16 {
    base.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {base}"))
}
