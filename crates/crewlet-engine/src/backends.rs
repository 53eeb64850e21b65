//! The queue and the stores an engine runs on, built from the Tier A
//! bootstrap: Pulsar or the in-process broker, PostgreSQL (migrated at
//! start) or memory stores, and the event archive (inline event-store
//! writes with a durable outbox) installed on the queue.

use std::sync::Arc;

use crewlet_api::archive::EventArchive;
use crewlet_config::{Bootstrap, QueueConfig, QueueKind};
use crewlet_queue::{EventQueue, MemoryQueue};
use crewlet_store::{EventStoreWriter, MigrationOptions, Stores};
use tracing::info;

use crate::error::EngineError;

/// The queue node and the stores of one process.
#[derive(Clone)]
pub struct Backends {
    pub queue: Arc<dyn EventQueue>,
    pub stores: Stores,
    /// Stores every event this node publishes (inline, as a publish listener).
    pub writer: Arc<EventStoreWriter>,
    /// The inline writes' outbox and the `event-store` group's handler.
    pub archive: Arc<EventArchive>,
}

impl Backends {
    /// Connects what the bootstrap names: Pulsar when `providers.queue` is a
    /// pulsar queue (else the in-process broker), PostgreSQL when
    /// `providers.database` is set (migrations are applied first; else memory
    /// stores). The event store writer is registered on the queue.
    pub async fn connect(bootstrap: &Bootstrap) -> Result<Self, EngineError> {
        let queue = connect_queue(bootstrap.providers.queue.as_ref()).await?;
        let stores = match &bootstrap.providers.database {
            Some(db) => {
                let options = MigrationOptions {
                    embedding_dim: db.embedding_dim,
                };
                let (stores, report) = Stores::open(&db.dsn, options).await?;
                info!(
                    applied = report.applied.len(),
                    already_applied = report.already_applied,
                    "postgresql ready (migrations applied)"
                );
                stores
            }
            None => Stores::memory(),
        };
        Ok(Self::new(queue, stores))
    }

    /// The in-process broker and memory stores (the embedded default).
    pub fn memory() -> Self {
        Self::new(Arc::new(MemoryQueue::standalone()), Stores::memory())
    }

    /// Wraps an existing queue node and stores, installing the event
    /// archive on the node. Do it once per node.
    pub fn new(queue: Arc<dyn EventQueue>, stores: Stores) -> Self {
        let writer = Arc::new(EventStoreWriter::new(stores.events.clone()));
        let archive = EventArchive::install(&queue, writer.clone());
        Self {
            queue,
            stores,
            writer,
            archive,
        }
    }

    /// One line saying what does not survive a restart, or `None` when both
    /// the queue and the stores are durable.
    pub fn durability_warning(&self) -> Option<String> {
        match (self.queue.is_durable(), self.stores.database.is_some()) {
            (true, true) => None,
            (false, false) => Some(
                "no providers.queue and no providers.database: the queue and every store live in this process's memory; nothing survives a restart".into(),
            ),
            (false, true) => Some(
                "no pulsar queue (providers.queue): inboxes and events in flight live in this process's memory; queued work does not survive a restart".into(),
            ),
            (true, false) => Some(
                "no providers.database: company revisions, budgets, schedule claims and stored events live in this process's memory; they do not survive a restart".into(),
            ),
        }
    }
}

async fn connect_queue(config: Option<&QueueConfig>) -> Result<Arc<dyn EventQueue>, EngineError> {
    match config {
        Some(q) if q.kind == QueueKind::Pulsar => connect_pulsar(q).await,
        _ => Ok(Arc::new(MemoryQueue::standalone())),
    }
}

#[cfg(feature = "pulsar")]
async fn connect_pulsar(q: &QueueConfig) -> Result<Arc<dyn EventQueue>, EngineError> {
    use crewlet_queue::{PulsarOptions, PulsarQueue};
    let url = q.url.clone().ok_or_else(|| {
        EngineError::Unsupported("providers.queue.url is required for a pulsar queue".into())
    })?;
    let mut options = PulsarOptions::new(url.clone()).with_namespace(&q.tenant, &q.namespace);
    if let Some(token) = &q.auth_token {
        options = options.with_auth_token(token.clone());
    }
    options.tls_trust_certs_path = q.tls_trust_certs_path.as_ref().map(Into::into);
    options.startup_retry = std::time::Duration::from_secs(q.startup_retry_seconds);
    options.client_name = format!("crewlet-engine-{}", std::process::id());
    let queue = PulsarQueue::connect(options).await?;
    info!(%url, tenant = %q.tenant, namespace = %q.namespace, "pulsar queue connected");
    Ok(Arc::new(queue))
}

#[cfg(not(feature = "pulsar"))]
async fn connect_pulsar(_: &QueueConfig) -> Result<Arc<dyn EventQueue>, EngineError> {
    Err(EngineError::Unsupported(
        "providers.queue.type is pulsar but crewlet-engine was compiled without the `pulsar` feature".into(),
    ))
}
