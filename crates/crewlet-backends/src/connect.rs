//! Connecting what the Tier A bootstrap names, once for every process:
//! Pulsar or the in-process broker, PostgreSQL (migrated first) or memory
//! stores.

use std::sync::Arc;

use crewlet_config::{Bootstrap, QueueConfig, QueueKind};
use crewlet_queue::{EventQueue, MemoryQueue};
use crewlet_store::{MigrationOptions, Stores};
use tracing::info;

use crate::BackendError;

/// The queue node the bootstrap names: Pulsar when `providers.queue` is a
/// pulsar queue, else the in-process broker. `client_name` names this
/// process to the broker.
pub async fn connect_queue(
    bootstrap: &Bootstrap,
    client_name: &str,
) -> Result<Arc<dyn EventQueue>, BackendError> {
    match &bootstrap.providers.queue {
        Some(q) if q.kind == QueueKind::Pulsar => connect_pulsar(q, client_name).await,
        _ => Ok(Arc::new(MemoryQueue::standalone())),
    }
}

/// The stores the bootstrap names: PostgreSQL when `providers.database` is
/// set (its migrations applied first), else memory stores.
pub async fn open_stores(bootstrap: &Bootstrap) -> Result<Stores, BackendError> {
    let Some(db) = &bootstrap.providers.database else {
        return Ok(Stores::memory());
    };
    let options = MigrationOptions {
        embedding_dim: db.embedding_dim,
    };
    let (stores, report) = Stores::open(&db.dsn, options).await?;
    info!(
        applied = report.applied.len(),
        already_applied = report.already_applied,
        "postgresql ready (migrations applied)"
    );
    Ok(stores)
}

/// The PostgreSQL stores of a command that has no use for memory stores
/// (`crewlet config ...`, `crewlet budgets ...`); an error naming `command`
/// without `providers.database`.
pub async fn open_database(
    bootstrap: &Bootstrap,
    command: &'static str,
) -> Result<Stores, BackendError> {
    if bootstrap.providers.database.is_none() {
        return Err(BackendError::NeedsDatabase { command });
    }
    open_stores(bootstrap).await
}

#[cfg(feature = "pulsar")]
async fn connect_pulsar(
    q: &QueueConfig,
    client_name: &str,
) -> Result<Arc<dyn EventQueue>, BackendError> {
    use crewlet_queue::{PulsarOptions, PulsarQueue};
    let url = q.url.clone().ok_or_else(|| {
        BackendError::Unsupported("providers.queue.url is required for a pulsar queue".into())
    })?;
    let mut options = PulsarOptions::new(url.clone()).with_namespace(&q.tenant, &q.namespace);
    if let Some(token) = &q.auth_token {
        options = options.with_auth_token(token.clone());
    }
    options.tls_trust_certs_path = q.tls_trust_certs_path.as_ref().map(Into::into);
    options.startup_retry = std::time::Duration::from_secs(q.startup_retry_seconds);
    options.client_name = client_name.to_owned();
    let queue = PulsarQueue::connect(options).await?;
    info!(%url, tenant = %q.tenant, namespace = %q.namespace, "pulsar queue connected");
    Ok(Arc::new(queue))
}

#[cfg(not(feature = "pulsar"))]
async fn connect_pulsar(_: &QueueConfig, _: &str) -> Result<Arc<dyn EventQueue>, BackendError> {
    Err(BackendError::Unsupported(
        "providers.queue.type is pulsar but this build has no pulsar support (the `pulsar` feature is off)".into(),
    ))
}
