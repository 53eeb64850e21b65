//! Provider quotas: the request and token rate limits of one model provider
//! (`rpm`, `tpm` of a `providers.llm` entry), shared by every seat that
//! calls it.
//!
//! A call *reserves* a start time and waits for it; it is never refused.
//! The schedule is a generic cell rate algorithm (GCRA) per provider, kept
//! as two "theoretical arrival times":
//!
//! - requests are spaced evenly, one every `span / rpm` seconds (no burst),
//!   so no window of `span` seconds holds more than `rpm` starts;
//! - tokens come from a bucket of `tpm` tokens refilled continuously over
//!   `span`: a call may start as soon as its estimated cost fits.
//!
//! `span` is the quota's window (a minute) stretched by 1/60 (61 s for a
//! minute), so clock skew and network delay between us and the provider
//! cannot push a window past its limit: the achieved rate is 60/61 (98.4%)
//! of the cap. [`ProviderQuotas`] has a PostgreSQL implementation (one row
//! per provider, reserved in one statement, shared by every process) and an
//! in-memory one (`crewlet-store`); both follow [`QuotaState::reserve`].

use std::time::Duration;

use async_trait::async_trait;

/// The rate limits of one provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaLimits {
    /// Requests per window; `None`: no request limit.
    pub requests: Option<u32>,
    /// Tokens per window; `None`: no token limit.
    pub tokens: Option<u64>,
    /// The window the limits are counted over: a minute for `rpm`/`tpm`.
    pub window: Duration,
}

impl QuotaLimits {
    /// `rpm` requests and `tpm` tokens per minute.
    pub fn per_minute(rpm: Option<u32>, tpm: Option<u64>) -> Self {
        Self {
            requests: rpm.filter(|n| *n > 0),
            tokens: tpm.filter(|n| *n > 0),
            window: Duration::from_secs(60),
        }
    }

    /// The same limits over another window (benchmarks compress the clock).
    pub fn over(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Whether there is anything to schedule.
    pub fn is_unlimited(&self) -> bool {
        self.requests.is_none() && self.tokens.is_none()
    }

    /// The window the schedule keeps to, in seconds: the window plus 1/60
    /// of it (61 s for a minute).
    pub fn span_secs(&self) -> f64 {
        self.window.as_secs_f64() * 61.0 / 60.0
    }

    /// Seconds between two request starts (0 without a request limit).
    pub fn request_interval(&self) -> f64 {
        self.requests
            .map_or(0.0, |n| self.span_secs() / f64::from(n))
    }

    /// Seconds of the window one call of `tokens` takes from the bucket,
    /// and how far ahead of the bucket it may still start (its burst
    /// tolerance); both 0 without a token limit. A call larger than the
    /// whole bucket is counted as the whole bucket.
    pub fn token_cost(&self, tokens: u64) -> (f64, f64) {
        match self.tokens {
            None => (0.0, 0.0),
            Some(cap) => {
                #[allow(clippy::cast_precision_loss)]
                let share = tokens.min(cap) as f64 / cap as f64;
                let cost = self.span_secs() * share;
                (cost, self.span_secs() - cost)
            }
        }
    }

    /// Seconds of the window `tokens` stand for (negative for a refund).
    pub fn token_secs(&self, tokens: i64) -> f64 {
        match self.tokens {
            #[allow(clippy::cast_precision_loss)]
            Some(cap) => self.span_secs() * tokens as f64 / cap as f64,
            None => 0.0,
        }
    }
}

/// A reserved start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuotaSlot {
    /// How long to wait before sending the call.
    pub wait: Duration,
    /// When the slot starts, in seconds on the limiter's own clock (the
    /// database's for PostgreSQL): comparable only between slots of one
    /// limiter.
    pub starts_at: f64,
}

/// The limiter could not be reached; the message says why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("provider quota: {0}")]
pub struct QuotaError(pub String);

/// The shared schedule of model calls per provider (`key`).
#[async_trait]
pub trait ProviderQuotas: Send + Sync {
    /// Reserves the earliest start for one call estimated at `tokens`
    /// within `limits`, and says how long to wait for it.
    async fn reserve(
        &self,
        key: &str,
        limits: &QuotaLimits,
        tokens: u64,
    ) -> Result<QuotaSlot, QuotaError>;

    /// Corrects a reservation's token estimate by what the call really
    /// used: `used - estimated` tokens (negative gives tokens back).
    async fn settle(&self, key: &str, limits: &QuotaLimits, delta: i64) -> Result<(), QuotaError>;

    /// No call to `key` starts for `pause` from now (the provider said
    /// when its limit resets).
    async fn pause(&self, key: &str, pause: Duration) -> Result<(), QuotaError>;
}

/// One provider's schedule, in seconds on some clock. The in-memory
/// limiter keeps one per provider; the PostgreSQL row holds the same two
/// numbers as timestamps and applies the same arithmetic in SQL.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QuotaState {
    /// The earliest start of the next request.
    pub request_tat: f64,
    /// When the token bucket would be full again.
    pub token_tat: f64,
}

impl QuotaState {
    /// A state whose next call may start at `now`.
    pub fn at(now: f64) -> Self {
        Self {
            request_tat: now,
            token_tat: now,
        }
    }

    /// Reserves the earliest start at or after `now` for a call of
    /// `tokens`, and returns it.
    pub fn reserve(&mut self, now: f64, limits: &QuotaLimits, tokens: u64) -> f64 {
        let (cost, tolerance) = limits.token_cost(tokens);
        let start = now.max(self.request_tat).max(self.token_tat - tolerance);
        self.request_tat = start + limits.request_interval();
        self.token_tat = self.token_tat.max(start) + cost;
        start
    }

    /// Moves the token bucket by `delta` tokens (see [`ProviderQuotas::settle`]).
    pub fn settle(&mut self, limits: &QuotaLimits, delta: i64) {
        self.token_tat += limits.token_secs(delta);
    }

    /// Holds every start until `until`.
    pub fn pause(&mut self, until: f64) {
        self.request_tat = self.request_tat.max(until);
    }
}

/// The wait until `start` as of `now` (zero when it has passed).
pub fn wait_until(start: f64, now: f64) -> Duration {
    let secs = start - now;
    if secs.is_finite() && secs > 0.0 {
        Duration::from_secs_f64(secs.min(86_400.0 * 365.0))
    } else {
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPS: f64 = 1e-9;

    #[test]
    fn requests_are_spaced_evenly_over_a_61_second_minute() {
        let limits = QuotaLimits::per_minute(Some(60), None);
        let mut s = QuotaState::at(0.0);
        let starts: Vec<f64> = (0..4).map(|_| s.reserve(0.0, &limits, 1000)).collect();
        let step = 61.0 / 60.0;
        for (i, start) in starts.iter().enumerate() {
            assert!((start - step * i as f64).abs() < EPS, "{starts:?}");
        }
        // a call after a quiet spell starts at once
        assert!((s.reserve(100.0, &limits, 1) - 100.0).abs() < EPS);
    }

    #[test]
    fn tokens_burst_up_to_the_bucket_then_refill() {
        let limits = QuotaLimits::per_minute(None, Some(1000));
        let mut s = QuotaState::at(0.0);
        assert!(s.reserve(0.0, &limits, 400).abs() < EPS);
        assert!(s.reserve(0.0, &limits, 400).abs() < EPS);
        // the third 400 waits for 200 tokens to come back: 0.2 of 61 s
        let third = s.reserve(0.0, &limits, 400);
        assert!((third - 12.2).abs() < 1e-6, "{third}");
    }

    #[test]
    fn settling_gives_unused_tokens_back() {
        let limits = QuotaLimits::per_minute(None, Some(1000));
        let mut s = QuotaState::at(0.0);
        s.reserve(0.0, &limits, 800);
        s.settle(&limits, 100 - 800);
        assert!(s.reserve(0.0, &limits, 800).abs() < EPS);
        let mut unsettled = QuotaState::at(0.0);
        unsettled.reserve(0.0, &limits, 800);
        assert!(unsettled.reserve(0.0, &limits, 800) > 30.0);
    }

    #[test]
    fn a_call_larger_than_the_bucket_waits_for_a_full_bucket_only() {
        let limits = QuotaLimits::per_minute(None, Some(100));
        let mut s = QuotaState::at(0.0);
        assert!(s.reserve(0.0, &limits, 1_000_000).abs() < EPS);
        let next = s.reserve(0.0, &limits, 1_000_000);
        assert!((next - 61.0).abs() < 1e-6, "{next}");
    }

    #[test]
    fn a_pause_holds_the_next_start() {
        let limits = QuotaLimits::per_minute(Some(600), None);
        let mut s = QuotaState::at(0.0);
        s.pause(30.0);
        assert!((s.reserve(1.0, &limits, 1) - 30.0).abs() < EPS);
        // no limits: only the pause schedules anything
        let mut free = QuotaState::at(0.0);
        let none = QuotaLimits::per_minute(None, None);
        assert!(none.is_unlimited());
        assert!(free.reserve(5.0, &none, 10).eq(&5.0));
        free.pause(9.0);
        assert!(free.reserve(5.0, &none, 10).eq(&9.0));
    }

    #[test]
    fn waits_are_never_negative() {
        assert_eq!(wait_until(1.0, 2.0), Duration::ZERO);
        assert_eq!(wait_until(f64::NAN, 2.0), Duration::ZERO);
        assert_eq!(wait_until(3.5, 2.0), Duration::from_millis(1500));
    }
}
