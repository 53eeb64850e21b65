//! The seat table plans and reports print: one line per seat
//! (`handle  @username  what`), its notes below it.

use std::fmt;

use super::outcome::{Outcome, SeatOutcome};

/// Column widths for a table of seats.
pub(crate) struct SeatTable {
    hw: usize,
    uw: usize,
}

impl SeatTable {
    /// Wide enough for every `(handle, username)`.
    pub(crate) fn new<'a>(rows: impl Iterator<Item = (&'a str, &'a str)>) -> SeatTable {
        let (hw, uw) = rows.fold((6, 10), |(h, u), (handle, username)| {
            (h.max(handle.len()), u.max(username.len() + 1))
        });
        SeatTable { hw, uw }
    }

    /// For the report's seats.
    pub(crate) fn of(seats: &[SeatOutcome]) -> SeatTable {
        SeatTable::new(
            seats
                .iter()
                .map(|s| (s.handle.as_str(), s.username.as_str())),
        )
    }

    /// One seat's line and its notes.
    pub(crate) fn row(
        &self,
        f: &mut fmt::Formatter<'_>,
        handle: &str,
        username: &str,
        what: &str,
        notes: &[String],
    ) -> fmt::Result {
        let (hw, uw) = (self.hw, self.uw);
        let user = format!("@{username}");
        writeln!(f, "  {handle:hw$}  {user:uw$}  {what}")?;
        for note in notes {
            writeln!(f, "  {:hw$}  {:uw$}  note: {note}", "", "")?;
        }
        Ok(())
    }

    /// The report's line of one seat: what was done, then how it ended.
    pub(crate) fn outcome(&self, f: &mut fmt::Formatter<'_>, seat: &SeatOutcome) -> fmt::Result {
        let mut what = seat.done.join(", ");
        let tail = match &seat.outcome {
            Outcome::Ok if seat.done.is_empty() => "ok".to_owned(),
            Outcome::Ok => String::new(),
            Outcome::Skipped(why) => format!("skipped: {why}"),
            Outcome::Failed(why) => format!("FAILED: {why}"),
        };
        if !tail.is_empty() {
            if !what.is_empty() {
                what.push_str("; ");
            }
            what.push_str(&tail);
        }
        self.row(f, &seat.handle, &seat.username, &what, &seat.notes)
    }
}

/// The plan's last line.
pub(crate) fn planned(f: &mut fmt::Formatter<'_>, changes: usize) -> fmt::Result {
    match changes {
        0 => write!(f, "nothing to change"),
        n => write!(f, "{n} change(s) planned"),
    }
}
