//! `budget_policy`: how the token budgets (`token_budget` on the company,
//! its units and its roles) count and warn.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How the company's token budgets count and warn.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetPolicy {
    /// The window a budget counts in. `none`: usage accumulates until an
    /// operator resets it; `daily` / `monthly`: every budget starts over
    /// at 00:00 UTC each day / on the first of each month, on its own.
    #[serde(default)]
    #[schemars(with = "PeriodSchema")]
    pub period: BudgetPeriod,
    /// The fraction of a cap at which `budget_warning` is published, once
    /// per budget and period; 0 turns warnings off.
    #[serde(default = "default_warn_at")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub warn_at: f64,
}

fn default_warn_at() -> f64 {
    0.8
}

impl Default for BudgetPolicy {
    fn default() -> Self {
        Self {
            period: BudgetPeriod::None,
            warn_at: default_warn_at(),
        }
    }
}

pub use crewlet_core::BudgetPeriod;

// The JSON schema of `BudgetPeriod` (the type itself lives in
// `crewlet-core`, where the ledger and the turn engine use it).
/// The window a token budget counts in.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "BudgetPeriod")]
#[allow(dead_code)]
enum PeriodSchema {
    /// Until reset.
    None,
    /// Each UTC day.
    Daily,
    /// Each calendar month (UTC).
    Monthly,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_defaults_to_no_period_and_a_warning_at_80_percent() {
        let p: BudgetPolicy = serde_json::from_str("{}").expect("an empty policy reads");
        assert_eq!(p, BudgetPolicy::default());
        assert!((p.warn_at - 0.8).abs() < f64::EPSILON);
        let p: BudgetPolicy =
            serde_json::from_str(r#"{"period": "monthly", "warn_at": 0}"#).expect("reads");
        assert_eq!(p.period, BudgetPeriod::Monthly);
    }
}
