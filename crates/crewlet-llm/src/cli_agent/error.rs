//! What goes wrong driving a coding CLI. Carried inside
//! [`LlmError::CliAgent`](crate::LlmError::CliAgent), which names the
//! provider entry.

use std::path::PathBuf;
use std::time::Duration;

use crate::ErrorClass;

/// A failed CLI call or CLI operation. Messages never contain a token or
/// the prompt; output excerpts are cut short.
#[derive(Debug, thiserror::Error)]
pub enum CliAgentError {
    #[error(
        "the `{binary}` command is not installed (not on PATH, or no such file): install the CLI on the engine host, or set cli.overrides.binary to its absolute path"
    )]
    NotInstalled { binary: String },
    #[error("`{}` is not an executable file: {reason}", path.display())]
    NotExecutable { path: PathBuf, reason: String },
    #[error(
        "the `{agent}` CLI is not logged in for this provider (it said: {excerpt}); run `crewlet llm login {provider}` (`--from-host` adopts this machine's login)"
    )]
    LoggedOut {
        agent: String,
        provider: String,
        excerpt: String,
    },
    #[error("the `{binary}` CLI gave no answer within {timeout:?}; its process group was killed")]
    Timeout { binary: String, timeout: Duration },
    #[error("the `{binary}` CLI reports a spent usage window: {excerpt}")]
    UsageLimit { binary: String, excerpt: String },
    #[error("the `{binary}` CLI printed no usable answer: {reason}")]
    BadOutput { binary: String, reason: String },
    #[error("the `{binary}` CLI exited with {status}: {excerpt}")]
    Failed {
        binary: String,
        status: String,
        excerpt: String,
    },
    #[error("cannot start `{}`: {source}", binary.display())]
    Spawn {
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot prepare `{}`: {source}", path.display())]
    Workspace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{message}")]
    Config { message: String },
}

impl CliAgentError {
    /// How the provider chain treats it: a logout is an auth failure, a spent
    /// window a rate limit (so a chain moves on to a metered key), a hung CLI
    /// a timeout; everything else is not worth retrying on this provider.
    pub fn class(&self) -> ErrorClass {
        match self {
            CliAgentError::LoggedOut { .. } => ErrorClass::Auth,
            CliAgentError::UsageLimit { .. } => ErrorClass::RateLimit,
            CliAgentError::Timeout { .. } => ErrorClass::Timeout,
            CliAgentError::NotInstalled { .. }
            | CliAgentError::NotExecutable { .. }
            | CliAgentError::BadOutput { .. }
            | CliAgentError::Failed { .. }
            | CliAgentError::Spawn { .. }
            | CliAgentError::Workspace { .. }
            | CliAgentError::Config { .. } => ErrorClass::Fatal,
        }
    }
}

/// At most `max` characters of `text`, trimmed, with a mark when cut.
pub(crate) fn excerpt(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}...")
}
