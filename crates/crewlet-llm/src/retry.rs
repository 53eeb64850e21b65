//! How many times a turn may retry model calls, and how long a retry waits.
//!
//! Every retry of a model call (a 5xx or network failure retried on the
//! same provider, a rate-limited call sent again after the provider's
//! reset) takes one from a budget shared by the whole turn, so a turn
//! facing a failing provider makes a bounded number of extra calls however
//! many phases and rounds it runs. The turn engine opens the budget with
//! [`with_retry_budget`]; a call made outside any budget (a learning job, a
//! test) gets [`RETRIES_PER_CALL`] of its own from the guarded provider.
//! Backoffs are jittered so seats failing together do not retry together.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rand::Rng;

/// Retries one turn may make across all of its model calls.
pub const RETRIES_PER_TURN: u32 = 8;
/// Retries of one call made outside a turn.
pub const RETRIES_PER_CALL: u32 = 3;

tokio::task_local! {
    static BUDGET: Arc<AtomicU32>;
}

/// Runs `fut` with `retries` retries for every model call it makes.
pub async fn with_retry_budget<F: Future>(retries: u32, fut: F) -> F::Output {
    BUDGET.scope(Arc::new(AtomicU32::new(retries)), fut).await
}

/// Runs `fut` in the current budget, or in one of [`RETRIES_PER_CALL`]
/// when there is none.
pub(crate) async fn in_some_budget<F: Future>(fut: F) -> F::Output {
    if BUDGET.try_with(|_| ()).is_ok() {
        fut.await
    } else {
        with_retry_budget(RETRIES_PER_CALL, fut).await
    }
}

/// Takes one retry from the current budget; `false` when it is spent. With
/// no budget at all (a provider used bare), the caller's own bounds apply.
pub(crate) fn take_retry() -> bool {
    BUDGET
        .try_with(|left| {
            left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok()
        })
        .unwrap_or(true)
}

/// Retries left in the current budget (`None` outside one).
pub fn retries_left() -> Option<u32> {
    BUDGET.try_with(|left| left.load(Ordering::Acquire)).ok()
}

/// `base` doubled `attempt` times, then jittered into its upper half
/// ("equal jitter"): never less than half the backoff, never more than it.
pub(crate) fn backoff(base: Duration, attempt: u32) -> Duration {
    let full = base.saturating_mul(2u32.saturating_pow(attempt.min(16)));
    let half = full / 2;
    half + random_up_to(full - half)
}

/// A uniformly random duration in `[0, max]`.
pub(crate) fn random_up_to(max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_budget_is_shared_by_every_call_of_the_turn_and_runs_out() {
        with_retry_budget(3, async {
            assert!(take_retry());
            in_some_budget(async {
                // a call inside the turn draws on the turn's budget
                assert!(take_retry());
            })
            .await;
            assert_eq!(retries_left(), Some(1));
            assert!(take_retry());
            assert!(!take_retry());
            assert!(!take_retry());
        })
        .await;
    }

    #[tokio::test]
    async fn a_call_outside_a_turn_gets_its_own_small_budget() {
        assert_eq!(retries_left(), None);
        // bare: the caller's own bounds apply
        assert!(take_retry());
        in_some_budget(async {
            assert_eq!(retries_left(), Some(RETRIES_PER_CALL));
            for _ in 0..RETRIES_PER_CALL {
                assert!(take_retry());
            }
            assert!(!take_retry());
        })
        .await;
    }

    #[test]
    fn backoff_doubles_and_stays_in_the_upper_half() {
        let base = Duration::from_millis(500);
        for attempt in 0..6 {
            let full = base * 2u32.pow(attempt);
            for _ in 0..50 {
                let d = backoff(base, attempt);
                assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
            }
        }
        // far attempts saturate instead of overflowing
        assert!(backoff(Duration::from_secs(1), 40) <= Duration::from_secs(65_536));
        assert_eq!(random_up_to(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn jitter_spreads_retries() {
        let base = Duration::from_secs(1);
        let first = backoff(base, 3);
        let spread = (0..20).any(|_| backoff(base, 3) != first);
        assert!(spread, "20 backoffs were all {first:?}");
    }
}
