//! Shared by the integration tests: a fresh, migrated database per test.

#![allow(dead_code)]

use crewlet_memory::MemoryStores;
use crewlet_store::{Database, MigrationOptions, Migrator};
use crewlet_test_support::database::FreshDatabase;

/// A migrated database of its own (default embedding width), dropped with
/// the returned guard; `None` (skip) when PostgreSQL is absent outside CI.
pub async fn migrated() -> Option<(FreshDatabase, Database)> {
    let admin = crewlet_test_support::services::require_postgres()?;
    let fresh = FreshDatabase::create(&admin).await;
    let db = match Database::connect(&fresh.dsn).await {
        Ok(db) => db,
        Err(e) => panic!("connecting to {} failed: {e}", fresh.name),
    };
    if let Err(e) = Migrator::new(db.clone(), MigrationOptions::default())
        .run()
        .await
    {
        panic!("migrating {} failed: {e}", fresh.name);
    }
    Some((fresh, db))
}

/// The PostgreSQL repositories over a fresh migrated database.
pub async fn stores() -> Option<(FreshDatabase, MemoryStores)> {
    let (guard, db) = migrated().await?;
    match MemoryStores::postgres(db).await {
        Ok(stores) => Some((guard, stores)),
        Err(e) => panic!("building the memory stores over {} failed: {e}", guard.name),
    }
}
