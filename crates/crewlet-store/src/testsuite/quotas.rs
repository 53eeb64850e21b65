//! [`ProviderQuotas`] conformance. Starts are compared on the limiter's own
//! clock (`QuotaSlot::starts_at`), never against the wall clock.

use std::sync::Arc;
use std::time::Duration;

use crewlet_core::quota::{ProviderQuotas, QuotaLimits, QuotaSlot};
use futures::future::join_all;

use super::ok;

/// Slack for the database's microsecond timestamps.
const EPS: f64 = 1e-3;

async fn reserve(
    q: &dyn ProviderQuotas,
    key: &str,
    limits: &QuotaLimits,
    tokens: u64,
) -> QuotaSlot {
    ok(q.reserve(key, limits, tokens).await, "reserve")
}

pub async fn the_first_call_starts_at_once_and_unlimited_calls_never_wait(
    q: Arc<dyn ProviderQuotas>,
) {
    let limits = QuotaLimits::per_minute(Some(60), Some(100_000));
    let first = reserve(q.as_ref(), "main", &limits, 5_000).await;
    assert_eq!(first.wait, Duration::ZERO);
    let none = QuotaLimits::per_minute(None, None);
    for _ in 0..20 {
        let slot = reserve(q.as_ref(), "free", &none, 1_000_000).await;
        assert_eq!(slot.wait, Duration::ZERO);
    }
}

pub async fn requests_are_spaced_by_the_interval(q: Arc<dyn ProviderQuotas>) {
    // One request an hour: the interval is 61 minutes.
    let limits = QuotaLimits::per_minute(Some(1), None).over(Duration::from_secs(3600));
    let slots = [
        reserve(q.as_ref(), "main", &limits, 10).await,
        reserve(q.as_ref(), "main", &limits, 10).await,
        reserve(q.as_ref(), "main", &limits, 10).await,
    ];
    for (i, slot) in slots.iter().enumerate() {
        let gap = slot.starts_at - slots[0].starts_at;
        assert!((gap - 3660.0 * i as f64).abs() < EPS, "slot {i}: {gap}");
        let waited = slot.wait.as_secs_f64();
        assert!(
            waited > 3660.0 * i as f64 - 60.0 && waited <= 3660.0 * i as f64 + EPS,
            "slot {i} waits {waited}"
        );
    }
}

pub async fn concurrent_reservations_never_exceed_the_rate(q: Arc<dyn ProviderQuotas>) {
    let limits = QuotaLimits::per_minute(Some(10), None);
    let calls = (0..200).map(|_| {
        let q = q.clone();
        async move { reserve(q.as_ref(), "main", &limits, 1).await }
    });
    let mut starts: Vec<f64> = join_all(calls).await.iter().map(|s| s.starts_at).collect();
    starts.sort_by(f64::total_cmp);
    let span = limits.span_secs();
    // No window of `span` holds more than 10 starts ...
    for w in starts.windows(11) {
        assert!(
            w[10] - w[0] >= span - EPS,
            "11 starts within {}",
            w[10] - w[0]
        );
    }
    // ... and the schedule wastes nothing: one start every 6.1 s.
    let total = starts[199] - starts[0];
    assert!((total - 199.0 * span / 10.0).abs() < 1.0, "{total}");
}

pub async fn tokens_burst_up_to_the_bucket_then_refill(q: Arc<dyn ProviderQuotas>) {
    let limits = QuotaLimits::per_minute(None, Some(1000));
    let a = reserve(q.as_ref(), "main", &limits, 400).await;
    let b = reserve(q.as_ref(), "main", &limits, 400).await;
    let c = reserve(q.as_ref(), "main", &limits, 400).await;
    assert_eq!((a.wait, b.wait), (Duration::ZERO, Duration::ZERO));
    // The third waits for 200 tokens to come back: 0.2 of a 61 s minute.
    let gap = c.starts_at - a.starts_at;
    assert!((gap - 12.2).abs() < EPS, "{gap}");
    assert!(c.wait > Duration::from_secs(11), "{:?}", c.wait);
}

pub async fn concurrent_token_reservations_keep_to_the_bucket(q: Arc<dyn ProviderQuotas>) {
    let limits = QuotaLimits::per_minute(None, Some(1000));
    let calls = (0..100u64).map(|i| {
        let q = q.clone();
        let tokens = 50 + (i * 37) % 200;
        async move { (reserve(q.as_ref(), "main", &limits, tokens).await, tokens) }
    });
    let mut slots: Vec<(f64, u64)> = join_all(calls)
        .await
        .into_iter()
        .map(|(s, t)| (s.starts_at, t))
        .collect();
    slots.sort_by(|x, y| x.0.total_cmp(&y.0));
    // Between any two starts, the calls started spend at most a full bucket
    // plus what refilled in between.
    let rate = 1000.0 / limits.span_secs();
    for i in 0..slots.len() {
        let mut spent = 0.0;
        for j in i..slots.len() {
            #[allow(clippy::cast_precision_loss)]
            let tokens = slots[j].1 as f64;
            spent += tokens;
            let allowed = 1000.0 + rate * (slots[j].0 - slots[i].0) + rate * EPS;
            assert!(
                spent <= allowed,
                "calls {i}..={j} spend {spent} > {allowed}"
            );
        }
    }
}

pub async fn settling_gives_unused_tokens_back(q: Arc<dyn ProviderQuotas>) {
    let limits = QuotaLimits::per_minute(None, Some(1000));
    reserve(q.as_ref(), "settled", &limits, 800).await;
    ok(q.settle("settled", &limits, 100 - 800).await, "settle");
    let next = reserve(q.as_ref(), "settled", &limits, 800).await;
    assert_eq!(next.wait, Duration::ZERO);
    // Unsettled, the same call waits for the bucket.
    reserve(q.as_ref(), "unsettled", &limits, 800).await;
    let waits = reserve(q.as_ref(), "unsettled", &limits, 800).await;
    assert!(waits.wait > Duration::from_secs(30), "{:?}", waits.wait);
    // A settle of a provider never reserved is a no-op.
    ok(q.settle("nobody", &limits, 5).await, "settle");
}

pub async fn a_pause_holds_every_call_until_the_reset(q: Arc<dyn ProviderQuotas>) {
    let limits = QuotaLimits::per_minute(Some(6000), None);
    reserve(q.as_ref(), "main", &limits, 1).await;
    ok(q.pause("main", Duration::from_secs(30)).await, "pause");
    let held = reserve(q.as_ref(), "main", &limits, 1).await;
    let waited = held.wait.as_secs_f64();
    assert!(waited > 25.0 && waited <= 30.0 + EPS, "{waited}");
    // A shorter pause does not shorten the longer one.
    ok(q.pause("main", Duration::from_secs(1)).await, "pause");
    let later = reserve(q.as_ref(), "main", &limits, 1).await;
    assert!(later.starts_at > held.starts_at, "{later:?} {held:?}");
    // A pause also holds a provider that has no limits and no row yet.
    ok(q.pause("fresh", Duration::from_secs(20)).await, "pause");
    let none = QuotaLimits::per_minute(None, None);
    let slot = reserve(q.as_ref(), "fresh", &none, 1).await;
    assert!(slot.wait > Duration::from_secs(15), "{:?}", slot.wait);
}

pub async fn providers_have_their_own_budgets(q: Arc<dyn ProviderQuotas>) {
    let limits = QuotaLimits::per_minute(Some(1), Some(10));
    reserve(q.as_ref(), "a", &limits, 10).await;
    let a = reserve(q.as_ref(), "a", &limits, 10).await;
    let b = reserve(q.as_ref(), "b", &limits, 10).await;
    assert!(a.wait > Duration::from_secs(50), "{:?}", a.wait);
    assert_eq!(b.wait, Duration::ZERO);
}
