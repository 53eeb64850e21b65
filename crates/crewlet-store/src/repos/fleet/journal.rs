//! The effect journal (`turn_journal`): what a running turn got back from
//! the world, appended before the turn moves on, so that a turn cut short
//! by a crash resumes on another node without asking a model again or
//! repeating a tool's side effect, and so that a finished turn can be
//! replayed step by step.
//!
//! Rows are keyed by the task and the step, and appended only while the
//! writer's [`Fence`] holds: a node that lost the seat cannot write. What
//! the payloads say is the turn engine's business (`crewlet-turn`'s
//! `journal`); this store keeps them.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::leases::{Fence, MemoryLeases};
use crate::db::Database;
use crate::error::StoreError;

/// An entry to append.
#[derive(Clone, Debug, PartialEq)]
pub struct NewJournalEntry {
    /// The work the turn does: its trigger (inbox event id).
    pub task_key: String,
    /// The task the trigger belongs to.
    pub task_id: String,
    /// The step within the turn, from 0.
    pub step: i32,
    /// `model`, `tool_started` or `tool_result`.
    pub kind: String,
    pub seat: String,
    pub turn_id: Uuid,
    /// The incarnation writing.
    pub node: String,
    pub payload: Value,
}

/// An entry as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct JournalEntry {
    pub task_key: String,
    pub task_id: String,
    pub step: i32,
    pub kind: String,
    pub seat: String,
    pub turn_id: Uuid,
    pub node: String,
    /// The seat lease epoch it was written under (0 without a fence).
    pub epoch: i64,
    pub payload: Value,
    pub recorded_at: DateTime<Utc>,
}

/// What [`EffectJournal::append`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// The entry is in the journal.
    Written,
    /// An entry of this task, step and kind was already there (kept).
    Exists,
    /// The fence no longer holds: nothing was written.
    Fenced,
}

#[async_trait]
pub trait EffectJournal: Send + Sync {
    /// Appends `entry` if `fence` (when given) still holds, in the same
    /// step as the check.
    async fn append(
        &self,
        entry: &NewJournalEntry,
        fence: Option<&Fence>,
    ) -> Result<Appended, StoreError>;

    /// Every entry of a task, by step, then `model`, `tool_started`,
    /// `tool_result`.
    async fn load(&self, task_key: &str) -> Result<Vec<JournalEntry>, StoreError>;

    /// Drops a task's entries from `from_step` on (the turn took another
    /// path there), if `fence` holds; `None` when it did not.
    async fn truncate(
        &self,
        task_key: &str,
        from_step: i32,
        fence: Option<&Fence>,
    ) -> Result<Option<u64>, StoreError>;

    /// The journals (`task_key`s) of a task, oldest first.
    async fn keys_for_task(&self, task_id: &str) -> Result<Vec<String>, StoreError>;

    /// Forgets entries recorded before `before`; returns how many.
    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
}

fn kind_order(kind: &str) -> u8 {
    match kind {
        "model" => 0,
        "tool_started" => 1,
        "tool_result" => 2,
        _ => 3,
    }
}

/// The journal of one process, fenced by its leases.
#[derive(Debug)]
pub struct MemoryEffectJournal {
    leases: Arc<MemoryLeases>,
    rows: Mutex<BTreeMap<String, Vec<JournalEntry>>>,
}

impl MemoryEffectJournal {
    pub fn new(leases: Arc<MemoryLeases>) -> Self {
        Self {
            leases,
            rows: Mutex::new(BTreeMap::new()),
        }
    }

    fn fenced(&self, fence: Option<&Fence>) -> bool {
        fence.is_some_and(|f| !self.leases.holds_now(f))
    }
}

#[async_trait]
impl EffectJournal for MemoryEffectJournal {
    async fn append(
        &self,
        entry: &NewJournalEntry,
        fence: Option<&Fence>,
    ) -> Result<Appended, StoreError> {
        let mut rows = self.rows.lock();
        if self.fenced(fence) {
            return Ok(Appended::Fenced);
        }
        let task = rows.entry(entry.task_key.clone()).or_default();
        if task
            .iter()
            .any(|e| e.step == entry.step && e.kind == entry.kind)
        {
            return Ok(Appended::Exists);
        }
        task.push(JournalEntry {
            task_key: entry.task_key.clone(),
            task_id: entry.task_id.clone(),
            step: entry.step,
            kind: entry.kind.clone(),
            seat: entry.seat.clone(),
            turn_id: entry.turn_id,
            node: entry.node.clone(),
            epoch: fence.map_or(0, |f| f.epoch),
            payload: entry.payload.clone(),
            recorded_at: Utc::now(),
        });
        task.sort_by_key(|e| (e.step, kind_order(&e.kind)));
        Ok(Appended::Written)
    }

    async fn load(&self, task_key: &str) -> Result<Vec<JournalEntry>, StoreError> {
        Ok(self.rows.lock().get(task_key).cloned().unwrap_or_default())
    }

    async fn truncate(
        &self,
        task_key: &str,
        from_step: i32,
        fence: Option<&Fence>,
    ) -> Result<Option<u64>, StoreError> {
        let mut rows = self.rows.lock();
        if self.fenced(fence) {
            return Ok(None);
        }
        let Some(task) = rows.get_mut(task_key) else {
            return Ok(Some(0));
        };
        let n = task.len();
        task.retain(|e| e.step < from_step);
        Ok(Some((n - task.len()) as u64))
    }

    async fn keys_for_task(&self, task_id: &str) -> Result<Vec<String>, StoreError> {
        let rows = self.rows.lock();
        let mut keys: Vec<(DateTime<Utc>, String)> = rows
            .iter()
            .filter_map(|(k, entries)| {
                let first = entries
                    .iter()
                    .filter(|e| e.task_id == task_id)
                    .map(|e| e.recorded_at)
                    .min()?;
                Some((first, k.clone()))
            })
            .collect();
        keys.sort();
        Ok(keys.into_iter().map(|(_, k)| k).collect())
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut rows = self.rows.lock();
        let mut n = 0;
        for task in rows.values_mut() {
            let len = task.len();
            task.retain(|e| e.recorded_at >= before);
            n += (len - task.len()) as u64;
        }
        rows.retain(|_, t| !t.is_empty());
        Ok(n)
    }
}

/// The journal in PostgreSQL, fenced by the `leases` table.
#[derive(Clone, Debug)]
pub struct PostgresEffectJournal {
    db: Database,
}

impl PostgresEffectJournal {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn decode(e: tokio_postgres::Error) -> StoreError {
    StoreError::decode("turn_journal", crate::describe(&e))
}

/// `$8`..`$10`: the fence (resource, owner, epoch), or NULLs.
const FENCE_HOLDS: &str = "($8::text IS NULL OR EXISTS (
    SELECT 1 FROM leases WHERE resource = $8 AND owner = $9::text AND epoch = $10::bigint
    AND expires_at > clock_timestamp()))";

#[async_trait]
impl EffectJournal for PostgresEffectJournal {
    async fn append(
        &self,
        entry: &NewJournalEntry,
        fence: Option<&Fence>,
    ) -> Result<Appended, StoreError> {
        let client = self.db.client().await?;
        let (resource, owner, epoch) = match fence {
            Some(f) => (
                Some(f.resource.as_str()),
                Some(f.owner.as_str()),
                Some(f.epoch),
            ),
            None => (None, None, None),
        };
        // One statement: `written` when inserted; else whether the fence held.
        let row = client
            .query_one(
                &format!(
                    "WITH ins AS (
                        INSERT INTO turn_journal
                            (task_key, step, kind, seat, turn_id, node, payload, owner_epoch, task_id)
                        SELECT $1, $2, $3, $4, $5, $6, $7, COALESCE($10::bigint, 0), $11
                        WHERE {FENCE_HOLDS}
                        ON CONFLICT (task_key, step, kind) DO NOTHING
                        RETURNING 1)
                     SELECT EXISTS (SELECT 1 FROM ins), {FENCE_HOLDS}"
                ),
                &[
                    &entry.task_key,
                    &entry.step,
                    &entry.kind,
                    &entry.seat,
                    &entry.turn_id,
                    &entry.node,
                    &entry.payload,
                    &resource,
                    &owner,
                    &epoch,
                    &entry.task_id,
                ],
            )
            .await
            .map_err(crate::query_err("appending to the turn journal"))?;
        let written: bool = row.try_get(0).map_err(decode)?;
        let holds: bool = row.try_get(1).map_err(decode)?;
        Ok(match (written, holds) {
            (true, _) => Appended::Written,
            (false, true) => Appended::Exists,
            (false, false) => Appended::Fenced,
        })
    }

    async fn load(&self, task_key: &str) -> Result<Vec<JournalEntry>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT task_key, step, kind, seat, turn_id, node, owner_epoch, payload, recorded_at,
                        task_id
                 FROM turn_journal WHERE task_key = $1
                 ORDER BY step, CASE kind WHEN 'model' THEN 0 WHEN 'tool_started' THEN 1
                                          WHEN 'tool_result' THEN 2 ELSE 3 END",
                &[&task_key],
            )
            .await
            .map_err(crate::query_err("reading the turn journal"))?;
        rows.iter()
            .map(|r| {
                Ok(JournalEntry {
                    task_key: r.try_get(0).map_err(decode)?,
                    step: r.try_get(1).map_err(decode)?,
                    kind: r.try_get(2).map_err(decode)?,
                    seat: r.try_get(3).map_err(decode)?,
                    turn_id: r.try_get(4).map_err(decode)?,
                    node: r.try_get(5).map_err(decode)?,
                    epoch: r.try_get(6).map_err(decode)?,
                    payload: r.try_get(7).map_err(decode)?,
                    recorded_at: r.try_get(8).map_err(decode)?,
                    task_id: r.try_get(9).map_err(decode)?,
                })
            })
            .collect()
    }

    async fn truncate(
        &self,
        task_key: &str,
        from_step: i32,
        fence: Option<&Fence>,
    ) -> Result<Option<u64>, StoreError> {
        let mut client = self.db.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(crate::query_err("truncating the turn journal"))?;
        if let Some(f) = fence {
            // Lock the lease row so the check holds until the delete commits.
            let held = tx
                .query_opt(
                    "SELECT 1 FROM leases WHERE resource = $1 AND owner = $2 AND epoch = $3
                     AND expires_at > clock_timestamp() FOR SHARE",
                    &[&f.resource, &f.owner, &f.epoch],
                )
                .await
                .map_err(crate::query_err("checking a lease"))?;
            if held.is_none() {
                return Ok(None);
            }
        }
        let n = tx
            .execute(
                "DELETE FROM turn_journal WHERE task_key = $1 AND step >= $2",
                &[&task_key, &from_step],
            )
            .await
            .map_err(crate::query_err("truncating the turn journal"))?;
        tx.commit()
            .await
            .map_err(crate::query_err("truncating the turn journal"))?;
        Ok(Some(n))
    }

    async fn keys_for_task(&self, task_id: &str) -> Result<Vec<String>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT task_key FROM turn_journal WHERE task_id = $1
                 GROUP BY task_key ORDER BY min(recorded_at), task_key",
                &[&task_id],
            )
            .await
            .map_err(crate::query_err("reading the turn journal"))?;
        rows.iter().map(|r| r.try_get(0).map_err(decode)).collect()
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let client = self.db.client().await?;
        client
            .execute(
                "DELETE FROM turn_journal WHERE recorded_at < $1",
                &[&before],
            )
            .await
            .map_err(crate::query_err("pruning the turn journal"))
    }
}
