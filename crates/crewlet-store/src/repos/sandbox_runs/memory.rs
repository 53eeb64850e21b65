//! [`SandboxRuns`] in memory: one process, the same semantics.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use uuid::Uuid;

use super::{SandboxRun, SandboxRunPatch, SandboxRunStatus, SandboxRuns};
use crate::error::StoreError;

#[derive(Debug, Default)]
pub struct MemorySandboxRuns {
    rows: Mutex<BTreeMap<Uuid, SandboxRun>>,
}

impl MemorySandboxRuns {
    pub fn new() -> Self {
        Self::default()
    }
}

fn oldest_first(mut runs: Vec<SandboxRun>) -> Vec<SandboxRun> {
    runs.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    runs
}

pub(super) fn apply(run: &mut SandboxRun, to: SandboxRunStatus, patch: &SandboxRunPatch) {
    run.status = to;
    if let Some(v) = &patch.box_id {
        run.box_id.clone_from(v);
    }
    if let Some(v) = &patch.run_id {
        run.run_id.clone_from(v);
    }
    if let Some(v) = &patch.question {
        run.question.clone_from(v);
    }
    if let Some(v) = &patch.answer {
        run.answer.clone_from(v);
    }
    if let Some(v) = &patch.result {
        run.result.clone_from(v);
    }
    if let Some(v) = &patch.paused_at {
        run.paused_at = *v;
    }
    run.updated_at = Utc::now();
}

#[async_trait]
impl SandboxRuns for MemorySandboxRuns {
    async fn insert(&self, run: &SandboxRun) -> Result<SandboxRun, StoreError> {
        let mut rows = self.rows.lock();
        if let Some(existing) = rows
            .values()
            .find(|r| r.seat == run.seat && r.turn_id == run.turn_id && r.call_id == run.call_id)
        {
            return Ok(existing.clone());
        }
        rows.insert(run.id, run.clone());
        Ok(run.clone())
    }

    async fn get(&self, id: Uuid) -> Result<Option<SandboxRun>, StoreError> {
        Ok(self.rows.lock().get(&id).cloned())
    }

    async fn by_call(
        &self,
        seat: &str,
        turn_id: Uuid,
        call_id: &str,
    ) -> Result<Option<SandboxRun>, StoreError> {
        Ok(self
            .rows
            .lock()
            .values()
            .find(|r| r.seat == seat && r.turn_id == turn_id && r.call_id == call_id)
            .cloned())
    }

    async fn transition(
        &self,
        id: Uuid,
        from: &[SandboxRunStatus],
        to: SandboxRunStatus,
        patch: &SandboxRunPatch,
    ) -> Result<Option<SandboxRun>, StoreError> {
        let mut rows = self.rows.lock();
        let Some(run) = rows.get_mut(&id) else {
            return Ok(None);
        };
        if !from.contains(&run.status) {
            return Ok(None);
        }
        apply(run, to, patch);
        Ok(Some(run.clone()))
    }

    async fn with_status(
        &self,
        seat: Option<&str>,
        statuses: &[SandboxRunStatus],
    ) -> Result<Vec<SandboxRun>, StoreError> {
        let rows = self.rows.lock();
        Ok(oldest_first(
            rows.values()
                .filter(|r| statuses.contains(&r.status) && seat.is_none_or(|s| r.seat == s))
                .cloned()
                .collect(),
        ))
    }

    async fn for_turn(&self, seat: &str, turn_id: Uuid) -> Result<Vec<SandboxRun>, StoreError> {
        let rows = self.rows.lock();
        Ok(oldest_first(
            rows.values()
                .filter(|r| r.seat == seat && r.turn_id == turn_id)
                .cloned()
                .collect(),
        ))
    }

    async fn awaiting_answer(
        &self,
        seat: &str,
        conversation: &str,
    ) -> Result<Option<SandboxRun>, StoreError> {
        let rows = self.rows.lock();
        Ok(oldest_first(
            rows.values()
                .filter(|r| {
                    r.seat == seat
                        && r.status == SandboxRunStatus::AwaitingAnswer
                        && r.conversation.as_deref() == Some(conversation)
                })
                .cloned()
                .collect(),
        )
        .into_iter()
        .next())
    }

    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut rows = self.rows.lock();
        let n = rows.len();
        rows.retain(|_, r| r.status.is_open() || r.updated_at >= before);
        Ok((n - rows.len()) as u64)
    }
}
