//! Webhook delivery dedupe (`webhook_deliveries`): providers retry, and a
//! delivery must be acted on once.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};

use super::claim_batch::ClaimBatcher;
use crate::db::Database;
use crate::error::{StoreError, query_err};

/// A repeat of the same `(source, delivery_key)` within this window is a duplicate.
pub const DUPLICATE_WINDOW: Duration = Duration::minutes(5);
/// Rows older than this are deleted by [`WebhookDeliveries::gc`].
pub const DELIVERY_RETENTION: Duration = Duration::minutes(20);

#[async_trait]
pub trait WebhookDeliveries: Send + Sync {
    /// Claims a delivery seen at `at`: `true` the first time, `false` for a
    /// repeat within [`DUPLICATE_WINDOW`] of the last claim.
    async fn claim_at(
        &self,
        source: &str,
        delivery_key: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// Whether `delivery_key` was claimed within [`DUPLICATE_WINDOW`] before
    /// `at`, without claiming it (e.g. a "published" marker set only once
    /// the claimed delivery reached the queue).
    async fn is_claimed_at(
        &self,
        source: &str,
        delivery_key: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// [`is_claimed_at`](Self::is_claimed_at) now.
    async fn is_claimed(&self, source: &str, delivery_key: &str) -> Result<bool, StoreError> {
        self.is_claimed_at(source, delivery_key, Utc::now()).await
    }

    /// Gives a claim back, so the sender's retry is accepted: used when a
    /// claimed delivery could not be published. Releasing an unknown key is a no-op.
    async fn release(&self, source: &str, delivery_key: &str) -> Result<(), StoreError>;

    /// Deletes claims older than [`DELIVERY_RETENTION`] before `at`; returns how many.
    async fn gc_at(&self, at: DateTime<Utc>) -> Result<u64, StoreError>;

    /// [`claim_at`](Self::claim_at) now.
    async fn claim(&self, source: &str, delivery_key: &str) -> Result<bool, StoreError> {
        self.claim_at(source, delivery_key, Utc::now()).await
    }

    /// [`gc_at`](Self::gc_at) now.
    async fn gc(&self) -> Result<u64, StoreError> {
        self.gc_at(Utc::now()).await
    }
}

/// Shards of the in-memory claims: a busy embedded engine holds hundreds
/// of thousands of keys, and growing one map that size rehashed every key
/// under its lock, stalling every request for up to ~100 ms.
const MEMORY_SHARDS: usize = 64;

type Claims = HashMap<(String, String), DateTime<Utc>>;

#[derive(Debug)]
pub struct MemoryWebhookDeliveries {
    hasher: RandomState,
    shards: Box<[Mutex<Claims>]>,
}

impl Default for MemoryWebhookDeliveries {
    fn default() -> Self {
        Self {
            hasher: RandomState::new(),
            shards: (0..MEMORY_SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl MemoryWebhookDeliveries {
    pub fn new() -> Self {
        Self::default()
    }

    fn shard(&self, source: &str, delivery_key: &str) -> &Mutex<Claims> {
        let hash = self.hasher.hash_one((source, delivery_key));
        let index = usize::try_from(hash % MEMORY_SHARDS as u64).unwrap_or(0);
        &self.shards[index]
    }
}

#[async_trait]
impl WebhookDeliveries for MemoryWebhookDeliveries {
    async fn claim_at(
        &self,
        source: &str,
        delivery_key: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut seen = self.shard(source, delivery_key).lock();
        let key = (source.to_owned(), delivery_key.to_owned());
        match seen.get(&key) {
            Some(last) if *last > at - DUPLICATE_WINDOW => Ok(false),
            _ => {
                seen.insert(key, at);
                Ok(true)
            }
        }
    }

    async fn is_claimed_at(
        &self,
        source: &str,
        delivery_key: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let seen = self.shard(source, delivery_key).lock();
        Ok(seen
            .get(&(source.to_owned(), delivery_key.to_owned()))
            .is_some_and(|last| *last > at - DUPLICATE_WINDOW))
    }

    async fn release(&self, source: &str, delivery_key: &str) -> Result<(), StoreError> {
        let mut seen = self.shard(source, delivery_key).lock();
        seen.remove(&(source.to_owned(), delivery_key.to_owned()));
        Ok(())
    }

    async fn gc_at(&self, at: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut removed = 0usize;
        for shard in &*self.shards {
            let mut seen = shard.lock();
            let before = seen.len();
            seen.retain(|_, t| *t >= at - DELIVERY_RETENTION);
            removed += before - seen.len();
        }
        Ok(u64::try_from(removed).unwrap_or(u64::MAX))
    }
}

/// Claims from concurrent requests are group-committed: one statement per
/// batch (see `claim_batch`).
#[derive(Clone, Debug)]
pub struct PostgresWebhookDeliveries {
    db: Database,
    claims: Arc<ClaimBatcher>,
}

impl PostgresWebhookDeliveries {
    pub fn new(db: Database) -> Self {
        Self {
            claims: Arc::new(ClaimBatcher::new(db.clone())),
            db,
        }
    }
}

#[async_trait]
impl WebhookDeliveries for PostgresWebhookDeliveries {
    async fn claim_at(
        &self,
        source: &str,
        delivery_key: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.claims.claim(source, delivery_key, at).await
    }

    async fn is_claimed_at(
        &self,
        source: &str,
        delivery_key: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let what = || format!("looking up webhook delivery `{source}`/`{delivery_key}`");
        let client = self.db.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT 1 FROM webhook_deliveries
                 WHERE source = $1 AND delivery_key = $2 AND seen_at > $3",
            )
            .await
            .map_err(query_err(what()))?;
        let row = client
            .query_opt(
                &statement,
                &[&source, &delivery_key, &(at - DUPLICATE_WINDOW)],
            )
            .await
            .map_err(query_err(what()))?;
        Ok(row.is_some())
    }

    async fn release(&self, source: &str, delivery_key: &str) -> Result<(), StoreError> {
        let client = self.db.client().await?;
        client
            .execute(
                "DELETE FROM webhook_deliveries WHERE source = $1 AND delivery_key = $2",
                &[&source, &delivery_key],
            )
            .await
            .map_err(query_err(format!(
                "releasing webhook delivery `{source}`/`{delivery_key}`"
            )))?;
        Ok(())
    }

    async fn gc_at(&self, at: DateTime<Utc>) -> Result<u64, StoreError> {
        let client = self.db.client().await?;
        client
            .execute(
                "DELETE FROM webhook_deliveries WHERE seen_at < $1",
                &[&(at - DELIVERY_RETENTION)],
            )
            .await
            .map_err(query_err("deleting old webhook deliveries"))
    }
}
