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
