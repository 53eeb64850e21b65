//! What can go wrong in a sandbox, phrased so an operator knows what to do.

use std::path::PathBuf;

/// A sandbox failure.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The backend cannot work on this host (a missing binary, no cgroups).
    #[error("sandbox backend unavailable: {0}")]
    Unavailable(String),
    /// No box with this id (never created, or already torn down).
    #[error("no sandbox `{0}`")]
    NoSuchBox(String),
    /// No detached run with this id in the box.
    #[error("no run `{run}` in sandbox `{sandbox}`")]
    NoSuchRun { sandbox: String, run: String },
    /// A path that leaves the box's home, or is not allowed.
    #[error("path `{0}` is outside the sandbox's home")]
    PathOutside(String),
    /// A file of the box the engine refused to follow: a symbolic link, a
    /// path that would leave the box's home, or not a regular file (a FIFO
    /// that would hang the reader). Something in the box made it, so this
    /// is an escape attempt, never followed; `path` is the in-box path.
    #[error("sandbox file `{path}` refused: {reason}")]
    Escape { path: String, reason: &'static str },
    /// A request that makes no sense (an empty command line, a bad limit).
    #[error("invalid sandbox request: {0}")]
    Invalid(String),
    /// A setup step failed. Names the step and the command's position, never
    /// the command text: it may carry a resolved credential.
    #[error("sandbox setup step `{step}` failed at command {index}: {reason}")]
    Setup {
        step: String,
        index: usize,
        reason: String,
    },
    /// A file or process operation on the host failed.
    #[error("sandbox i/o on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The backend's remote API answered with an error.
    #[error("sandbox api: {0}")]
    Api(String),
}

impl SandboxError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result of sandbox operations.
pub type Result<T, E = SandboxError> = std::result::Result<T, E>;
