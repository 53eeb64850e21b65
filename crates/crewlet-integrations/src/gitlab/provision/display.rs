//! How a plan and a report read on a terminal: one line per seat and hook.

use std::fmt;

use super::{HookAction, Outcome, Plan, Report};
use crate::provision::display::{SeatTable, planned};

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "GitLab {} group {} (as @{})",
            self.url, self.group, self.admin
        )?;
        writeln!(f, "webhook: {}", self.hook_url)?;
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        let table = SeatTable::new(
            self.seats
                .iter()
                .map(|s| (s.handle.as_str(), s.username.as_str())),
        );
        for seat in &self.seats {
            let what = seat.action.summary();
            table.row(f, &seat.handle, &seat.username, &what, &seat.notes)?;
        }
        for hook in &self.hooks {
            let what = match &hook.action {
                HookAction::Keep => "hook in place".to_owned(),
                HookAction::Create => "create the hook".to_owned(),
                HookAction::Update { why, .. } => format!("update the hook ({why})"),
                HookAction::Fail(why) => format!("hook FAIL: {why}"),
            };
            writeln!(f, "  {} {}: {what}", hook.space.noun(), hook.path)?;
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
        for hook in &self.hooks {
            let what = match (&hook.outcome, &hook.done) {
                (Outcome::Failed(why), _) => format!("FAILED: {why}"),
                (Outcome::Skipped(why), _) => format!("skipped: {why}"),
                (Outcome::Ok, Some(done)) => done.clone(),
                (Outcome::Ok, None) => "hook ok".to_owned(),
            };
            writeln!(f, "  {}: {what}", hook.target)?;
        }
        let failed = self.seats.iter().filter(|s| s.outcome.is_failed()).count();
        let hooks_failed = self.hooks.iter().filter(|h| h.outcome.is_failed()).count();
        let changed = self.seats.iter().filter(|s| !s.done.is_empty()).count();
        if self.seats.is_empty() && self.hooks.is_empty() {
            write!(f, "nothing to provision")
        } else if !self.changed() && failed + hooks_failed == 0 {
            write!(
                f,
                "nothing changed: GitLab already matches the company file"
            )
        } else {
            write!(
                f,
                "{} seat(s): {changed} changed, {failed} failed; {} hook(s), {hooks_failed} failed",
                self.seats.len(),
                self.hooks.len()
            )
        }
    }
}
