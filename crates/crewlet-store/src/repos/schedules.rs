//! At-most-once schedule fires (`scheduled_runs`): every engine process runs
//! the scheduler; the first to claim a fire runs it.

use parking_lot::Mutex;
use std::collections::HashSet;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::db::Database;
use crate::error::{StoreError, query_err};

/// One fire of one schedule for one target, e.g.
/// (`unit:platform`, `standup`, `2026-03-12T09:00Z`, `eng`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScheduledFire {
    pub scope: String,
    pub schedule_name: String,
    /// Identifies the fire time, e.g. its RFC 3339 minute.
    pub fire_label: String,
    pub target: String,
}

#[async_trait]
pub trait ScheduledRuns: Send + Sync {
    /// `true` for exactly one caller per fire, across processes.
    async fn claim(&self, fire: &ScheduledFire, claimed_by: &str) -> Result<bool, StoreError>;
    /// Forgets claims made before `before`; returns how many.
    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
}

#[derive(Debug, Default)]
pub struct MemoryScheduledRuns {
    claimed: Mutex<HashSet<ScheduledFire>>,
    claimed_at: Mutex<Vec<(ScheduledFire, DateTime<Utc>)>>,
}

impl MemoryScheduledRuns {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl ScheduledRuns for MemoryScheduledRuns {
    async fn claim(&self, fire: &ScheduledFire, _claimed_by: &str) -> Result<bool, StoreError> {
        let mut claimed = self.claimed.lock();
        let fresh = claimed.insert(fire.clone());
        if fresh {
            self.claimed_at.lock().push((fire.clone(), Utc::now()));
        }
        Ok(fresh)
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut claimed = self.claimed.lock();
        let mut at = self.claimed_at.lock();
        let mut removed = 0u64;
        at.retain(|(fire, t)| {
            let keep = *t >= before;
            if !keep {
                claimed.remove(fire);
                removed += 1;
            }
            keep
        });
        Ok(removed)
    }
}

#[derive(Clone, Debug)]
pub struct PostgresScheduledRuns {
    db: Database,
}

impl PostgresScheduledRuns {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

#[async_trait]
impl ScheduledRuns for PostgresScheduledRuns {
    async fn claim(&self, fire: &ScheduledFire, claimed_by: &str) -> Result<bool, StoreError> {
        let client = self.db.client().await?;
        let n = client
            .execute(
                "INSERT INTO scheduled_runs (scope, schedule_name, fire_label, target, claimed_by)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT DO NOTHING",
                &[
                    &fire.scope,
                    &fire.schedule_name,
                    &fire.fire_label,
                    &fire.target,
                    &claimed_by,
                ],
            )
            .await
            .map_err(query_err(format!(
                "claiming schedule fire `{}`/`{}`",
                fire.schedule_name, fire.fire_label
            )))?;
        Ok(n == 1)
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let client = self.db.client().await?;
        client
            .execute(
                "DELETE FROM scheduled_runs WHERE claimed_at < $1",
                &[&before],
            )
            .await
            .map_err(query_err("pruning scheduled runs"))
    }
}
