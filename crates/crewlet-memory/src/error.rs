//! What can go wrong reading or writing memory.

use crewlet_store::StoreError;

/// Errors of the memory repositories. Messages are lower-case and name the
/// agent, the row or the limit that failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The database failed (unreachable, a query failed, a row did not decode).
    #[error(transparent)]
    Store(#[from] StoreError),

    /// A row with the same key already exists (e.g. a skill name).
    #[error("{0}")]
    Conflict(String),

    /// A per-agent cap was reached (skills per agent, body size).
    #[error("{0}")]
    Limit(String),

    /// No such row.
    #[error("{0}")]
    NotFound(String),

    /// The input itself is unusable (empty content, a vector wider than the
    /// database's embedding column).
    #[error("{0}")]
    Invalid(String),
}

impl MemoryError {
    /// The database was unavailable: the same call may succeed later.
    pub fn is_transient(&self) -> bool {
        matches!(self, MemoryError::Store(e) if e.is_transient())
    }
}
