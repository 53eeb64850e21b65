//! Sandbox runs (`sandbox_runs`): the coding-agent runs seats started with
//! `run_sandbox`. A run outlives the turn that started it (the turn parks
//! its seat until the run ends) and the engine process (a restart finds the
//! running ones and waits for them again), so everything needed to pick it
//! up is here: the seat, the turn and tool call it answers, the trigger to
//! resume, the box and run ids, and where it stands.
//!
//! Transitions are compare-and-set ([`SandboxRuns::transition`]): of two
//! engines that see the same run finish, one claims it.

mod memory;
mod postgres;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::error::StoreError;

pub use self::memory::MemorySandboxRuns;
pub use self::postgres::PostgresSandboxRuns;

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxRunStatus {
    /// The coding agent is working in its box.
    Running,
    /// It stopped to ask a question; the question went out and the box is
    /// paused (or gone, past the pause TTL) until the answer comes.
    AwaitingAnswer,
    /// The answer came; the turn that asked goes on with it.
    Answered,
    /// The run ended and its result is in the row.
    Completed,
    /// The run could not start, was lost, or its box expired.
    Failed,
}

impl SandboxRunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::AwaitingAnswer => "awaiting_answer",
            Self::Answered => "answered",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => Self::Running,
            "awaiting_answer" => Self::AwaitingAnswer,
            "answered" => Self::Answered,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            _ => return None,
        })
    }

    /// Running or waiting: not yet handed back to its turn for good.
    pub fn is_open(self) -> bool {
        matches!(self, Self::Running | Self::AwaitingAnswer | Self::Answered)
    }
}

/// One run.
#[derive(Clone, Debug, PartialEq)]
pub struct SandboxRun {
    pub id: Uuid,
    /// The seat whose turn started it.
    pub seat: String,
    pub task_id: String,
    /// The turn (kept across resumes) and the `run_sandbox` call it answers.
    pub turn_id: Uuid,
    pub call_id: String,
    /// The inbox event of the turn's trigger, to run the turn again from
    /// its journal.
    pub trigger_event: Value,
    /// Where a question is asked and its answer expected:
    /// `source|channel|thread` of the trigger.
    pub conversation: Option<String>,
    /// `local` or `e2b`.
    pub backend: String,
    /// The box; empty once it is gone.
    pub box_id: String,
    /// The detached run inside the box.
    pub run_id: String,
    pub coding_agent: String,
    pub status: SandboxRunStatus,
    /// `{"text": ..., "audience": ...}` when the agent asked.
    pub question: Option<Value>,
    pub answer: Option<String>,
    /// What came back: findings, transcript, exit code, usage.
    pub result: Option<Value>,
    /// When the box was paused for a question (the pause TTL counts from it).
    pub paused_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Fields a transition sets (`None`: left as they are).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SandboxRunPatch {
    pub box_id: Option<String>,
    pub run_id: Option<String>,
    pub question: Option<Option<Value>>,
    pub answer: Option<Option<String>>,
    pub result: Option<Option<Value>>,
    pub paused_at: Option<Option<DateTime<Utc>>>,
}

#[async_trait]
pub trait SandboxRuns: Send + Sync {
    /// Stores a new run. A run for the same seat, turn and call already
    /// there is returned instead (the call ran again after a restart).
    async fn insert(&self, run: &SandboxRun) -> Result<SandboxRun, StoreError>;

    async fn get(&self, id: Uuid) -> Result<Option<SandboxRun>, StoreError>;

    /// The run a `run_sandbox` call started, if any.
    async fn by_call(
        &self,
        seat: &str,
        turn_id: Uuid,
        call_id: &str,
    ) -> Result<Option<SandboxRun>, StoreError>;

    /// Moves a run to `to` if it is in one of `from`, applying `patch`;
    /// `None` when it was not (someone else moved it first).
    async fn transition(
        &self,
        id: Uuid,
        from: &[SandboxRunStatus],
        to: SandboxRunStatus,
        patch: &SandboxRunPatch,
    ) -> Result<Option<SandboxRun>, StoreError>;

    /// Runs in these states, oldest first (all seats when `seat` is `None`).
    async fn with_status(
        &self,
        seat: Option<&str>,
        statuses: &[SandboxRunStatus],
    ) -> Result<Vec<SandboxRun>, StoreError>;

    /// Every run of one turn of `seat`, oldest first.
    async fn for_turn(&self, seat: &str, turn_id: Uuid) -> Result<Vec<SandboxRun>, StoreError>;

    /// The oldest run of `seat` waiting for an answer in `conversation`.
    async fn awaiting_answer(
        &self,
        seat: &str,
        conversation: &str,
    ) -> Result<Option<SandboxRun>, StoreError>;

    /// Forgets closed runs last updated before `before`; returns how many.
    async fn prune(&self, before: DateTime<Utc>) -> Result<u64, StoreError>;
}
