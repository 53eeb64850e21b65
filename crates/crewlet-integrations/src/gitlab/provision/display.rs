//! How a plan and a report read on a terminal: one line per seat and hook.

use std::fmt;

use super::{Action, HookAction, Outcome, Plan, Report};

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
            "GitLab {} group {} (as @{})",
            self.url, self.group, self.admin
        )?;
        writeln!(f, "webhook: {}", self.hook_url)?;
        for note in &self.notes {
            writeln!(f, "note: {note}")?;
        }
        let (hw, uw) = widths(
            self.seats
                .iter()
                .map(|s| (s.handle.as_str(), s.username.as_str())),
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
        for hook in &self.hooks {
            let what = match &hook.action {
                HookAction::Keep => "hook in place".to_owned(),
                HookAction::Create => "create the hook".to_owned(),
                HookAction::Update { why, .. } => format!("update the hook ({why})"),
                HookAction::Fail(why) => format!("hook FAIL: {why}"),
            };
            writeln!(f, "  {} {}: {what}", hook.space.noun(), hook.path)?;
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
        for hook in &self.hooks {
            let what = match (&hook.outcome, &hook.done) {
                (Outcome::Failed(why), _) => format!("FAILED: {why}"),
                (Outcome::Skipped(why), _) => format!("skipped: {why}"),
                (Outcome::Ok, Some(done)) => done.clone(),
                (Outcome::Ok, None) => "hook ok".to_owned(),
            };
            writeln!(f, "  {}: {what}", hook.target)?;
        }
        let failed = self
            .seats
            .iter()
            .filter(|s| matches!(s.outcome, Outcome::Failed(_)))
            .count();
        let hooks_failed = self
            .hooks
            .iter()
            .filter(|h| matches!(h.outcome, Outcome::Failed(_)))
            .count();
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
