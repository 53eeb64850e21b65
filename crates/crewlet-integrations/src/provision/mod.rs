//! What the `provision` commands (Mattermost, GitLab, Plane, Slack) share.
//!
//! - [`envfile`]: the `.env` file minted tokens and secrets are written
//!   into, and the [`TokenSink`](envfile::TokenSink) seam provisioning
//!   records them through.
//! - [`outcome`]: a minted token that never prints its value, how a seat
//!   ended ([`Outcome`], [`SeatOutcome`]), and the write-through of a
//!   minted token that revokes it again when it cannot be recorded.
//! - [`vars`]: the rules for a seat's token variable: one whole `${VAR}`,
//!   never the operator's credential, never shared between two seats.
//! - [`display`]: the seat table plans and reports print.
//! - [`ProvisionError`]: why a run did nothing at all.

pub(crate) mod display;
pub mod envfile;
pub mod outcome;
pub mod vars;

pub use outcome::{MintedToken, Outcome, SeatAction, SeatOutcome};

/// Why nothing was done at all.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// The company file or the options do not allow a run.
    #[error("{0}")]
    Config(String),
    /// The preflight found the server or the credential unfit.
    #[error("refusing to provision: {0}")]
    Refused(String),
}

/// The operator's token, trimmed, or the error that names where to put it.
pub(crate) fn require_admin_token(token: &str, var: &str) -> Result<(), ProvisionError> {
    if token.trim().is_empty() {
        return Err(ProvisionError::Config(format!(
            "no admin token: pass --admin-token or set {var}"
        )));
    }
    Ok(())
}
