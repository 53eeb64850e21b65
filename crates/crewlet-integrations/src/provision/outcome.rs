//! How a provisioning run reports on its seats, and the write-through of a
//! minted token.

use std::fmt;

use super::envfile::TokenSink;

/// A token minted in this run. Its value prints nowhere on its own.
#[derive(Clone)]
pub struct MintedToken {
    pub handle: String,
    pub var: String,
    value: String,
}

impl MintedToken {
    pub(crate) fn new(handle: &str, var: &str, value: String) -> MintedToken {
        MintedToken {
            handle: handle.to_owned(),
            var: var.to_owned(),
            value,
        }
    }

    /// The token itself, for `--print`.
    pub fn value(&self) -> &str {
        &self.value
    }
}

impl fmt::Debug for MintedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MintedToken")
            .field("handle", &self.handle)
            .field("var", &self.var)
            .finish_non_exhaustive()
    }
}

/// How a seat (or a hook) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Skipped(String),
    Failed(String),
}

impl Outcome {
    pub fn is_failed(&self) -> bool {
        matches!(self, Outcome::Failed(_))
    }

    pub fn is_skipped(&self) -> bool {
        matches!(self, Outcome::Skipped(_))
    }
}

/// What was done for one seat.
#[derive(Debug, Clone)]
pub struct SeatOutcome {
    pub handle: String,
    pub username: String,
    /// `created`, `joined ~x`, `minted token into VAR`, `disabled`, ...
    pub done: Vec<String>,
    pub notes: Vec<String>,
    pub outcome: Outcome,
}

impl SeatOutcome {
    /// A seat nothing was done for yet.
    pub(crate) fn new(handle: &str, username: &str, notes: Vec<String>) -> SeatOutcome {
        SeatOutcome {
            handle: handle.to_owned(),
            username: username.to_owned(),
            done: Vec::new(),
            notes,
            outcome: Outcome::Ok,
        }
    }
}

/// Whether any seat failed.
pub(crate) fn any_failed(seats: &[SeatOutcome]) -> bool {
    seats.iter().any(|s| s.outcome.is_failed())
}

/// Whether anything was done for any seat.
pub(crate) fn any_changed(seats: &[SeatOutcome]) -> bool {
    seats.iter().any(|s| !s.done.is_empty())
}

/// What a run will do for one seat: its steps, or why it is skipped or
/// cannot be provisioned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeatAction<S> {
    Steps(Vec<S>),
    Skip(String),
    Fail(String),
}

impl<S> SeatAction<S> {
    /// How many changes it makes.
    pub fn changes(&self) -> usize {
        match self {
            SeatAction::Steps(steps) => steps.len(),
            _ => 0,
        }
    }

    pub fn fails(&self) -> bool {
        matches!(self, SeatAction::Fail(_))
    }

    /// Where a plan leaves a seat before any step is carried out.
    pub(crate) fn start(&self) -> Result<&[S], Outcome> {
        match self {
            SeatAction::Steps(steps) => Ok(steps),
            SeatAction::Skip(why) => Err(Outcome::Skipped(why.clone())),
            SeatAction::Fail(why) => Err(Outcome::Failed(why.clone())),
        }
    }
}

impl<S: fmt::Display> SeatAction<S> {
    /// The plan line's text: the steps, or `skip:`/`FAIL:` and why.
    pub(crate) fn summary(&self) -> String {
        match self {
            SeatAction::Steps(steps) if steps.is_empty() => "nothing to do".to_owned(),
            SeatAction::Steps(steps) => steps
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            SeatAction::Skip(why) => format!("skip: {why}"),
            SeatAction::Fail(why) => format!("FAIL: {why}"),
        }
    }
}

/// Records a freshly minted token `value` as `var`; `no_value` is the
/// error when the server returned an empty one.
pub(crate) fn record_token(
    sink: &mut dyn TokenSink,
    var: &str,
    value: &str,
    no_value: &str,
) -> Result<(), String> {
    if value.is_empty() {
        Err(no_value.to_owned())
    } else {
        sink.record(var, value)
    }
}

/// The error of a token that could not be recorded (`why`), once revoking
/// token `id` again was tried.
pub(crate) fn revoked_again<E: fmt::Display>(
    why: &str,
    id: impl fmt::Display,
    revoked: Result<(), E>,
) -> String {
    match revoked {
        Ok(()) => format!("{why}; the minted token was revoked again"),
        Err(e) => {
            format!("{why}; revoking the minted token {id} failed too ({e}): revoke it by hand")
        }
    }
}
