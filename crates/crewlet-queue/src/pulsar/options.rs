use std::path::PathBuf;
use std::time::Duration;

use crate::DeliveryOptions;

/// How [`PulsarQueue`](super::PulsarQueue) connects and behaves. The engine
/// maps the Tier A `providers.queue` section onto this.
#[derive(Clone)]
pub struct PulsarOptions {
    /// `pulsar://host:6650`, or `pulsar+ssl://host:6651` for TLS.
    pub url: String,
    /// Topics live in `persistent://{tenant}/{namespace}/`; both must exist
    /// (the engine never creates them).
    pub tenant: String,
    pub namespace: String,
    /// A JWT sent in the CONNECT frame (Pulsar token authentication).
    pub auth_token: Option<String>,
    /// PEM file of the CA(s) that sign the broker's TLS certificate
    /// (`pulsar+ssl://` only; the public web PKI roots are used otherwise).
    pub tls_trust_certs_path: Option<PathBuf>,
    /// Redelivery delay and cap, prefetch, shutdown and stream buffering.
    pub delivery: DeliveryOptions,
    /// Waits between publish attempts: 0.5, 1, 2, 4 s (5 attempts). A publish
    /// that fails them all reports an error naming the topic.
    pub publish_backoff: Vec<Duration>,
    /// Time limit of one broker operation (a send receipt, a subscribe, a lookup).
    pub operation_timeout: Duration,
    /// How long connecting, subscribing and the first producer of a topic
    /// keep retrying a broker that is unreachable, still starting or still
    /// loading the topic (backoff from 250 ms to 5 s, each retry logged)
    /// before they fail. Tier A `providers.queue.startup_retry_seconds`.
    pub startup_retry: Duration,
    /// Longest wait between two attempts of the supervisor that re-creates
    /// consumers after a broker restart (it starts at 100 ms and doubles).
    pub reconnect_max_backoff: Duration,
    /// How often stream subscribers look for new topics matching their pattern.
    pub stream_refresh: Duration,
    /// Name of this node in the broker's stats (consumers are `{name}-{group}-{n}`).
    pub client_name: String,
}

impl PulsarOptions {
    /// Defaults for a broker at `url`, in `public/default`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            tenant: "public".into(),
            namespace: "default".into(),
            auth_token: None,
            tls_trust_certs_path: None,
            delivery: DeliveryOptions::default(),
            publish_backoff: [500, 1000, 2000, 4000].map(Duration::from_millis).to_vec(),
            operation_timeout: Duration::from_secs(10),
            startup_retry: Duration::from_secs(60),
            reconnect_max_backoff: Duration::from_secs(5),
            stream_refresh: Duration::from_secs(5),
            client_name: "crewlet".into(),
        }
    }

    pub fn with_namespace(
        mut self,
        tenant: impl Into<String>,
        namespace: impl Into<String>,
    ) -> Self {
        self.tenant = tenant.into();
        self.namespace = namespace.into();
        self
    }

    pub fn with_auth_token(mut self, token: impl Into<String>) -> Self {
        self.auth_token = Some(token.into());
        self
    }

    pub fn with_delivery(mut self, delivery: DeliveryOptions) -> Self {
        self.delivery = delivery;
        self
    }

    /// `persistent://{tenant}/{namespace}/{subject}`.
    pub fn full_topic(&self, subject: &str) -> String {
        format!("persistent://{}/{}/{subject}", self.tenant, self.namespace)
    }

    /// The subject of a full topic name of this namespace.
    pub(crate) fn subject_of<'a>(&self, full: &'a str) -> Option<&'a str> {
        full.strip_prefix("persistent://")?
            .strip_prefix(self.tenant.as_str())?
            .strip_prefix('/')?
            .strip_prefix(self.namespace.as_str())?
            .strip_prefix('/')
    }
}

impl std::fmt::Debug for PulsarOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PulsarOptions")
            .field("url", &self.url)
            .field("tenant", &self.tenant)
            .field("namespace", &self.namespace)
            .field(
                "auth_token",
                &self.auth_token.as_ref().map(|_| "<redacted>"),
            )
            .field("tls_trust_certs_path", &self.tls_trust_certs_path)
            .field("delivery", &self.delivery)
            .field("publish_backoff", &self.publish_backoff)
            .field("operation_timeout", &self.operation_timeout)
            .field("startup_retry", &self.startup_retry)
            .field("reconnect_max_backoff", &self.reconnect_max_backoff)
            .field("stream_refresh", &self.stream_refresh)
            .field("client_name", &self.client_name)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_are_prefixed_with_tenant_and_namespace() {
        let o = PulsarOptions::new("pulsar://x:6650").with_namespace("crewlet", "prod");
        let full = o.full_topic("crewlet.agent.eng.inbox");
        assert_eq!(full, "persistent://crewlet/prod/crewlet.agent.eng.inbox");
        assert_eq!(o.subject_of(&full), Some("crewlet.agent.eng.inbox"));
        assert_eq!(o.subject_of("persistent://public/default/x"), None);
    }

    #[test]
    fn defaults_follow_the_spec() {
        let o = PulsarOptions::new("pulsar://x:6650");
        assert_eq!(
            (o.tenant.as_str(), o.namespace.as_str()),
            ("public", "default")
        );
        assert_eq!(o.publish_backoff.len() + 1, 5, "five attempts");
        assert_eq!(o.delivery.max_redeliveries, 10);
        assert_eq!(o.delivery.prefetch, 64);
        assert_eq!(o.startup_retry, Duration::from_secs(60));
        assert!(!format!("{:?}", o.with_auth_token("secret")).contains("secret"));
    }
}
