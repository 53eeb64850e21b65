//! The queue and the stores of one Crewlet process, connected in one place
//! from the Tier A bootstrap, for the engine, the standalone API and the
//! CLI alike.
//!
//! - [`connect`]: what `providers.queue` and `providers.database` name
//!   (Pulsar or the in-process broker; PostgreSQL, migrated first, or
//!   memory stores).
//! - [`archive`]: how every event the process publishes reaches the event
//!   store, inline with a durable outbox, and from the broker by the
//!   `event-store` group.
//! - [`Backends`]: the two together, with the archive installed the way the
//!   process needs it.
//!
//! `crewlet-queue` and `crewlet-store` never import each other; this crate
//! is where they meet.

pub mod archive;
mod connect;
mod error;
mod secrets;

use parking_lot::Mutex;
use std::sync::Arc;

use crewlet_config::Bootstrap;
use crewlet_queue::{EventQueue, MemoryQueue, QueueError};
use crewlet_store::{EventStoreWriter, Stores};
use tracing::warn;

pub use archive::{ArchiveMembers, ArchiveStats, EventArchive};
pub use connect::{connect_queue, open_database, open_stores};
pub use error::BackendError;
pub use secrets::{Secrets, keyring, secret_store};

/// Which kind of process connects: it names the process to the broker and
/// decides how the event archive is installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Process {
    /// `crewlet run`: events are stored inline as they are published (the
    /// engine joins the `event-store` group itself once it starts).
    Engine,
    /// `crewlet run api`, `crewlet-api`: webhooks are acknowledged once on
    /// the broker, and this process joins the `event-store` group at once.
    Api,
}

impl Process {
    fn client_name(self) -> String {
        match self {
            Process::Engine => format!("crewlet-engine-{}", std::process::id()),
            Process::Api => "crewlet-api".to_owned(),
        }
    }
}

/// The queue node and the stores of one process.
#[derive(Clone)]
pub struct Backends {
    pub queue: Arc<dyn EventQueue>,
    pub stores: Stores,
    /// Stores events in the event store (inline, or for the archive group).
    pub writer: Arc<EventStoreWriter>,
    /// The inline writes' outbox and the `event-store` group's handler.
    pub archive: Arc<EventArchive>,
    /// The `event-store` group members joined at connect ([`Process::Api`]).
    members: Arc<Mutex<Option<ArchiveMembers>>>,
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backends")
            .field("durable_queue", &self.queue.is_durable())
            .field("database", &self.stores.database.is_some())
            .finish_non_exhaustive()
    }
}

impl Backends {
    /// Connects what the bootstrap names (see [`connect_queue`] and
    /// [`open_stores`]) and installs the event archive the way `process`
    /// needs it.
    pub async fn connect(bootstrap: &Bootstrap, process: Process) -> Result<Self, BackendError> {
        let queue = connect_queue(bootstrap, &process.client_name()).await?;
        let stores = open_stores(bootstrap).await?;
        Ok(match process {
            Process::Engine => Self::new(queue, stores),
            Process::Api => Self::detached(queue, stores).await?,
        })
    }

    /// The in-process broker and memory stores (the embedded default).
    pub fn memory() -> Self {
        Self::new(Arc::new(MemoryQueue::standalone()), Stores::memory())
    }

    /// Wraps an existing queue node and stores, installing the event
    /// archive on the node as a publish listener (inline writes). Do it
    /// once per node.
    pub fn new(queue: Arc<dyn EventQueue>, stores: Stores) -> Self {
        let writer = Arc::new(EventStoreWriter::new(stores.events.clone()));
        let archive = EventArchive::install(&queue, writer.clone());
        Self::assemble(queue, stores, writer, archive, None)
    }

    /// Wraps an existing queue node and stores without inline writes, and
    /// joins the `event-store` group now: what this process publishes is
    /// stored from the broker, so a crash loses none of it.
    pub async fn detached(queue: Arc<dyn EventQueue>, stores: Stores) -> Result<Self, QueueError> {
        let writer = Arc::new(EventStoreWriter::new(stores.events.clone()));
        let archive = EventArchive::detached(&queue, writer.clone());
        let members = archive.subscribe().await?;
        Ok(Self::assemble(
            queue,
            stores,
            writer,
            archive,
            Some(members),
        ))
    }

    fn assemble(
        queue: Arc<dyn EventQueue>,
        stores: Stores,
        writer: Arc<EventStoreWriter>,
        archive: Arc<EventArchive>,
        members: Option<ArchiveMembers>,
    ) -> Self {
        Self {
            queue,
            stores,
            writer,
            archive,
            members: Arc::new(Mutex::new(members)),
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

    /// Leaves the `event-store` group joined at connect (what is not stored
    /// yet stays on the broker) and shuts the queue down.
    pub async fn close(&self) {
        let members = self.members.lock().take();
        if let Some(members) = members {
            members.close().await;
        }
        let report = self.queue.shutdown().await;
        if report.abandoned > 0 {
            warn!(
                abandoned = report.abandoned,
                "queue handlers abandoned at shutdown"
            );
        }
    }
}
