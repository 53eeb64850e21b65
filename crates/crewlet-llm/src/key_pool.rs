//! The API keys of one provider entry, shared by every call to it.
//!
//! A call leases the key with the fewest calls in flight (ties: the one
//! leased longest ago). A rate-limited key cools for `Retry-After` or an
//! hour; a refused key cools for 5 minutes, doubling with each consecutive
//! refusal up to 6 times. When every key is cooling the provider has no
//! credentials left and the caller falls back to the next provider.

use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{ApiKey, LlmError};

/// Cooldown after a rate limit without `Retry-After`.
pub const RATE_LIMIT_COOLDOWN: Duration = Duration::from_secs(3600);
/// Cooldown after the first auth failure; doubled per consecutive failure.
pub const AUTH_COOLDOWN_BASE: Duration = Duration::from_secs(300);
/// How many times the auth cooldown doubles at most (300 s .. 19 200 s).
pub const AUTH_COOLDOWN_MAX_DOUBLINGS: u32 = 6;

#[derive(Debug, Default, Clone)]
struct KeyState {
    in_flight: u32,
    cooled_until: Option<Instant>,
    auth_failures: u32,
    last_leased: u64,
}

#[derive(Debug)]
struct Inner {
    provider: String,
    keys: Vec<ApiKey>,
    state: Mutex<PoolState>,
}

#[derive(Debug)]
struct PoolState {
    keys: Vec<KeyState>,
    leases: u64,
}

/// A provider entry's keys and their cooldowns. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct KeyPool {
    inner: Arc<Inner>,
}

impl KeyPool {
    /// A pool of `keys` for the entry named `provider`. With no keys the pool
    /// holds one empty key, and requests go without credentials (for local
    /// OpenAI-compatible servers that need none).
    pub fn new(provider: impl Into<String>, keys: Vec<ApiKey>) -> Self {
        let keys = if keys.is_empty() {
            vec![ApiKey::new("")]
        } else {
            keys
        };
        let state = PoolState {
            keys: vec![KeyState::default(); keys.len()],
            leases: 0,
        };
        Self {
            inner: Arc::new(Inner {
                provider: provider.into(),
                keys,
                state: Mutex::new(state),
            }),
        }
    }

    pub fn len(&self) -> usize {
        self.inner.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.keys.is_empty()
    }

    /// Leases the usable key with the fewest calls in flight.
    pub fn acquire(&self) -> Result<KeyLease, LlmError> {
        self.acquire_at(Instant::now())
    }

    /// [`acquire`](Self::acquire) as of `now` (tests move time by hand).
    pub fn acquire_at(&self, now: Instant) -> Result<KeyLease, LlmError> {
        let mut state = self.lock();
        let PoolState { keys, leases } = &mut *state;
        let pick = keys
            .iter()
            .enumerate()
            .filter(|(_, k)| k.cooled_until.is_none_or(|until| until <= now))
            .min_by_key(|(i, k)| (k.in_flight, k.last_leased, *i))
            .map(|(i, _)| i);
        let Some(index) = pick else {
            let retry_in = keys
                .iter()
                .filter_map(|k| k.cooled_until)
                .min()
                .map(|until| until.saturating_duration_since(now));
            return Err(LlmError::CredentialsExhausted {
                provider: self.inner.provider.clone(),
                retry_in,
            });
        };
        *leases += 1;
        let key = &mut keys[index];
        key.in_flight += 1;
        key.last_leased = *leases;
        key.cooled_until = None;
        Ok(KeyLease {
            pool: self.clone(),
            index,
        })
    }

    /// How long key `index` still cools as of `now` (`None`: usable).
    pub fn cooldown_remaining(&self, index: usize, now: Instant) -> Option<Duration> {
        let state = self.lock();
        let until = state.keys.get(index)?.cooled_until?;
        (until > now).then(|| until - now)
    }

    /// Calls in flight on key `index`.
    pub fn in_flight(&self, index: usize) -> u32 {
        self.lock().keys.get(index).map_or(0, |k| k.in_flight)
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        // A poisoned lock only means a panic elsewhere mid-update of plain
        // counters; the counters are still meaningful.
        self.inner.state.lock()
    }

    fn cool(&self, index: usize, until: Instant) {
        if let Some(k) = self.lock().keys.get_mut(index) {
            k.cooled_until = Some(k.cooled_until.map_or(until, |u| u.max(until)));
        }
    }
}

/// The right to use one key for one call; dropping it ends the call.
#[derive(Debug)]
pub struct KeyLease {
    pool: KeyPool,
    index: usize,
}

impl KeyLease {
    pub fn key(&self) -> &ApiKey {
        &self.pool.inner.keys[self.index]
    }

    /// Position of the key in the entry's `api_keys`.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The key was rate limited: cool it for `retry_after`, or an hour.
    pub fn rate_limited(&self, retry_after: Option<Duration>) {
        self.rate_limited_at(retry_after, Instant::now());
    }

    pub fn rate_limited_at(&self, retry_after: Option<Duration>, now: Instant) {
        let cool = retry_after.unwrap_or(RATE_LIMIT_COOLDOWN);
        self.pool.cool(self.index, now + cool);
        tracing::warn!(
            provider = %self.pool.inner.provider,
            key = %self.key().label(),
            cooldown_s = cool.as_secs(),
            "llm key rate limited; cooling it"
        );
    }

    /// The key was refused: cool it 300 s, doubling per consecutive refusal.
    pub fn auth_failed(&self) {
        self.auth_failed_at(Instant::now());
    }

    pub fn auth_failed_at(&self, now: Instant) {
        let cool = {
            let mut state = self.pool.lock();
            let Some(k) = state.keys.get_mut(self.index) else {
                return;
            };
            k.auth_failures = k.auth_failures.saturating_add(1);
            let doublings = (k.auth_failures - 1).min(AUTH_COOLDOWN_MAX_DOUBLINGS);
            let cool = AUTH_COOLDOWN_BASE * 2u32.pow(doublings);
            k.cooled_until = Some(now + cool);
            cool
        };
        tracing::warn!(
            provider = %self.pool.inner.provider,
            key = %self.key().label(),
            cooldown_s = cool.as_secs(),
            "llm key refused; cooling it"
        );
    }

    /// The key worked: its auth-failure streak is over.
    pub fn succeeded(&self) {
        if let Some(k) = self.pool.lock().keys.get_mut(self.index) {
            k.auth_failures = 0;
        }
    }
}

impl Drop for KeyLease {
    fn drop(&mut self) {
        if let Some(k) = self.pool.lock().keys.get_mut(self.index) {
            k.in_flight = k.in_flight.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> KeyPool {
        KeyPool::new(
            "main",
            (0..n).map(|i| ApiKey::new(format!("key-{i}"))).collect(),
        )
    }

    fn idx(p: &KeyPool, now: Instant) -> Option<usize> {
        p.acquire_at(now).ok().map(|l| l.index())
    }

    #[test]
    fn picks_the_key_with_fewest_calls_in_flight() -> Result<(), LlmError> {
        let p = pool(3);
        let now = Instant::now();
        let a = p.acquire_at(now)?;
        let b = p.acquire_at(now)?;
        let c = p.acquire_at(now)?;
        assert_eq!((a.index(), b.index(), c.index()), (0, 1, 2));
        drop(b);
        // key 1 now has nothing in flight
        let d = p.acquire_at(now)?;
        assert_eq!(d.index(), 1);
        assert_eq!(p.in_flight(1), 1);
        drop(d);
        assert_eq!(p.in_flight(1), 0);
        Ok(())
    }

    #[test]
    fn idle_keys_are_used_in_turn() {
        let p = pool(2);
        let now = Instant::now();
        assert_eq!(idx(&p, now), Some(0));
        assert_eq!(idx(&p, now), Some(1));
        assert_eq!(idx(&p, now), Some(0));
    }

    #[test]
    fn rate_limit_cools_for_retry_after_or_an_hour() -> Result<(), LlmError> {
        let p = pool(2);
        let t0 = Instant::now();
        p.acquire_at(t0)?
            .rate_limited_at(Some(Duration::from_secs(30)), t0);
        assert_eq!(p.cooldown_remaining(0, t0), Some(Duration::from_secs(30)));
        // only key 1 is usable while key 0 cools
        assert_eq!(idx(&p, t0), Some(1));
        assert_eq!(idx(&p, t0 + Duration::from_secs(29)), Some(1));
        p.acquire_at(t0)?.rate_limited_at(None, t0);
        assert_eq!(p.cooldown_remaining(1, t0), Some(RATE_LIMIT_COOLDOWN));
        // key 0 is back after its 30 s
        assert_eq!(idx(&p, t0 + Duration::from_secs(30)), Some(0));
        Ok(())
    }

    #[test]
    fn all_keys_cooling_is_credentials_exhausted() -> Result<(), LlmError> {
        let p = pool(2);
        let t0 = Instant::now();
        p.acquire_at(t0)?.rate_limited_at(None, t0);
        p.acquire_at(t0)?.auth_failed_at(t0);
        let err = p.acquire_at(t0).err();
        assert!(
            matches!(err, Some(LlmError::CredentialsExhausted { ref provider, .. }) if provider == "main"),
            "{err:?}"
        );
        // the refused key is back first (300 s, against an hour)
        assert_eq!(err.and_then(|e| e.reset_after()), Some(AUTH_COOLDOWN_BASE));
        Ok(())
    }

    #[test]
    fn auth_cooldown_doubles_six_times_then_stays() -> Result<(), LlmError> {
        let p = pool(1);
        let mut now = Instant::now();
        let mut seen = Vec::new();
        for _ in 0..9 {
            p.acquire_at(now)?.auth_failed_at(now);
            let cool = p.cooldown_remaining(0, now).unwrap_or_default();
            seen.push(cool.as_secs());
            now += cool;
        }
        assert_eq!(
            seen,
            [300, 600, 1200, 2400, 4800, 9600, 19200, 19200, 19200]
        );
        Ok(())
    }

    #[test]
    fn success_resets_the_auth_streak() -> Result<(), LlmError> {
        let p = pool(1);
        let now = Instant::now();
        p.acquire_at(now)?.auth_failed_at(now);
        let later = now + AUTH_COOLDOWN_BASE;
        p.acquire_at(later)?.succeeded();
        p.acquire_at(later)?.auth_failed_at(later);
        assert_eq!(p.cooldown_remaining(0, later), Some(AUTH_COOLDOWN_BASE));
        Ok(())
    }

    #[test]
    fn no_keys_means_one_empty_key() -> Result<(), LlmError> {
        let p = KeyPool::new("local", vec![]);
        assert_eq!(p.acquire()?.key().expose(), "");
        Ok(())
    }
}
