//! The circuit breaker of one provider entry (per process).
//!
//! Closed, calls go through. After [`BreakerSettings::failures`] failed
//! calls in a row (server errors and timeouts, each after the provider's own
//! retries) it opens: calls fail at once with
//! [`LlmError::CircuitOpen`](crate::LlmError::CircuitOpen), so each seat's
//! fallback chain takes over without waiting on a provider that is down.
//! After the cool-down one trial call goes through (half-open): success
//! closes the breaker, failure opens it again for twice the cool-down, up to
//! [`BreakerSettings::max_cool_down`]. Rate limits, refused keys and bad
//! requests say nothing about whether the provider is up, and leave the
//! breaker as it is.

use parking_lot::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// When a breaker opens and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Failed calls in a row that open the breaker.
    pub failures: u32,
    /// How long it stays open the first time.
    pub cool_down: Duration,
    /// The longest cool-down after failed trial calls.
    pub max_cool_down: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            failures: 5,
            cool_down: Duration::from_secs(30),
            max_cool_down: Duration::from_secs(300),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Closed {
        failures: u32,
    },
    Open {
        since: Instant,
        until: Instant,
        cool_down: Duration,
    },
    /// Past the cool-down: `trial` is when the trial call went, if it is
    /// out. A trial out for longer than the cool-down is taken as lost (its
    /// caller gave up) and another may go.
    HalfOpen {
        since: Instant,
        cool_down: Duration,
        trial: Option<Instant>,
    },
}

/// A change worth telling the operator about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    Opened { failures: u32, cool_down: Duration },
    Closed { open_for: Duration },
}

/// The right to make one call; `trial` when it is the half-open trial.
#[derive(Debug)]
pub(crate) struct Permit {
    trial: bool,
}

/// One provider's breaker.
#[derive(Debug)]
pub(crate) struct Breaker {
    settings: BreakerSettings,
    mode: Mutex<Mode>,
}

impl Breaker {
    pub fn new(settings: BreakerSettings) -> Self {
        Self {
            settings: BreakerSettings {
                failures: settings.failures.max(1),
                ..settings
            },
            mode: Mutex::new(Mode::Closed { failures: 0 }),
        }
    }

    /// May a call go now? `Err` carries how long until a trial call may.
    pub fn admit(&self, now: Instant) -> Result<Permit, Duration> {
        let mut mode = self.mode.lock();
        match *mode {
            Mode::Closed { .. } => Ok(Permit { trial: false }),
            Mode::Open {
                since,
                until,
                cool_down,
            } => {
                if now < until {
                    return Err(until - now);
                }
                *mode = Mode::HalfOpen {
                    since,
                    cool_down,
                    trial: Some(now),
                };
                Ok(Permit { trial: true })
            }
            Mode::HalfOpen {
                since,
                cool_down,
                trial,
            } => {
                if let Some(sent) = trial
                    && now.saturating_duration_since(sent) < cool_down
                {
                    // The trial is out: the others wait for its answer.
                    return Err(Duration::from_secs(1));
                }
                *mode = Mode::HalfOpen {
                    since,
                    cool_down,
                    trial: Some(now),
                };
                Ok(Permit { trial: true })
            }
        }
    }

    /// The call worked.
    pub fn succeeded(&self, permit: Permit, now: Instant) -> Option<Transition> {
        let mut mode = self.mode.lock();
        let was = *mode;
        match was {
            Mode::Closed { .. } => {
                *mode = Mode::Closed { failures: 0 };
                None
            }
            // A call admitted before the breaker opened proves nothing
            // about now; only the trial decides.
            Mode::Open { .. } | Mode::HalfOpen { .. } if !permit.trial => None,
            Mode::Open { since, .. } | Mode::HalfOpen { since, .. } => {
                *mode = Mode::Closed { failures: 0 };
                Some(Transition::Closed {
                    open_for: now.saturating_duration_since(since),
                })
            }
        }
    }

    /// The call failed in a way that says the provider is in trouble.
    pub fn failed(&self, permit: Permit, now: Instant) -> Option<Transition> {
        let mut mode = self.mode.lock();
        match *mode {
            Mode::Closed { failures } => {
                let failures = failures + 1;
                if failures < self.settings.failures {
                    *mode = Mode::Closed { failures };
                    return None;
                }
                let cool_down = self.settings.cool_down;
                *mode = Mode::Open {
                    since: now,
                    until: now + cool_down,
                    cool_down,
                };
                Some(Transition::Opened {
                    failures,
                    cool_down,
                })
            }
            Mode::HalfOpen {
                since, cool_down, ..
            } if permit.trial => {
                let cool_down = (cool_down * 2).min(self.settings.max_cool_down);
                *mode = Mode::Open {
                    since,
                    until: now + cool_down,
                    cool_down,
                };
                Some(Transition::Opened {
                    failures: 1,
                    cool_down,
                })
            }
            Mode::Open { .. } | Mode::HalfOpen { .. } => None,
        }
    }

    /// The call ended without saying anything about the provider (a rate
    /// limit, a bad request, the caller gave up): a trial may go again.
    pub fn released(&self, permit: Permit) {
        if !permit.trial {
            return;
        }
        let mut mode = self.mode.lock();
        if let Mode::HalfOpen {
            since, cool_down, ..
        } = *mode
        {
            *mode = Mode::HalfOpen {
                since,
                cool_down,
                trial: None,
            };
        }
    }

    /// Whether calls are being refused now (open, or half-open with the
    /// trial out).
    pub fn is_open(&self, now: Instant) -> bool {
        match *self.mode.lock() {
            Mode::Closed { .. } => false,
            Mode::Open { until, .. } => now < until,
            Mode::HalfOpen {
                trial, cool_down, ..
            } => trial.is_some_and(|sent| now.saturating_duration_since(sent) < cool_down),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker() -> Breaker {
        Breaker::new(BreakerSettings {
            failures: 3,
            cool_down: Duration::from_secs(30),
            max_cool_down: Duration::from_secs(100),
        })
    }

    fn fail(b: &Breaker, now: Instant) -> Option<Transition> {
        match b.admit(now) {
            Ok(p) => b.failed(p, now),
            Err(wait) => panic!("refused for {wait:?}"),
        }
    }

    #[test]
    fn opens_after_failures_in_a_row_and_a_success_resets_the_count() {
        let b = breaker();
        let t0 = Instant::now();
        assert_eq!(fail(&b, t0), None);
        assert_eq!(fail(&b, t0), None);
        let ok = b.admit(t0).map(|p| b.succeeded(p, t0));
        assert_eq!(ok, Ok(None));
        assert_eq!(fail(&b, t0), None);
        assert_eq!(fail(&b, t0), None);
        assert_eq!(
            fail(&b, t0),
            Some(Transition::Opened {
                failures: 3,
                cool_down: Duration::from_secs(30)
            })
        );
        assert!(b.is_open(t0));
        assert_eq!(
            b.admit(t0 + Duration::from_secs(10)).err(),
            Some(Duration::from_secs(20))
        );
    }

    #[test]
    fn after_the_cool_down_one_trial_decides() {
        let b = breaker();
        let t0 = Instant::now();
        for _ in 0..3 {
            fail(&b, t0);
        }
        let t1 = t0 + Duration::from_secs(30);
        let trial = b.admit(t1).ok();
        assert!(trial.is_some());
        // only one trial at a time
        assert!(b.admit(t1).is_err());
        let closed = trial.map(|p| b.succeeded(p, t1 + Duration::from_secs(2)));
        assert_eq!(
            closed,
            Some(Some(Transition::Closed {
                open_for: Duration::from_secs(32)
            }))
        );
        assert!(!b.is_open(t1));
        assert!(b.admit(t1).is_ok());
    }

    #[test]
    fn a_failed_trial_doubles_the_cool_down_up_to_the_cap() {
        let b = breaker();
        let mut now = Instant::now();
        for _ in 0..3 {
            fail(&b, now);
        }
        let mut seen = Vec::new();
        for _ in 0..4 {
            now += Duration::from_secs(1000);
            match fail(&b, now) {
                Some(Transition::Opened { cool_down, .. }) => seen.push(cool_down.as_secs()),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, [60, 100, 100, 100]);
    }

    #[test]
    fn late_answers_of_calls_admitted_before_the_opening_change_nothing() {
        let b = breaker();
        let t0 = Instant::now();
        let early: Vec<Permit> = (0..2).filter_map(|_| b.admit(t0).ok()).collect();
        for _ in 0..3 {
            fail(&b, t0);
        }
        let mut early = early.into_iter();
        if let Some(p) = early.next() {
            assert_eq!(b.succeeded(p, t0), None);
        }
        if let Some(p) = early.next() {
            assert_eq!(b.failed(p, t0), None);
        }
        assert!(b.is_open(t0 + Duration::from_secs(29)));
    }

    #[test]
    fn a_trial_that_says_nothing_lets_the_next_call_try() {
        let b = breaker();
        let t0 = Instant::now();
        for _ in 0..3 {
            fail(&b, t0);
        }
        let t1 = t0 + Duration::from_secs(31);
        if let Ok(p) = b.admit(t1) {
            b.released(p);
        }
        assert!(b.admit(t1).is_ok(), "a new trial may go");
        // a trial whose caller vanished is given up after a cool-down
        assert!(b.admit(t1 + Duration::from_secs(29)).is_err());
        assert!(b.admit(t1 + Duration::from_secs(30)).is_ok());
    }
}
