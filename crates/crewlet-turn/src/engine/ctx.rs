//! What one turn shares across its phases ([`TurnCtx`]) and what one phase
//! of one iteration carries through its provider attempts ([`PhaseCtx`]).

use parking_lot::{Mutex, MutexGuard};

use crewlet_core::TraceContext;
use crewlet_llm::{Phase, Usage};
use uuid::Uuid;

use super::PhaseRecord;
use crate::{Plan, Review, SeatProfile, Trigger};

/// Everything one turn shares across its phases.
pub(super) struct TurnCtx<'a> {
    pub seat: &'a SeatProfile,
    pub trigger: &'a Trigger,
    pub turn_id: Uuid,
    /// The turn span's trace context (the turn-level events carry it).
    pub span: TraceContext,
    pub state: Mutex<TurnState>,
    /// Every completion of the turn, charged or refused (the budget gate
    /// adds to it).
    pub usage: Mutex<Usage>,
    /// Budget warnings the turn's charges claimed, not published yet.
    pub budget_warnings: Mutex<Vec<crewlet_store::BudgetWarning>>,
    /// The turn's effect journal, when the engine keeps one.
    pub journal: Option<&'a crate::TurnJournal>,
}

/// What the turn has produced so far.
#[derive(Default)]
pub(super) struct TurnState {
    pub iterations: u32,
    pub phases: Vec<PhaseRecord>,
    pub plan: Option<Plan>,
    pub review: Option<Review>,
    pub final_artifact: String,
}

impl TurnCtx<'_> {
    pub fn state(&self) -> MutexGuard<'_, TurnState> {
        self.state.lock()
    }

    pub fn usage(&self) -> Usage {
        *self.usage.lock()
    }
}

/// One phase of one iteration: the turn, the phase span's trace context
/// (the phase's events carry it), which phase and which iteration.
pub(super) struct PhaseCtx<'t, 'a> {
    pub turn: &'t TurnCtx<'a>,
    pub span: TraceContext,
    pub phase: Phase,
    pub iteration: u32,
}
