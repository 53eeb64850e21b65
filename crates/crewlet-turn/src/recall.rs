//! How a turn reaches the seat's memory: the [`Recall`] interface the
//! engine adapts (to `crewlet-learning` over `crewlet-memory`), so this
//! crate never depends on storage.
//!
//! A turn asks once, at its start; the sections it gets back are frozen
//! into every Plan prompt of the turn (self-iterations included), so the
//! provider's prompt cache keeps working and the planner sees one stable
//! view of what the seat remembers.

use async_trait::async_trait;
use crewlet_core::TraceContext;
use uuid::Uuid;

use crate::{SeatProfile, Trigger};

/// One block of the Plan prompt, e.g. `## Personal memory`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemorySection {
    /// The heading line, with its `##`.
    pub heading: String,
    pub body: String,
}

impl MemorySection {
    pub fn new(heading: impl Into<String>, body: impl Into<String>) -> Self {
        Self {
            heading: heading.into(),
            body: body.into(),
        }
    }
}

/// What the turn tells memory about itself when it starts.
#[derive(Clone, Copy, Debug)]
pub struct RecallRequest<'a> {
    pub seat: &'a SeatProfile,
    pub trigger: &'a Trigger,
    pub turn_id: Uuid,
    /// The turn span: events and model calls of the prefetch continue it.
    pub trace: TraceContext,
}

/// The seat's memory as a turn sees it. Best-effort by contract: an
/// implementation that fails returns fewer sections (or none), never an
/// error, and a turn never fails because memory did.
#[async_trait]
pub trait Recall: Send + Sync {
    /// The sections for the Plan prompt of this turn, in order.
    async fn prefetch(&self, request: RecallRequest<'_>) -> Vec<MemorySection>;

    /// Sections for the Execute prompt, fetched once the plan is known
    /// (`plan` is its reasoning and steps): what a thin trigger could not
    /// find at turn start. None by default.
    async fn after_plan(&self, _request: RecallRequest<'_>, _plan: &str) -> Vec<MemorySection> {
        Vec::new()
    }
}

/// No memory: every turn starts from nothing (the default).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoRecall;

#[async_trait]
impl Recall for NoRecall {
    async fn prefetch(&self, _request: RecallRequest<'_>) -> Vec<MemorySection> {
        Vec::new()
    }
}
