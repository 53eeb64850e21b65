//! [`SandboxRuns`] in PostgreSQL (`0016_sandbox_runs.sql`), shared by every
//! engine process of the company.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::{SandboxRun, SandboxRunPatch, SandboxRunStatus, SandboxRuns};
use crate::db::Database;
use crate::error::StoreError;

/// Every status, to name the closed ones to SQL.
const STATUSES: [SandboxRunStatus; 5] = [
    SandboxRunStatus::Running,
    SandboxRunStatus::AwaitingAnswer,
    SandboxRunStatus::Answered,
    SandboxRunStatus::Completed,
    SandboxRunStatus::Failed,
];

/// The columns [`run_of`] reads, in its order.
const COLUMNS: &str = "id, seat, task_id, turn_id, call_id, trigger_event, conversation, backend, \
     box_id, run_id, coding_agent, status, question, answer, result, paused_at, created_at, \
     updated_at";

#[derive(Clone, Debug)]
pub struct PostgresSandboxRuns {
    db: Database,
}

impl PostgresSandboxRuns {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn decode(e: tokio_postgres::Error) -> StoreError {
    StoreError::decode("sandbox_runs", crate::describe(&e))
}

fn run_of(row: &tokio_postgres::Row) -> Result<SandboxRun, StoreError> {
    let status: String = row.try_get(11).map_err(decode)?;
    let status = SandboxRunStatus::parse(&status).ok_or_else(|| {
        StoreError::decode("sandbox_runs.status", format!("unknown status `{status}`"))
    })?;
    Ok(SandboxRun {
        id: row.try_get(0).map_err(decode)?,
        seat: row.try_get(1).map_err(decode)?,
        task_id: row.try_get(2).map_err(decode)?,
        turn_id: row.try_get(3).map_err(decode)?,
        call_id: row.try_get(4).map_err(decode)?,
        trigger_event: row.try_get(5).map_err(decode)?,
        conversation: row.try_get(6).map_err(decode)?,
        backend: row.try_get(7).map_err(decode)?,
        box_id: row.try_get(8).map_err(decode)?,
        run_id: row.try_get(9).map_err(decode)?,
        coding_agent: row.try_get(10).map_err(decode)?,
        status,
        question: row.try_get(12).map_err(decode)?,
        answer: row.try_get(13).map_err(decode)?,
        result: row.try_get(14).map_err(decode)?,
        paused_at: row.try_get(15).map_err(decode)?,
        created_at: row.try_get(16).map_err(decode)?,
        updated_at: row.try_get(17).map_err(decode)?,
    })
}

fn names(statuses: &[SandboxRunStatus]) -> Vec<&'static str> {
    statuses.iter().map(|s| s.as_str()).collect()
}

#[async_trait]
impl SandboxRuns for PostgresSandboxRuns {
    async fn insert(&self, run: &SandboxRun) -> Result<SandboxRun, StoreError> {
        let client = self.db.client().await?;
        let inserted = client
            .query_opt(
                &format!(
                    "INSERT INTO sandbox_runs ({COLUMNS})
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
                             $16, $17, $18)
                     ON CONFLICT DO NOTHING
                     RETURNING {COLUMNS}"
                ),
                &[
                    &run.id,
                    &run.seat,
                    &run.task_id,
                    &run.turn_id,
                    &run.call_id,
                    &run.trigger_event,
                    &run.conversation,
                    &run.backend,
                    &run.box_id,
                    &run.run_id,
                    &run.coding_agent,
                    &run.status.as_str(),
                    &run.question,
                    &run.answer,
                    &run.result,
                    &run.paused_at,
                    &run.created_at,
                    &run.updated_at,
                ],
            )
            .await
            .map_err(crate::query_err("storing a sandbox run"))?;
        if let Some(row) = inserted {
            return run_of(&row);
        }
        // The call already has its run. Read in a statement of its own: it
        // sees a row a concurrent insert committed while this one waited.
        let existing = client
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM sandbox_runs
                     WHERE seat = $1 AND turn_id = $2 AND call_id = $3"
                ),
                &[&run.seat, &run.turn_id, &run.call_id],
            )
            .await
            .map_err(crate::query_err("reading a sandbox run"))?;
        match existing {
            Some(row) => run_of(&row),
            None => Err(StoreError::Conflict {
                what: "sandbox run".into(),
                reason: format!(
                    "id {} is already taken by the run of another call (seat `{}`, turn {}, call `{}` has none)",
                    run.id, run.seat, run.turn_id, run.call_id
                ),
            }),
        }
    }

    async fn get(&self, id: Uuid) -> Result<Option<SandboxRun>, StoreError> {
        let client = self.db.client().await?;
        client
            .query_opt(
                &format!("SELECT {COLUMNS} FROM sandbox_runs WHERE id = $1"),
                &[&id],
            )
            .await
            .map_err(crate::query_err("reading a sandbox run"))?
            .as_ref()
            .map(run_of)
            .transpose()
    }

    async fn by_call(
        &self,
        seat: &str,
        turn_id: Uuid,
        call_id: &str,
    ) -> Result<Option<SandboxRun>, StoreError> {
        let client = self.db.client().await?;
        client
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM sandbox_runs
                     WHERE seat = $1 AND turn_id = $2 AND call_id = $3"
                ),
                &[&seat, &turn_id, &call_id],
            )
            .await
            .map_err(crate::query_err("reading the sandbox run of a call"))?
            .as_ref()
            .map(run_of)
            .transpose()
    }

    async fn transition(
        &self,
        id: Uuid,
        from: &[SandboxRunStatus],
        to: SandboxRunStatus,
        patch: &SandboxRunPatch,
    ) -> Result<Option<SandboxRun>, StoreError> {
        let from = names(from);
        let to = to.as_str();
        // Only the patched columns are set; `$4` on are their values.
        let mut patched: Vec<(&str, &(dyn ToSql + Sync))> = Vec::new();
        if let Some(v) = &patch.box_id {
            patched.push(("box_id", v));
        }
        if let Some(v) = &patch.run_id {
            patched.push(("run_id", v));
        }
        if let Some(v) = &patch.question {
            patched.push(("question", v));
        }
        if let Some(v) = &patch.answer {
            patched.push(("answer", v));
        }
        if let Some(v) = &patch.result {
            patched.push(("result", v));
        }
        if let Some(v) = &patch.paused_at {
            patched.push(("paused_at", v));
        }
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&id, &from, &to];
        let mut sets = vec!["status = $3".to_owned(), "updated_at = now()".to_owned()];
        for (column, value) in patched {
            params.push(value);
            sets.push(format!("{column} = ${}", params.len()));
        }
        let client = self.db.client().await?;
        client
            .query_opt(
                &format!(
                    "UPDATE sandbox_runs SET {}
                     WHERE id = $1 AND status = ANY($2)
                     RETURNING {COLUMNS}",
                    sets.join(", ")
                ),
                &params,
            )
            .await
            .map_err(crate::query_err("moving a sandbox run"))?
            .as_ref()
            .map(run_of)
            .transpose()
    }

    async fn with_status(
        &self,
        seat: Option<&str>,
        statuses: &[SandboxRunStatus],
    ) -> Result<Vec<SandboxRun>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM sandbox_runs
                     WHERE status = ANY($1) AND ($2::text IS NULL OR seat = $2)
                     ORDER BY created_at, id"
                ),
                &[&names(statuses), &seat],
            )
            .await
            .map_err(crate::query_err("listing sandbox runs"))?;
        rows.iter().map(run_of).collect()
    }

    async fn for_turn(&self, seat: &str, turn_id: Uuid) -> Result<Vec<SandboxRun>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM sandbox_runs
                     WHERE seat = $1 AND turn_id = $2
                     ORDER BY created_at, id"
                ),
                &[&seat, &turn_id],
            )
            .await
            .map_err(crate::query_err("listing a turn's sandbox runs"))?;
        rows.iter().map(run_of).collect()
    }

    async fn awaiting_answer(
        &self,
        seat: &str,
        conversation: &str,
    ) -> Result<Option<SandboxRun>, StoreError> {
        let client = self.db.client().await?;
        client
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM sandbox_runs
                     WHERE seat = $1 AND conversation = $2 AND status = $3
                     ORDER BY created_at, id
                     LIMIT 1"
                ),
                &[
                    &seat,
                    &conversation,
                    &SandboxRunStatus::AwaitingAnswer.as_str(),
                ],
            )
            .await
            .map_err(crate::query_err(
                "finding the sandbox run awaiting an answer",
            ))?
            .as_ref()
            .map(run_of)
            .transpose()
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let closed: Vec<&str> = STATUSES
            .into_iter()
            .filter(|s| !s.is_open())
            .map(SandboxRunStatus::as_str)
            .collect();
        let client = self.db.client().await?;
        client
            .execute(
                "DELETE FROM sandbox_runs WHERE status = ANY($1) AND updated_at < $2",
                &[&closed, &before],
            )
            .await
            .map_err(crate::query_err("pruning sandbox runs"))
    }
}
