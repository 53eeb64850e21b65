//! The completion ledger (`turn_completions`): which inbox triggers a seat
//! already worked. Read before a turn starts, written after it ends; a
//! redelivered trigger found here is acknowledged without a turn, whatever
//! the broker redelivers. Keyed by the constituent inbox event ids (a
//! merged digest is minted fresh on every merge and would match nothing).

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::db::Database;
use crate::error::StoreError;

/// A finished turn, for the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnCompletion {
    pub seat: String,
    /// The inbox event ids the turn worked (one, or the merged ones).
    pub trigger_ids: Vec<Uuid>,
    pub task_id: String,
    pub turn_id: Option<Uuid>,
    /// `completed`, `failed`, ... (the turn's decision).
    pub outcome: String,
    /// The incarnation that ran it.
    pub node: String,
    /// The seat lease epoch it ran under (0 without a lease).
    pub epoch: i64,
}

/// One ledger row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletionRow {
    pub seat: String,
    pub trigger_id: Uuid,
    pub task_id: String,
    pub turn_id: Option<Uuid>,
    pub outcome: String,
    pub node: String,
    pub epoch: i64,
    pub completed_at: DateTime<Utc>,
}

#[async_trait]
pub trait CompletionLedger: Send + Sync {
    /// Which of `trigger_ids` the seat already worked.
    async fn completed(
        &self,
        seat: &str,
        trigger_ids: &[Uuid],
    ) -> Result<HashSet<Uuid>, StoreError>;

    /// Records a finished turn; a trigger already recorded keeps its first
    /// row. Returns how many triggers were new.
    async fn record(&self, completion: &TurnCompletion) -> Result<u64, StoreError>;

    /// The rows of one task, oldest first.
    async fn for_task(&self, task_id: &str) -> Result<Vec<CompletionRow>, StoreError>;

    /// Forgets rows recorded before `before`; returns how many.
    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
}

/// The ledger of one process.
#[derive(Debug, Default)]
pub struct MemoryCompletionLedger {
    rows: Mutex<HashMap<(String, Uuid), CompletionRow>>,
}

impl MemoryCompletionLedger {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl CompletionLedger for MemoryCompletionLedger {
    async fn completed(
        &self,
        seat: &str,
        trigger_ids: &[Uuid],
    ) -> Result<HashSet<Uuid>, StoreError> {
        let rows = self.rows.lock();
        Ok(trigger_ids
            .iter()
            .filter(|id| rows.contains_key(&(seat.to_owned(), **id)))
            .copied()
            .collect())
    }

    async fn record(&self, c: &TurnCompletion) -> Result<u64, StoreError> {
        let now = Utc::now();
        let mut rows = self.rows.lock();
        let mut fresh = 0;
        for id in &c.trigger_ids {
            rows.entry((c.seat.clone(), *id)).or_insert_with(|| {
                fresh += 1;
                CompletionRow {
                    seat: c.seat.clone(),
                    trigger_id: *id,
                    task_id: c.task_id.clone(),
                    turn_id: c.turn_id,
                    outcome: c.outcome.clone(),
                    node: c.node.clone(),
                    epoch: c.epoch,
                    completed_at: now,
                }
            });
        }
        Ok(fresh)
    }

    async fn for_task(&self, task_id: &str) -> Result<Vec<CompletionRow>, StoreError> {
        let mut out: Vec<CompletionRow> = self
            .rows
            .lock()
            .values()
            .filter(|r| r.task_id == task_id)
            .cloned()
            .collect();
        out.sort_by_key(|r| (r.completed_at, r.trigger_id));
        Ok(out)
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut rows = self.rows.lock();
        let n = rows.len();
        rows.retain(|_, r| r.completed_at >= before);
        Ok((n - rows.len()) as u64)
    }
}

/// The ledger in PostgreSQL, shared by the fleet.
#[derive(Clone, Debug)]
pub struct PostgresCompletionLedger {
    db: Database,
}

impl PostgresCompletionLedger {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn decode(e: tokio_postgres::Error) -> StoreError {
    StoreError::decode("turn_completions", crate::describe(&e))
}

#[async_trait]
impl CompletionLedger for PostgresCompletionLedger {
    async fn completed(
        &self,
        seat: &str,
        trigger_ids: &[Uuid],
    ) -> Result<HashSet<Uuid>, StoreError> {
        if trigger_ids.is_empty() {
            return Ok(HashSet::new());
        }
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT trigger_id FROM turn_completions WHERE seat = $1 AND trigger_id = ANY($2)",
                &[&seat, &trigger_ids],
            )
            .await
            .map_err(crate::query_err("reading the completion ledger"))?;
        rows.iter().map(|r| r.try_get(0).map_err(decode)).collect()
    }

    async fn record(&self, c: &TurnCompletion) -> Result<u64, StoreError> {
        if c.trigger_ids.is_empty() {
            return Ok(0);
        }
        let client = self.db.client().await?;
        client
            .execute(
                "INSERT INTO turn_completions
                     (seat, trigger_id, task_id, turn_id, outcome, node, owner_epoch)
                 SELECT $1, t, $3, $4, $5, $6, $7 FROM unnest($2::uuid[]) AS t
                 ON CONFLICT (seat, trigger_id) DO NOTHING",
                &[
                    &c.seat,
                    &c.trigger_ids,
                    &c.task_id,
                    &c.turn_id,
                    &c.outcome,
                    &c.node,
                    &c.epoch,
                ],
            )
            .await
            .map_err(crate::query_err("recording a finished turn"))
    }

    async fn for_task(&self, task_id: &str) -> Result<Vec<CompletionRow>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT seat, trigger_id, task_id, turn_id, outcome, node, owner_epoch, completed_at
                 FROM turn_completions WHERE task_id = $1 ORDER BY completed_at, trigger_id",
                &[&task_id],
            )
            .await
            .map_err(crate::query_err("reading the completion ledger"))?;
        rows.iter()
            .map(|r| {
                Ok(CompletionRow {
                    seat: r.try_get(0).map_err(decode)?,
                    trigger_id: r.try_get(1).map_err(decode)?,
                    task_id: r.try_get(2).map_err(decode)?,
                    turn_id: r.try_get(3).map_err(decode)?,
                    outcome: r.try_get(4).map_err(decode)?,
                    node: r.try_get(5).map_err(decode)?,
                    epoch: r.try_get(6).map_err(decode)?,
                    completed_at: r.try_get(7).map_err(decode)?,
                })
            })
            .collect()
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let client = self.db.client().await?;
        client
            .execute(
                "DELETE FROM turn_completions WHERE completed_at < $1",
                &[&before],
            )
            .await
            .map_err(crate::query_err("pruning the completion ledger"))
    }
}
