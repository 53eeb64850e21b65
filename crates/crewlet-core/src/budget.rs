//! The window a token budget counts in.

use chrono::{DateTime, Datelike, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// The window a token budget counts in (`budget_policy.period`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BudgetPeriod {
    /// Until an operator resets it.
    #[default]
    None,
    /// Each UTC day.
    Daily,
    /// Each calendar month (UTC).
    Monthly,
}

impl BudgetPeriod {
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::None => "none",
            BudgetPeriod::Daily => "daily",
            BudgetPeriod::Monthly => "monthly",
        }
    }

    /// The start of the period `now` falls in; `None` without a period.
    pub fn window(self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let (year, month, day) = match self {
            BudgetPeriod::None => return None,
            BudgetPeriod::Daily => (now.year(), now.month(), now.day()),
            BudgetPeriod::Monthly => (now.year(), now.month(), 1),
        };
        Utc.with_ymd_and_hms(year, month, day, 0, 0, 0).single()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_start_at_midnight_and_on_the_first() {
        let now = Utc.with_ymd_and_hms(2026, 12, 3, 17, 45, 9).single();
        let Some(now) = now else {
            panic!("a valid time");
        };
        assert_eq!(BudgetPeriod::None.window(now), None);
        assert_eq!(
            BudgetPeriod::Daily.window(now),
            Utc.with_ymd_and_hms(2026, 12, 3, 0, 0, 0).single()
        );
        assert_eq!(
            BudgetPeriod::Monthly.window(now),
            Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).single()
        );
        assert_eq!(
            serde_json::to_string(&BudgetPeriod::Monthly)
                .ok()
                .as_deref(),
            Some("\"monthly\"")
        );
    }
}
