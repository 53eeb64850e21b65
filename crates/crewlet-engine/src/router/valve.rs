//! `notification_rate_limit`: a safety valve against webhook storms and
//! notification loops, not a way to handle bursts (that is inbox batching:
//! a merged comment is context kept, a dropped one is context lost). At most
//! N notifications per seat per second reach a seat's inbox; the rest are
//! recorded as `notification_skipped` and counted. The count is this engine
//! process's: in a fleet each router member sees its share of the traffic.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// The second a notification is counted in.
pub(crate) type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

pub(crate) struct RateValve {
    per_second: u64,
    /// Per seat: the second being counted and how many it let through.
    windows: Mutex<HashMap<String, (u64, u64)>>,
    dropped: AtomicU64,
    clock: Clock,
}

impl RateValve {
    /// `None` when the limit is unset or 0 (no valve).
    pub(crate) fn new(per_second: Option<u64>) -> Option<Self> {
        let per_second = per_second.filter(|n| *n > 0)?;
        Some(Self {
            per_second,
            windows: Mutex::new(HashMap::new()),
            dropped: AtomicU64::new(0),
            clock: Arc::new(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
            }),
        })
    }

    #[cfg(test)]
    pub(crate) fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Lets one notification for `handle` through, or refuses it with the
    /// reason to record (and counts it).
    pub(crate) fn admit(&self, handle: &str) -> Result<(), String> {
        let now = (self.clock)();
        {
            let mut windows = self.windows.lock();
            let w = windows.entry(handle.to_owned()).or_insert((now, 0));
            if w.0 != now {
                *w = (now, 0);
            }
            if w.1 < self.per_second {
                w.1 += 1;
                return Ok(());
            }
        }
        let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        Err(format!(
            "rate limited: `{handle}` already got {} notifications this second (notification_rate_limit); {dropped} dropped by this engine so far",
            self.per_second
        ))
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn at_most_n_per_seat_per_second_and_every_drop_counted() {
        let now = Arc::new(AtomicU64::new(100));
        let clock_now = now.clone();
        let valve = RateValve::new(Some(2))
            .unwrap_or_else(|| panic!("a limit of 2 is a valve"))
            .with_clock(Arc::new(move || clock_now.load(Ordering::Relaxed)));
        assert!(valve.admit("eng").is_ok());
        assert!(valve.admit("eng").is_ok());
        let refused = valve.admit("eng").expect_err("the third in one second");
        assert!(
            refused.contains("rate limited") && refused.contains("1 dropped"),
            "{refused}"
        );
        assert!(valve.admit("ops").is_ok(), "seats are counted apart");
        assert!(valve.admit("eng").is_err());
        assert_eq!(valve.dropped(), 2);
        now.store(101, Ordering::Relaxed);
        assert!(valve.admit("eng").is_ok(), "a new second");
    }

    #[test]
    fn zero_or_unset_is_no_valve() {
        assert!(RateValve::new(None).is_none());
        assert!(RateValve::new(Some(0)).is_none());
    }
}
