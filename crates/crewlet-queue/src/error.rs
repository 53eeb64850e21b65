use std::fmt;

/// A backend's own error, boxed so that this enum does not expose backend types.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything the queue can fail with. Each variant names the topic (or the
/// broker, tenant and namespace) it failed on, and where there is one, the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    #[error("invalid topic `{topic}`: {reason}")]
    InvalidTopic { topic: String, reason: &'static str },

    #[error("invalid consumer group `{group}` for topic `{topic}`: {reason}")]
    InvalidGroup {
        topic: String,
        group: String,
        reason: &'static str,
    },

    #[error("invalid stream pattern `{pattern}`: {reason}")]
    InvalidPattern {
        pattern: String,
        reason: &'static str,
    },

    #[error("publish to `{topic}` failed after {attempts} attempt(s): {source}")]
    Publish {
        topic: String,
        attempts: u32,
        #[source]
        source: BoxError,
    },

    #[error("subscribe to `{topic}` as group `{group}` failed: {source}")]
    Subscribe {
        topic: String,
        group: String,
        #[source]
        source: BoxError,
    },

    #[error("stream `{pattern}` failed: {source}")]
    Stream {
        pattern: String,
        #[source]
        source: BoxError,
    },

    #[error(
        "pulsar tenant/namespace `{tenant}/{namespace}` is not usable on {url}: {source}; \
         an operator must create it (`pulsar-admin tenants create {tenant}` and \
         `pulsar-admin namespaces create {tenant}/{namespace}`): the engine never calls the admin API"
    )]
    NamespaceNotFound {
        url: String,
        tenant: String,
        namespace: String,
        #[source]
        source: BoxError,
    },

    #[error("cannot connect to the queue broker at {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: BoxError,
    },

    #[error("queue configuration: {0}")]
    Config(String),

    #[error("the queue is shut down; cannot {operation} `{topic}`")]
    ShutDown {
        operation: &'static str,
        topic: String,
    },
}

impl QueueError {
    /// Whether retrying the same call later may succeed (broker down, timeouts).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            QueueError::Publish { .. } | QueueError::Connect { .. }
        )
    }
}

/// Why a handler or a publish listener failed. A handler's `Err` means "negative
/// ack": the message is redelivered after the delay and dead-lettered after the
/// cap. Any error type converts with `?`; plain strings with `.into()`.
pub struct HandlerError(BoxError);

impl HandlerError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into().into())
    }

    pub fn into_inner(self) -> BoxError {
        self.0
    }
}

impl<E: Into<BoxError>> From<E> for HandlerError {
    fn from(e: E) -> Self {
        Self(e.into())
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}
