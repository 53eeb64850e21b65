//! How a plan and a report read on a terminal: one line per seat.

use std::fmt;

use super::{Plan, Report, SeatOutcome};
use crate::provision::display::{SeatTable, planned};

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Mattermost {} team {} (as @{})",
            self.url, self.team, self.admin
        )?;
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        let table = SeatTable::new(
            self.seats
                .iter()
                .map(|s| (s.handle.as_str(), s.username.as_str()))
                .chain(
                    self.retire
                        .iter()
                        .map(|r| (r.handle.as_str(), r.username.as_str())),
                ),
        );
        for seat in &self.seats {
            let what = seat.action.summary();
            table.row(f, &seat.handle, &seat.username, &what, &seat.notes)?;
        }
        for r in &self.retire {
            let what = match (&r.fail, r.user_id.is_some()) {
                (Some(why), _) => format!("FAIL: {why}"),
                (None, false) => "no such bot: nothing to decommission".to_owned(),
                (None, true) if !r.disable && r.tokens.is_empty() => {
                    "already decommissioned".to_owned()
                }
                (None, true) => {
                    let mut parts = Vec::new();
                    if r.disable {
                        parts.push("disable the bot".to_owned());
                    }
                    if !r.tokens.is_empty() {
                        parts.push(format!("revoke {} token(s)", r.tokens.len()));
                    }
                    format!("decommission: {}", parts.join(", "))
                }
            };
            table.row(f, &r.handle, &r.username, &what, &[])?;
        }
        planned(f, self.changes())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let table = SeatTable::of(&self.seats);
        for seat in &self.seats {
            table.outcome(f, seat)?;
        }
        let count = |p: fn(&SeatOutcome) -> bool| self.seats.iter().filter(|s| p(s)).count();
        let failed = count(|s| s.outcome.is_failed());
        let skipped = count(|s| s.outcome.is_skipped());
        let changed = count(|s| !s.done.is_empty());
        if self.seats.is_empty() {
            write!(f, "no seat to provision")
        } else if !self.changed() && failed == 0 {
            write!(f, "nothing changed: every seat was already provisioned")?;
            if skipped > 0 {
                write!(f, " ({skipped} skipped)")?;
            }
            Ok(())
        } else {
            write!(
                f,
                "{} seat(s): {changed} changed, {failed} failed, {skipped} skipped",
                self.seats.len()
            )
        }
    }
}
