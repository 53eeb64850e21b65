//! What a turn did: its outcome, the record of each phase, and why a turn
//! failed.

use std::time::Duration;

use crewlet_llm::{Phase, Usage};
use crewlet_store::BudgetRefusal;
use serde::Serialize;
use uuid::Uuid;

use crate::{Plan, Review, ToolExecution};

/// Why a guard stopped a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardKind {
    /// Review asked for another pass after the last allowed one.
    MaxIter,
    /// Two `self_iterate` reviews in a row with the same artifact.
    Stall,
    /// The trigger is delegated deeper than allowed.
    DepthCap,
    /// The turn ran past its time limit.
    Timeout,
    /// An error the turn cannot handle (a tool panicked, the ledger refused
    /// a charge as malformed).
    Unhandled,
}

impl GuardKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            GuardKind::MaxIter => "max_iter",
            GuardKind::Stall => "stall",
            GuardKind::DepthCap => "depth_cap",
            GuardKind::Timeout => "timeout",
            GuardKind::Unhandled => "unhandled",
        }
    }
}

/// Why a turn failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureReason {
    Guard(GuardKind),
    BudgetExhausted(BudgetRefusal),
    LlmUnavailable {
        phase: Phase,
    },
    /// The phase's prompt is longer than the context of every model its
    /// chain tried (`context_overflow`).
    ContextOverflow {
        phase: Phase,
    },
    /// The database stayed unavailable (a budget charge could not be
    /// recorded): the work is not done and should be retried later.
    StoreUnavailable,
    /// The seat moved to another node mid-turn; the new holder resumes the
    /// turn from its journal.
    Fenced,
    /// A replay reached a step its journal does not have.
    JournalEnded {
        step: i32,
    },
    /// Not failed: a tool suspended the turn (a coding agent works in a
    /// sandbox); the turn runs again from its journal when it is done.
    Suspended {
        tool: String,
    },
}

impl FailureReason {
    /// The `reason` of `task_failed`: `budget_exhausted`, `llm_unavailable`,
    /// `context_overflow`,
    /// or the guard's kind.
    pub fn code(&self) -> &'static str {
        match self {
            FailureReason::Guard(kind) => kind.as_str(),
            FailureReason::BudgetExhausted(_) => "budget_exhausted",
            FailureReason::LlmUnavailable { .. } => "llm_unavailable",
            FailureReason::ContextOverflow { .. } => "context_overflow",
            FailureReason::StoreUnavailable => "store_unavailable",
            FailureReason::Fenced => "fenced",
            FailureReason::JournalEnded { .. } => "journal_ended",
            FailureReason::Suspended { .. } => "suspended",
        }
    }

    /// Whether the task should run again later rather than count as failed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            FailureReason::StoreUnavailable | FailureReason::Fenced
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnFailure {
    pub reason: FailureReason,
    pub detail: String,
}

impl TurnFailure {
    pub(super) fn guard(kind: GuardKind, detail: impl Into<String>) -> Self {
        Self {
            reason: FailureReason::Guard(kind),
            detail: detail.into(),
        }
    }
}

/// How a turn ended, as `agent_turn_completed.decision` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnDecision {
    Done,
    Direct,
    Skip,
    Failed,
}

impl TurnDecision {
    pub fn as_str(&self) -> &'static str {
        match self {
            TurnDecision::Done => "done",
            TurnDecision::Direct => "direct",
            TurnDecision::Skip => "skip",
            TurnDecision::Failed => "failed",
        }
    }
}

/// One phase of one iteration, across its fallback attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseRecord {
    pub phase: Phase,
    pub iteration: u32,
    /// The provider entry that finished the phase (or failed last).
    pub provider: String,
    /// The model that answered last (the provider's configured model if none did).
    pub model: String,
    /// Every model that answered in this phase, first use first.
    pub models: Vec<String>,
    pub usage: Usage,
    pub calls: u32,
    pub duration: Duration,
    pub tool_executions: Vec<ToolExecution>,
    pub ok: bool,
}

/// What a turn did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnOutcome {
    pub turn_id: Uuid,
    pub task_id: String,
    pub decision: TurnDecision,
    pub failure: Option<TurnFailure>,
    pub iterations: u32,
    /// Models that answered, first use first.
    pub models: Vec<String>,
    /// Every completion of the turn, charged or refused.
    pub usage: Usage,
    pub phases: Vec<PhaseRecord>,
    pub plan: Option<Plan>,
    pub review: Option<Review>,
    pub final_artifact: String,
    pub duration: Duration,
}

impl TurnOutcome {
    pub fn succeeded(&self) -> bool {
        self.failure.is_none()
    }

    /// Whether the turn failed for a reason that passes (the database was
    /// unavailable): its task should be handed back and run again.
    pub fn should_retry(&self) -> bool {
        self.failure
            .as_ref()
            .is_some_and(|f| f.reason.is_retryable())
    }
}
