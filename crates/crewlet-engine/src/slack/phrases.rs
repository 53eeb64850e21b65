//! The words of a Slack working status. Slack shows the line after the
//! bot's name ("Eng is weighing it up..."), so every phrase starts with
//! "is". Each phase has a pool; a turn shows one phrase per phase, picked
//! deterministically from who, where, which task and which phase, so the
//! heartbeat repeats the same words and the next phase brings new ones.
//!
//! A phrase says that the seat is in a phase, never what it is doing:
//! the pick consults nothing about the work, so a phrase that names some
//! work ("is reading the ticket...") would be a claim that is usually
//! false. Phrases are generic or plainly figurative. A company replaces
//! any pool with `integrations.slack.status_phrases`.

use crewlet_config::StatusPhrases;

const ONBOARDING: &[&str] = &[
    "is getting oriented...",
    "is learning the ropes...",
    "is hanging up its coat...",
    "is sharpening its pencils...",
    "is arriving...",
];

const PLAN: &[&str] = &[
    "is thinking...",
    "is weighing it up...",
    "is working out an approach...",
    "is gathering its thoughts...",
    "is sketching a plan...",
    "is considering...",
];

const EXECUTE: &[&str] = &[
    "is working...",
    "is hard at work...",
    "is on the job...",
    "is getting stuck in...",
    "is making progress...",
    "is busy...",
];

const REVIEW: &[&str] = &[
    "is reviewing...",
    "is checking its work...",
    "is looking it over...",
    "is giving it a once-over...",
    "is polishing...",
    "is tidying up...",
];

const DEFAULT: &[&str] = &[
    "is working...",
    "is busy...",
    "is at it...",
    "is occupied...",
];

/// The pools of a company: the built-in ones, each replaced by the
/// company's own when it gives any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Phrases {
    onboarding: Vec<String>,
    plan: Vec<String>,
    execute: Vec<String>,
    review: Vec<String>,
    default: Vec<String>,
}

impl Default for Phrases {
    fn default() -> Self {
        Self::new(None)
    }
}

fn pool(own: Option<&Vec<String>>, built_in: &[&str]) -> Vec<String> {
    let own: Vec<String> = own
        .into_iter()
        .flatten()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    if own.is_empty() {
        built_in.iter().map(|p| (*p).to_owned()).collect()
    } else {
        own
    }
}

impl Phrases {
    /// The built-in pools with `overrides` laid over them per phase (an
    /// empty list keeps the built-in pool).
    pub fn new(overrides: Option<&StatusPhrases>) -> Self {
        Self {
            onboarding: pool(overrides.map(|o| &o.onboarding), ONBOARDING),
            plan: pool(overrides.map(|o| &o.plan), PLAN),
            execute: pool(overrides.map(|o| &o.execute), EXECUTE),
            review: pool(overrides.map(|o| &o.review), REVIEW),
            default: pool(overrides.map(|o| &o.default), DEFAULT),
        }
    }

    fn pool(&self, phase: &str) -> &[String] {
        match phase {
            "onboarding" => &self.onboarding,
            "plan" => &self.plan,
            "execute" => &self.execute,
            "review" => &self.review,
            _ => &self.default,
        }
    }

    /// The phrase of `phase` for `seed` (who, where, which task: the
    /// same seed and phase always give the same phrase).
    pub fn pick(&self, phase: &str, seed: &str) -> &str {
        let pool = self.pool(phase);
        if pool.is_empty() {
            return "is working...";
        }
        let hash = fnv1a(format!("{seed}\u{1f}{phase}").as_bytes());
        let len = u64::try_from(pool.len()).unwrap_or(1);
        let index = usize::try_from(hash % len).unwrap_or(0);
        pool.get(index).map_or("is working...", String::as_str)
    }
}

/// FNV-1a: stable across processes and releases (unlike `DefaultHasher`),
/// so a restarted engine shows a turn the same words.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pick_is_stable_and_from_the_phases_pool() {
        let p = Phrases::default();
        let a = p.pick("plan", "eng|C1|1.2|t1");
        assert_eq!(a, p.pick("plan", "eng|C1|1.2|t1"));
        assert!(PLAN.contains(&a));
        assert!(EXECUTE.contains(&p.pick("execute", "eng|C1|1.2|t1")));
        assert!(REVIEW.contains(&p.pick("review", "x")));
        assert!(DEFAULT.contains(&p.pick("auxiliary", "x")));
        assert!(ONBOARDING.contains(&p.pick("onboarding", "x")));
        // Different turns spread over the pool.
        let picks: std::collections::BTreeSet<&str> = (0..64)
            .map(|i| p.pick("plan", &format!("eng|C1|1.2|t{i}")))
            .collect();
        assert!(picks.len() > 1);
    }

    #[test]
    fn every_built_in_phrase_finishes_the_bots_name() {
        for pool in [ONBOARDING, PLAN, EXECUTE, REVIEW, DEFAULT] {
            for p in pool {
                assert!(p.starts_with("is ") && p.ends_with("..."), "{p}");
            }
        }
    }

    #[test]
    fn a_company_replaces_only_the_pools_it_gives() {
        let own = StatusPhrases {
            plan: vec!["is plotting...".into(), "  ".into()],
            review: vec![" ".into()],
            ..StatusPhrases::default()
        };
        let p = Phrases::new(Some(&own));
        assert_eq!(p.pick("plan", "any seed"), "is plotting...");
        assert!(
            REVIEW.contains(&p.pick("review", "x")),
            "blank keeps the built-in pool"
        );
        assert!(EXECUTE.contains(&p.pick("execute", "x")));
    }
}
