//! Recurring work and the cron syntax it is written in.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::suggest::closest;
use crate::zone::Zone;

/// A task fired on a cron schedule, at most once per fire time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// Name, unique among the schedules of its unit or role.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Five-field cron expression: minute hour day-of-month month day-of-week,
    /// e.g. `0 9 * * 1-5`. Names (`MON`, `JAN`), lists, ranges and steps work.
    pub cron: String,
    /// What the seat is asked to do when the schedule fires.
    #[schemars(length(min = 1))]
    pub task: String,
    /// Time zone the cron expression is read in: a tz database name
    /// (`Europe/Paris`, `UTC`) or a fixed offset like `+02:00`, read exactly
    /// as the scheduler reads it. Empty: `scheduling.default_timezone`.
    #[serde(default)]
    pub timezone: String,
    /// On a unit: `each` (every agent seat of the unit itself, the default)
    /// or `lead` (the unit's effective lead). On a role: ignored.
    #[serde(default)]
    pub target: ScheduleTarget,
    /// Set to `false` to keep the schedule but not fire it.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Time allowed for the turn the schedule starts.
    #[serde(default = "default_schedule_timeout")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: u64,
    /// After downtime, fire the most recent missed run if it is recent enough.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "missed runs are not caught up yet: a fire time that passes while the engine is down is skipped"))]
    pub catchup: Option<bool>,
}

fn default_true() -> bool {
    true
}

fn default_schedule_timeout() -> u64 {
    180
}

/// Who receives a unit schedule's task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleTarget {
    /// Every agent seat of the unit (not of its sub-units), one task each.
    #[default]
    Each,
    /// The unit's lead (inherited from the parent unit when unset).
    Lead,
}

const FIELDS: [(&str, u32, u32); 5] = [
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
];

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Checks a five-field cron expression; the error says which field is wrong.
pub fn check_cron(expr: &str) -> Result<(), String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "cron `{expr}` has {} field{}; expected 5 (minute hour day-of-month month day-of-week)",
            fields.len(),
            if fields.len() == 1 { "" } else { "s" }
        ));
    }
    for (i, (field, (what, lo, hi))) in fields.iter().zip(FIELDS).enumerate() {
        let names: &[&str] = match i {
            3 => &MONTHS,
            4 => &DAYS,
            _ => &[],
        };
        let first = if i == 3 { 1 } else { 0 };
        check_field(field, lo, hi, names, first)
            .map_err(|why| format!("cron `{expr}`: {what} field `{field}` {why}"))?;
    }
    Ok(())
}

fn check_field(field: &str, lo: u32, hi: u32, names: &[&str], first: u32) -> Result<(), String> {
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (part, None),
        };
        if let Some(step) = step {
            match step.parse::<u32>() {
                Ok(n) if n >= 1 && n <= hi => {}
                _ => return Err(format!("has a bad step `{step}`")),
            }
        }
        if range == "*" {
            continue;
        }
        let value = |text: &str| -> Result<u32, String> {
            if let Ok(n) = text.parse::<u32>() {
                return if (lo..=hi).contains(&n) {
                    Ok(n)
                } else {
                    Err(format!("has `{n}` outside {lo}-{hi}"))
                };
            }
            let upper = text.to_ascii_uppercase();
            names
                .iter()
                .position(|n| *n == upper)
                .and_then(|p| u32::try_from(p).ok())
                .map(|p| p + first)
                .ok_or_else(|| format!("has `{text}`, which is not a number in {lo}-{hi}"))
        };
        match range.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (value(a)?, value(b)?);
                if a > b {
                    return Err(format!("has a backwards range `{range}`"));
                }
            }
            None => {
                value(range)?;
            }
        }
    }
    Ok(())
}

/// Checks a time zone with the scheduler's own parser ([`Zone::parse`]):
/// `UTC`, an IANA name from the tz database or a fixed offset like `+02:00`.
pub fn check_timezone(tz: &str) -> Result<(), String> {
    if Zone::parse(tz).is_ok() {
        return Ok(());
    }
    let mut message = format!(
        "time zone `{tz}` is not an IANA name (e.g. `Europe/Paris`), `UTC` or an offset like `+02:00`"
    );
    let names: Vec<&str> = Zone::names().collect();
    if let Some(best) = closest(tz.trim(), &names) {
        message.push_str(&format!("; did you mean `{best}`?"));
    }
    Err(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_crons_pass() {
        for expr in [
            "* * * * *",
            "0 9 * * 1-5",
            "*/15 0-6,22-23 1,15 JAN-MAR mon",
            "30 18 L * *".replace('L', "28").as_str(),
            "0 0 * * 7",
        ] {
            assert_eq!(check_cron(expr), Ok(()), "{expr}");
        }
    }

    #[test]
    fn bad_crons_say_what_is_wrong() {
        let e = check_cron("0 9 * *").unwrap_err();
        assert!(e.contains("4 fields"), "{e}");
        let e = check_cron("61 9 * * *").unwrap_err();
        assert!(e.contains("minute field"), "{e}");
        let e = check_cron("0 9 * * FUNDAY").unwrap_err();
        assert!(e.contains("day of week"), "{e}");
        assert!(check_cron("0 5-2 * * *").is_err());
        assert!(check_cron("*/0 * * * *").is_err());
        assert!(check_cron("@daily").is_err());
    }

    #[test]
    fn time_zones_are_read_as_the_scheduler_reads_them() {
        for tz in [
            "UTC",
            "Europe/Paris",
            "America/Argentina/Buenos_Aires",
            "Etc/GMT+5",
            "+02:00",
        ] {
            assert_eq!(check_timezone(tz), Ok(()), "{tz}");
        }
        for tz in [
            "",
            "Europe/",
            "2/3",
            "+2:00",
            "UTC Paris",
            "Europe/Pariss",
            "+99:99",
            "Mars/Olympus",
        ] {
            assert!(check_timezone(tz).is_err(), "{tz}");
        }
        let e = check_timezone("Europe/Pariss").unwrap_err();
        assert!(e.ends_with("did you mean `Europe/Paris`?"), "{e}");
    }
}
