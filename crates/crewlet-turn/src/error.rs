//! What can go wrong in the turn engine itself. A turn's own failures
//! (guards, budgets, unavailable models) are outcomes, not errors: see
//! [`crate::TurnOutcome`].

use crewlet_llm::LlmError;
use crewlet_store::{BudgetRefusal, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error("a tool named `{name}` is already registered")]
    DuplicateTool { name: String },
    #[error("llm call failed: {0}")]
    Llm(#[from] LlmError),
    #[error(
        "{budget_type} token budget exhausted: {used} of {max} tokens used",
        budget_type = refusal.budget_type.as_str(),
        used = refusal.used_tokens,
        max = refusal.max_tokens
    )]
    BudgetExhausted { refusal: BudgetRefusal },
    #[error("token ledger: {0}")]
    Ledger(#[from] StoreError),
    /// The seat's lease moved to another node: this turn may not write
    /// any more (the new holder resumes it from the journal).
    #[error("the seat is held by another node now; this turn stops")]
    Fenced,
    /// A replay reached a step its journal does not have.
    #[error("the journal ends before step {step}")]
    JournalEnded { step: i32 },
    #[error("tool `{tool}` panicked: {message}")]
    ToolPanicked { tool: String, message: String },
    /// A tool suspended the turn: its work goes on outside it, and the turn
    /// runs again from its journal when that work is done.
    #[error("the turn waits for `{tool}`, which goes on outside it")]
    Suspended { tool: String },
}
