//! Connecting to the broker: the client (waiting for a broker that is still
//! starting) and the check that the tenant and namespace exist.

use std::time::Duration;

use pulsar::proto::command_get_topics_of_namespace::Mode;
use pulsar::{
    Authentication, ConnectionRetryOptions, OperationRetryOptions, Pulsar, PulsarBuilder,
    TokioExecutor,
};

use super::retry::{self, Failure};
use super::{Client, PulsarOptions};
use crate::{BoxError, QueueError};

/// A client connected to `options.url`. Bad settings fail at once; a broker
/// that refuses connections or is not ready is retried for the startup window.
pub(super) async fn client(options: &PulsarOptions) -> Result<Client, QueueError> {
    for (what, value) in [
        ("tenant", &options.tenant),
        ("namespace", &options.namespace),
    ] {
        if value.is_empty() || value.contains('/') {
            return Err(QueueError::Config(format!(
                "pulsar {what} `{value}` must be a non-empty name without `/`"
            )));
        }
    }
    let url = options.url.clone();
    let is_tls = url.starts_with("pulsar+ssl://");
    if !is_tls && !url.starts_with("pulsar://") {
        return Err(QueueError::Config(format!(
            "pulsar url `{url}` must start with pulsar:// or pulsar+ssl://"
        )));
    }
    let trust = match &options.tls_trust_certs_path {
        None => None,
        Some(path) => {
            if !is_tls {
                tracing::warn!(%url, "tls_trust_certs_path is set but the url is not pulsar+ssl://; it is ignored");
            }
            Some(std::fs::read(path).map_err(|e| {
                QueueError::Config(format!(
                    "cannot read pulsar tls_trust_certs_path `{}`: {e}",
                    path.display()
                ))
            })?)
        }
    };
    if is_tls && rustls::crypto::CryptoProvider::get_default().is_none() {
        // rustls cannot choose when the build has both ring and aws-lc-rs
        // (another crate's TLS stack): settle it before the client builds its config.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
    let limit = options.operation_timeout * 3;
    retry::until_ready(options.startup_retry, "connect", || {
        let connect = builder(options, trust.clone()).build();
        async move {
            match tokio::time::timeout(limit, connect).await {
                Ok(built) => built.map_err(Failure::from),
                Err(_) => Err(Failure::Timeout("timed out connecting".into())),
            }
        }
    })
    .await
    .map_err(|source| QueueError::Connect { url, source })
}

fn builder(options: &PulsarOptions, trust: Option<Vec<u8>>) -> PulsarBuilder<TokioExecutor> {
    let mut builder = Pulsar::builder(options.url.clone(), TokioExecutor)
        .with_connection_retry_options(ConnectionRetryOptions {
            min_backoff: Duration::from_millis(100),
            max_backoff: options.reconnect_max_backoff,
            max_retries: 6,
            connection_timeout: options.operation_timeout,
            keep_alive: Duration::from_secs(30),
            ..ConnectionRetryOptions::default()
        })
        .with_operation_retry_options(OperationRetryOptions {
            operation_timeout: options.operation_timeout,
            retry_delay: Duration::from_millis(500),
            max_retries: Some(3),
        })
        .with_outbound_channel_size(10_000);
    if let Some(token) = &options.auth_token {
        builder = builder.with_auth(Authentication {
            name: "token".into(),
            data: token.clone().into_bytes(),
        });
    }
    if let Some(pem) = trust {
        builder = builder.with_certificate_chain(pem);
    }
    builder
}

/// Fails with the broker's own error when the namespace is missing or not
/// ours; waits (within the startup window) while the broker is not ready.
pub(super) async fn check_namespace(
    client: &Client,
    options: &PulsarOptions,
) -> Result<(), QueueError> {
    let missing = |source: BoxError| QueueError::NamespaceNotFound {
        url: options.url.clone(),
        tenant: options.tenant.clone(),
        namespace: options.namespace.clone(),
        source,
    };
    let limit = options.operation_timeout;
    let ns = format!("{}/{}", options.tenant, options.namespace);
    retry::until_ready(options.startup_retry, "list the namespace", || {
        let (c, ns) = (client.clone(), ns.clone());
        let listed = retry::attempt(
            limit,
            || "timed out listing the namespace".into(),
            async move { c.get_topics_of_namespace(ns, Mode::Persistent).await },
        );
        async move { listed.await.map(drop) }
    })
    .await
    .map_err(missing)?;
    // Listing an absent namespace may answer an empty list; a lookup does not.
    let probe = options.full_topic("crewlet.startup-probe");
    retry::until_ready(options.startup_retry, "look up a topic", || {
        let (c, probe) = (client.clone(), probe.clone());
        let found = retry::attempt(
            limit,
            || "timed out looking up a topic of the namespace".into(),
            async move { c.lookup_topic(probe).await },
        );
        async move { found.await.map(drop) }
    })
    .await
    .map_err(missing)
}
