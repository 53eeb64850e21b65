//! Holding work while the database is unavailable: retry an operation whose
//! error is transient ([`StoreError::is_transient`]) with a growing delay,
//! until it goes through, the caller stops, or a bound passes. Errors that
//! say the request itself is wrong are returned at once.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::error::StoreError;

/// How long and how often to retry while the database is unavailable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patience {
    /// Wait before the first retry; doubled after each failure.
    pub first_delay: Duration,
    /// Longest wait between two attempts (also how soon a stop is noticed).
    pub max_delay: Duration,
    /// Give up (return the last error) once this long has passed; `None`
    /// holds until the operation goes through or the caller stops.
    pub give_up_after: Option<Duration>,
}

impl Patience {
    /// Holds until the database is back or the caller stops.
    pub const UNTIL_BACK: Patience = Patience {
        first_delay: Duration::from_millis(200),
        max_delay: Duration::from_secs(2),
        give_up_after: None,
    };

    /// Holds for at most `limit`.
    pub fn at_most(limit: Duration) -> Self {
        Self {
            give_up_after: Some(limit),
            ..Self::UNTIL_BACK
        }
    }
}

/// Runs `op` until it succeeds or fails with an error that is not
/// transient; a transient failure is retried per `patience` unless
/// `stopping()` says the caller is shutting down. The first hold logs a
/// warning naming `what`, the recovery one info line.
pub async fn retry_transient<T, F, Fut>(
    what: &str,
    patience: Patience,
    stopping: &(dyn Fn() -> bool + Send + Sync),
    mut op: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let started = Instant::now();
    let mut delay = patience.first_delay;
    let mut failures = 0u32;
    loop {
        let error = match op().await {
            Ok(v) => {
                if failures > 0 {
                    info!(
                        what,
                        attempts = failures + 1,
                        held_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                        "database back; held work went through"
                    );
                }
                return Ok(v);
            }
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => e,
        };
        failures += 1;
        if failures == 1 {
            warn!(what, error = %error, "database unavailable; holding the work and retrying");
        }
        let out_of_time = patience
            .give_up_after
            .is_some_and(|limit| started.elapsed() + delay > limit);
        if out_of_time || stopping() {
            return Err(error);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(patience.max_delay);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::error::DbTarget;

    fn down() -> StoreError {
        StoreError::Unreachable {
            target: DbTarget {
                host: "h".into(),
                port: 1,
                database: "d".into(),
                user: "u".into(),
            },
            reason: "refused".into(),
        }
    }

    const QUICK: Patience = Patience {
        first_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(4),
        give_up_after: None,
    };

    #[tokio::test]
    async fn transient_failures_are_retried_until_the_operation_goes_through() {
        let calls = AtomicU32::new(0);
        let r = retry_transient("t", QUICK, &|| false, || async {
            if calls.fetch_add(1, Ordering::SeqCst) < 3 {
                Err(down())
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!(r.ok(), Some(7));
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_request_error_is_returned_without_retrying() {
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = retry_transient("t", QUICK, &|| false, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(StoreError::invalid("x", "bad"))
        })
        .await;
        assert!(matches!(r, Err(StoreError::InvalidInput { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn stopping_or_running_out_of_patience_returns_the_last_error() {
        let calls = AtomicU32::new(0);
        let r: Result<(), _> = retry_transient("t", QUICK, &|| true, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(down())
        })
        .await;
        assert!(r.is_err_and(|e| e.is_transient()));
        assert_eq!(calls.load(Ordering::SeqCst), 1);

        let limited = Patience {
            give_up_after: Some(Duration::from_millis(20)),
            ..QUICK
        };
        let r: Result<(), _> =
            retry_transient("t", limited, &|| false, || async { Err(down()) }).await;
        assert!(r.is_err_and(|e| e.is_transient()));
    }
}
