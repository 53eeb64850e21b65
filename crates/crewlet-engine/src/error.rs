//! The crate's one error type.

use std::path::PathBuf;

use crewlet_api::ApiError;
use crewlet_config::ConfigError;
use crewlet_queue::QueueError;
use crewlet_store::StoreError;

/// Everything that can stop the engine from booting or an admin command from
/// finishing. Messages are lower case and name the input that failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Config(#[from] ConfigError),

    #[error(transparent)]
    Queue(#[from] QueueError),

    #[error(transparent)]
    Store(#[from] StoreError),

    #[error(transparent)]
    Api(#[from] ApiError),

    /// The queue or the stores named by the bootstrap could not be
    /// connected, or a command needs a database there is none of.
    #[error(transparent)]
    Backend(#[from] crewlet_backends::BackendError),

    /// The stored company revision does not parse as a company any more.
    #[error("company revision {revision_id} cannot be read: {reason}")]
    BadRevision { revision_id: i64, reason: String },

    /// A file given on the command line cannot be read or written.
    #[error("cannot {action} {}: {reason}", path.display())]
    File {
        action: &'static str,
        path: PathBuf,
        reason: String,
    },

    /// The configuration asks for something this build cannot do.
    #[error("{0}")]
    Unsupported(String),

    /// A lookup by name or id found nothing.
    #[error("{what} `{key}` not found")]
    NotFound { what: &'static str, key: String },

    /// Anything else, with its cause.
    #[error("{0}")]
    Other(String),
}

impl EngineError {
    /// A file that could not be read or written.
    pub fn file(action: &'static str, path: impl Into<PathBuf>, reason: impl ToString) -> Self {
        Self::File {
            action,
            path: path.into(),
            reason: reason.to_string(),
        }
    }
}
