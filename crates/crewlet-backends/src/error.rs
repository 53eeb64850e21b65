//! The crate's one error type.

use crewlet_queue::QueueError;
use crewlet_store::StoreError;

/// Why the queue or the stores could not be connected.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Queue(#[from] QueueError),

    #[error(transparent)]
    Store(#[from] StoreError),

    /// A command that works on the database was run without one.
    #[error(
        "`{command}` needs providers.database in the bootstrap config (or CREWLET_PROVIDERS__DATABASE__DSN): without a database nothing is stored between processes"
    )]
    NeedsDatabase { command: &'static str },

    /// The secret store's keyring or rows are refused.
    #[error(transparent)]
    Secrets(Box<crewlet_store::SecretError>),

    /// The configuration asks for something this build cannot do.
    #[error("{0}")]
    Unsupported(String),
}

impl From<crewlet_store::SecretError> for BackendError {
    fn from(e: crewlet_store::SecretError) -> Self {
        Self::Secrets(Box::new(e))
    }
}
