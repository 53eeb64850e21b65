//! How a plan and a report read on a terminal: one line per seat.

use std::fmt;

use super::{Action, Outcome, Plan, Report, SeatOutcome};

/// Column widths for a table of seats.
fn widths<'a>(rows: impl Iterator<Item = (&'a str, &'a str)>) -> (usize, usize) {
    rows.fold((6, 10), |(h, u), (handle, username)| {
        (h.max(handle.len()), u.max(username.len() + 1))
    })
}

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
        let (hw, uw) = widths(
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
            let what = match &seat.action {
                Action::Steps(steps) if steps.is_empty() => "nothing to do".to_owned(),
                Action::Steps(steps) => steps
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                Action::Skip(why) => format!("skip: {why}"),
                Action::Fail(why) => format!("FAIL: {why}"),
            };
            let user = format!("@{}", seat.username);
            writeln!(f, "  {:hw$}  {user:uw$}  {what}", seat.handle)?;
            for note in &seat.notes {
                writeln!(f, "  {:hw$}  {:uw$}  note: {note}", "", "")?;
            }
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
            let user = format!("@{}", r.username);
            writeln!(f, "  {:hw$}  {user:uw$}  {what}", r.handle)?;
        }
        match self.changes() {
            0 => write!(f, "nothing to change"),
            n => write!(f, "{n} change(s) planned"),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (hw, uw) = widths(
            self.seats
                .iter()
                .map(|s| (s.handle.as_str(), s.username.as_str())),
        );
        for seat in &self.seats {
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
            let user = format!("@{}", seat.username);
            writeln!(f, "  {:hw$}  {user:uw$}  {what}", seat.handle)?;
            for note in &seat.notes {
                writeln!(f, "  {:hw$}  {:uw$}  note: {note}", "", "")?;
            }
        }
        let count = |p: fn(&SeatOutcome) -> bool| self.seats.iter().filter(|s| p(s)).count();
        let failed = count(|s| matches!(s.outcome, Outcome::Failed(_)));
        let skipped = count(|s| matches!(s.outcome, Outcome::Skipped(_)));
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
