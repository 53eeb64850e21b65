//! Where provisioning reads and writes secrets: one env file (the `.env`
//! next to the company file unless told otherwise), then the process
//! environment. For every variable the file sets, the file wins: it is
//! where rotated configuration tokens are persisted, and a stale shell
//! export must never shadow a newer pair (Slack invalidates the old
//! refresh token on rotation). The process environment only seeds what
//! the file does not have yet.
//!
//! The configuration token pair (`SLACK_CONFIG_TOKEN`,
//! `SLACK_CONFIG_REFRESH_TOKEN`, `SLACK_CONFIG_TOKEN_EXPIRES_AT`) is
//! reused while it has more than [`EXPIRY_MARGIN`] left, and rotated
//! (`tooling.tokens.rotate`) otherwise; the new pair is written back at
//! once.

use std::path::Path;
use std::time::Duration;

use tracing::{debug, warn};

use super::api::{SlackClient, SlackError};
use crate::provision::envfile::EnvFile;

pub const CONFIG_TOKEN_VAR: &str = "SLACK_CONFIG_TOKEN";
pub const CONFIG_REFRESH_TOKEN_VAR: &str = "SLACK_CONFIG_REFRESH_TOKEN";
pub const CONFIG_TOKEN_EXPIRES_VAR: &str = "SLACK_CONFIG_TOKEN_EXPIRES_AT";

/// A configuration token this close to its expiry is rotated first: a
/// whole run, rate-limit waits included, fits in the margin.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(15 * 60);

/// A variable lookup in the process environment (injected in tests).
pub type ProcessEnv = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The env file, read through, and the process environment behind it.
pub struct EnvStore {
    file: EnvFile,
    process: ProcessEnv,
}

impl std::fmt::Debug for EnvStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvStore")
            .field("file", &self.file.path())
            .finish_non_exhaustive()
    }
}

impl EnvStore {
    /// Reads `path` (missing: empty, created on the first write).
    pub fn open(path: &Path, process: ProcessEnv) -> std::io::Result<EnvStore> {
        Ok(EnvStore {
            file: EnvFile::load(path)?,
            process,
        })
    }

    /// With the real process environment.
    pub fn open_with_process_env(path: &Path) -> std::io::Result<EnvStore> {
        Self::open(path, Box::new(|v| std::env::var(v).ok()))
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The file's value of `var`, else the process's; empty is unset.
    pub fn get(&self, var: &str) -> Option<String> {
        self.file
            .get(var)
            .or_else(|| (self.process)(var))
            .filter(|v| !v.trim().is_empty())
    }

    /// The file's own value of `var`.
    pub fn file_value(&self, var: &str) -> Option<String> {
        self.file.get(var)
    }

    /// Writes `var` into the file (atomically; a new file is 0600).
    pub fn set(&mut self, var: &str, value: &str) -> Result<(), String> {
        self.file
            .set(var, value)
            .map_err(|e| format!("cannot write {var} to {}: {e}", self.path().display()))?;
        debug!(var, file = %self.path().display(), "env file updated");
        Ok(())
    }
}

/// Why no configuration token could be had.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(
        "no {CONFIG_TOKEN_VAR} or {CONFIG_REFRESH_TOKEN_VAR} in {file} or the environment: generate an app configuration token at https://api.slack.com/apps (\"Your App Configuration Tokens\") and set both"
    )]
    Missing { file: String },
    #[error(
        "cannot rotate {CONFIG_REFRESH_TOKEN_VAR} ({0}): generate a new configuration token pair at https://api.slack.com/apps"
    )]
    Rotate(SlackError),
    #[error("{0}")]
    Persist(String),
}

/// A usable configuration token: the stored one while fresh (or of
/// unknown age), else a rotated one, persisted before it is returned.
/// `force` rotates whatever the stored expiry says (the stored token was
/// just refused).
pub async fn config_token(
    client: &SlackClient,
    env: &mut EnvStore,
    now_unix: i64,
    force: bool,
) -> Result<String, TokenError> {
    let token = env.get(CONFIG_TOKEN_VAR);
    let expires_at = env
        .get(CONFIG_TOKEN_EXPIRES_VAR)
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(0);
    let margin = i64::try_from(EXPIRY_MARGIN.as_secs()).unwrap_or(i64::MAX);
    let fresh = expires_at == 0 || now_unix < expires_at.saturating_sub(margin);
    if let Some(t) = &token
        && fresh
        && !force
    {
        return Ok(t.clone());
    }
    let Some(refresh) = env.get(CONFIG_REFRESH_TOKEN_VAR) else {
        return match token {
            Some(t) if !force => Ok(t),
            _ => Err(TokenError::Missing {
                file: env.path().display().to_string(),
            }),
        };
    };
    match client.rotate_config_token(&refresh).await {
        Ok(pair) => {
            env.set(CONFIG_TOKEN_VAR, &pair.token)
                .and_then(|()| env.set(CONFIG_REFRESH_TOKEN_VAR, &pair.refresh_token))
                .and_then(|()| env.set(CONFIG_TOKEN_EXPIRES_VAR, &pair.expires_at.to_string()))
                .map_err(TokenError::Persist)?;
            debug!(
                expires_at = pair.expires_at,
                "slack configuration token rotated"
            );
            Ok(pair.token)
        }
        Err(e) => match token {
            // The stored token may still work; the run finds out.
            Some(t) if !force => {
                warn!(error = %e, "cannot rotate the slack configuration token; using the stored one");
                Ok(t)
            }
            _ => Err(TokenError::Rotate(e)),
        },
    }
}
