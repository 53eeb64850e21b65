//! Riding out a broker that is not ready yet.
//!
//! A broker that was just started or restarted refuses connections for a
//! while, then answers lookups and subscribes with `ServiceNotReady` or
//! metadata and persistence errors until it has loaded the topic and its
//! bookie is writable. That is normal in production (a rolling restart, a
//! compose file that starts everything at once), so connecting, subscribing
//! and the first producer of a topic retry such failures with backoff for
//! [`PulsarOptions::startup_retry`](super::PulsarOptions::startup_retry),
//! logging each retry. A failure that waiting cannot mend (refused
//! credentials, an invalid topic, a TLS misconfiguration) is reported at once.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use pulsar::error::{
    AuthenticationError, ConnectionError, ConsumerError, ProducerError, ServiceDiscoveryError,
};
use pulsar::message::proto::ServerError;

use super::bounded;
use crate::BoxError;

/// First wait between two attempts; it doubles up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(250);
const MAX_WAIT: Duration = Duration::from_secs(5);

/// Why one attempt failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No answer within the operation timeout (always worth another try).
    Timeout(String),
    /// The client's or the broker's own error.
    Pulsar(pulsar::Error),
}

impl Failure {
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Failure::Timeout(_) => true,
            Failure::Pulsar(e) => is_transient(e),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Timeout(what) => f.write_str(what),
            Failure::Pulsar(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Failure::Pulsar(e) => Some(e),
            Failure::Timeout(_) => None,
        }
    }
}

impl From<pulsar::Error> for Failure {
    fn from(e: pulsar::Error) -> Self {
        Failure::Pulsar(e)
    }
}

/// The final failure; a transient one also says how long it was retried.
#[derive(Debug)]
struct GaveUp {
    last: Failure,
    attempts: u32,
    waited: Duration,
}

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.last.is_transient() {
            // Final at once: waiting longer would not have helped.
            return write!(f, "{}", self.last);
        }
        let plural = if self.attempts == 1 { "" } else { "s" };
        write!(
            f,
            "{} (still failing after {} attempt{plural} over {:.1} s; \
             providers.queue.startup_retry_seconds bounds the wait)",
            self.last,
            self.attempts,
            self.waited.as_secs_f64()
        )
    }
}

impl std::error::Error for GaveUp {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.last)
    }
}

/// One attempt of `operation`, in its own task and bounded by `limit` (see
/// [`bounded`]); running out of time is a [`Failure::Timeout`] saying
/// `timed_out()`.
///
/// The operation is boxed at once: the client's builder futures are large,
/// and carrying one inline through each layer of callers' futures overflows
/// a 2 MiB thread stack in debug builds.
pub(crate) fn attempt<T: Send + 'static>(
    limit: Duration,
    timed_out: impl FnOnce() -> String,
    operation: impl Future<Output = Result<T, pulsar::Error>> + Send + 'static,
) -> impl Future<Output = Result<T, Failure>> {
    let operation = Box::pin(operation);
    async move {
        match bounded(limit, operation).await {
            Some(done) => done.map_err(Failure::from),
            None => Err(Failure::Timeout(timed_out())),
        }
    }
}

/// Runs `attempt` until it succeeds, fails in a way waiting cannot mend, or
/// `window` has passed; `what` names the operation in the retry log lines.
pub(crate) async fn until_ready<T, F, Fut>(
    window: Duration,
    what: &str,
    mut attempt: F,
) -> Result<T, BoxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let started = tokio::time::Instant::now();
    let deadline = started + window;
    let mut wait = FIRST_WAIT;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let failure = match attempt().await {
            Ok(v) => {
                if attempts > 1 {
                    tracing::info!(
                        operation = what,
                        attempts,
                        "pulsar broker ready after {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                }
                return Ok(v);
            }
            Err(f) => f,
        };
        let now = tokio::time::Instant::now();
        if !failure.is_transient() || now + wait > deadline {
            return Err(Box::new(GaveUp {
                last: failure,
                attempts,
                waited: now - started,
            }));
        }
        tracing::warn!(
            operation = what,
            attempt = attempts,
            error = %failure,
            "pulsar broker not ready; retrying in {wait:?}"
        );
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(MAX_WAIT);
    }
}

/// Whether waiting can mend `e`: the broker unreachable, still starting,
/// still loading the topic or busy. Refused credentials, invalid names,
/// TLS and configuration errors are final.
pub(crate) fn is_transient(e: &pulsar::Error) -> bool {
    match e {
        pulsar::Error::Connection(c) => connection_transient(c),
        pulsar::Error::ServiceDiscovery(d) => discovery_transient(d),
        pulsar::Error::Consumer(c) => match c {
            ConsumerError::Connection(c) => connection_transient(c),
            ConsumerError::Io(e) => io_transient(e),
            _ => false,
        },
        pulsar::Error::Producer(p) => match p {
            ProducerError::Connection(c) => connection_transient(c),
            ProducerError::Io(e) => io_transient(e),
            _ => false,
        },
        pulsar::Error::Authentication(a) => matches!(a, AuthenticationError::Retriable(_)),
        // The client's own strings: a producer or consumer that disconnected
        // while being built, and the like.
        pulsar::Error::Custom(_) => true,
        _ => false,
    }
}

fn connection_transient(e: &ConnectionError) -> bool {
    match e {
        ConnectionError::Io(e) => io_transient(e),
        ConnectionError::SlowDown
        | ConnectionError::Disconnected
        | ConnectionError::Canceled
        | ConnectionError::NotFound => true,
        ConnectionError::PulsarError(code, _) => server_transient(*code),
        ConnectionError::Authentication(a) => matches!(a, AuthenticationError::Retriable(_)),
        _ => false,
    }
}

/// A socket that could not connect or was cut. Not a TLS failure: rustls
/// reports a certificate it does not trust as `InvalidData`, which no wait mends.
fn io_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused
            | ConnectionReset
            | ConnectionAborted
            | NotConnected
            | AddrNotAvailable
            | BrokenPipe
            | TimedOut
            | UnexpectedEof
            | Interrupted
            | WouldBlock
            | HostUnreachable
            | NetworkUnreachable
            | NetworkDown
    )
}

fn discovery_transient(e: &ServiceDiscoveryError) -> bool {
    match e {
        ServiceDiscoveryError::Connection(c) => connection_transient(c),
        ServiceDiscoveryError::Query(code, _) => server_transient(*code),
        ServiceDiscoveryError::DnsLookupError | ServiceDiscoveryError::Canceled => true,
        _ => false,
    }
}

/// The broker's error codes that mean "not now" rather than "never".
fn server_transient(code: Option<ServerError>) -> bool {
    match code {
        None => true,
        Some(code) => matches!(
            code,
            ServerError::UnknownError
                | ServerError::MetadataError
                | ServerError::PersistenceError
                | ServerError::ServiceNotReady
                | ServerError::TooManyRequests
                | ServerError::ConsumerBusy
                | ServerError::ProducerBusy
                | ServerError::ConsumerAssignError
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn server(code: ServerError) -> pulsar::Error {
        pulsar::Error::ServiceDiscovery(ServiceDiscoveryError::Query(Some(code), None))
    }

    #[test]
    fn a_starting_broker_is_transient_and_refusals_are_final() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let transient = [
            pulsar::Error::Connection(ConnectionError::Io(refused)),
            pulsar::Error::Connection(ConnectionError::Disconnected),
            server(ServerError::ServiceNotReady),
            server(ServerError::MetadataError),
            server(ServerError::PersistenceError),
            server(ServerError::TooManyRequests),
            pulsar::Error::Consumer(ConsumerError::Connection(ConnectionError::PulsarError(
                Some(ServerError::ServiceNotReady),
                Some("topic is being loaded".into()),
            ))),
            pulsar::Error::ServiceDiscovery(ServiceDiscoveryError::DnsLookupError),
        ];
        for e in &transient {
            assert!(is_transient(e), "{e:?} should be retried");
        }
        let permanent = [
            server(ServerError::AuthenticationError),
            server(ServerError::AuthorizationError),
            server(ServerError::InvalidTopicName),
            server(ServerError::TopicNotFound),
            pulsar::Error::Connection(ConnectionError::Authentication(
                AuthenticationError::Custom("bad token".into()),
            )),
            pulsar::Error::Connection(ConnectionError::SocketAddr("nowhere".into())),
            pulsar::Error::Connection(ConnectionError::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "invalid peer certificate: UnknownIssuer",
            ))),
            pulsar::Error::Consumer(ConsumerError::BuildError),
        ];
        for e in &permanent {
            assert!(!is_transient(e), "{e:?} should fail at once");
        }
        assert!(Failure::Timeout("no answer".into()).is_transient());
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_until_the_broker_answers() {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let got = until_ready(Duration::from_secs(60), "subscribe", move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 4 {
                    Err(Failure::Pulsar(server(ServerError::ServiceNotReady)))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(got.ok(), Some(4));
        assert_eq!(calls.load(Ordering::SeqCst), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_failure_is_not_retried() {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let got: Result<(), _> = until_ready(Duration::from_secs(60), "subscribe", move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err(Failure::Pulsar(server(ServerError::AuthorizationError))) }
        })
        .await;
        let msg = got.err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(!msg.contains("attempts"), "{msg}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_window_bounds_the_retries_and_the_error_says_so() {
        let started = tokio::time::Instant::now();
        let got: Result<(), _> = until_ready(Duration::from_secs(20), "subscribe", || async {
            Err(Failure::Timeout("timed out subscribing".into()))
        })
        .await;
        let waited = started.elapsed();
        let msg = got.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(waited <= Duration::from_secs(20), "{waited:?}");
        assert!(waited >= Duration::from_secs(15), "{waited:?}");
        assert!(
            msg.starts_with("timed out subscribing (still failing after"),
            "{msg}"
        );
        assert!(msg.contains("startup_retry_seconds"), "{msg}");
    }
}
