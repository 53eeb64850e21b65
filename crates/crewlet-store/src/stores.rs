use std::sync::Arc;

use crate::db::Database;
use crate::error::StoreError;
use crate::events::{CompositeEventStore, EventStore, MemoryEventStore, PostgresEventStore};
use crate::migrate::{MigrationOptions, MigrationReport, Migrator};
use crate::repos::config_revisions::{
    ConfigRevisions, MemoryConfigRevisions, PostgresConfigRevisions,
};
use crate::repos::fleet::completions::{
    CompletionLedger, MemoryCompletionLedger, PostgresCompletionLedger,
};
use crate::repos::fleet::journal::{EffectJournal, MemoryEffectJournal, PostgresEffectJournal};
use crate::repos::fleet::leases::{LeaseStore, MemoryLeases, PostgresLeases};
use crate::repos::follows::{MemoryThreadFollows, PostgresThreadFollows, ThreadFollows};
use crate::repos::ledger::{MemoryTokenLedger, PostgresTokenLedger, TokenLedger};
use crate::repos::quotas::{MemoryProviderQuotas, PostgresProviderQuotas};
use crate::repos::sandbox_runs::{MemorySandboxRuns, PostgresSandboxRuns, SandboxRuns};
use crate::repos::schedules::{MemoryScheduledRuns, PostgresScheduledRuns, ScheduledRuns};
use crate::repos::secrets::{MemorySecretValues, PostgresSecretValues, SecretValues};
use crate::repos::webhooks::{
    MemoryWebhookDeliveries, PostgresWebhookDeliveries, WebhookDeliveries,
};
use crewlet_core::quota::ProviderQuotas;

/// Every repository behind its trait, ready for the engine and the API.
#[derive(Clone)]
pub struct Stores {
    /// `None` for the in-memory set.
    pub database: Option<Database>,
    /// Composite (memory + PostgreSQL) or memory alone.
    pub events: Arc<dyn EventStore>,
    pub ledger: Arc<dyn TokenLedger>,
    pub config: Arc<dyn ConfigRevisions>,
    pub webhooks: Arc<dyn WebhookDeliveries>,
    pub follows: Arc<dyn ThreadFollows>,
    pub schedules: Arc<dyn ScheduledRuns>,
    /// Sealed `${NAME}` values (the secret store's rows).
    pub secrets: Arc<dyn SecretValues>,
    /// The schedule of model calls per provider (`rpm`/`tpm`): shared by
    /// every process on PostgreSQL, this process's alone in memory.
    pub quotas: Arc<dyn ProviderQuotas>,
    /// Node presence, seat ownership and duties: shared by the fleet on
    /// PostgreSQL; in memory this process holds everything.
    pub leases: Arc<dyn LeaseStore>,
    /// The triggers each seat already worked.
    pub completions: Arc<dyn CompletionLedger>,
    /// The effect journal of running turns (fenced by `leases`).
    pub journal: Arc<dyn EffectJournal>,
    /// Coding-agent runs started with `run_sandbox`.
    pub sandbox_runs: Arc<dyn SandboxRuns>,
}

impl Stores {
    /// In-process stores: nothing survives a restart.
    pub fn memory() -> Self {
        let leases = Arc::new(MemoryLeases::new());
        Self {
            database: None,
            events: Arc::new(MemoryEventStore::new()),
            ledger: Arc::new(MemoryTokenLedger::new()),
            config: Arc::new(MemoryConfigRevisions::new()),
            webhooks: Arc::new(MemoryWebhookDeliveries::new()),
            follows: Arc::new(MemoryThreadFollows::new()),
            schedules: Arc::new(MemoryScheduledRuns::new()),
            secrets: Arc::new(MemorySecretValues::new()),
            quotas: Arc::new(MemoryProviderQuotas::new()),
            journal: Arc::new(MemoryEffectJournal::new(leases.clone())),
            leases,
            completions: Arc::new(MemoryCompletionLedger::new()),
            sandbox_runs: Arc::new(MemorySandboxRuns::new()),
        }
    }

    /// Whether the database answers now (`SELECT 1`); memory stores always do.
    /// Work that must be recorded checks this before it starts paying for
    /// anything (a model call), so an outage delays it instead of losing it.
    pub async fn check_available(&self) -> Result<(), StoreError> {
        match &self.database {
            Some(db) => db.ping().await,
            None => Ok(()),
        }
    }

    /// PostgreSQL-backed stores over an already migrated database; events
    /// go through a [`CompositeEventStore`] with a 1000-event memory leg.
    pub fn postgres(db: Database) -> Self {
        Self {
            events: Arc::new(CompositeEventStore::new(
                Arc::new(MemoryEventStore::new()),
                Arc::new(PostgresEventStore::new(db.clone())),
            )),
            ledger: Arc::new(PostgresTokenLedger::new(db.clone())),
            config: Arc::new(PostgresConfigRevisions::new(db.clone())),
            webhooks: Arc::new(PostgresWebhookDeliveries::new(db.clone())),
            follows: Arc::new(PostgresThreadFollows::new(db.clone())),
            schedules: Arc::new(PostgresScheduledRuns::new(db.clone())),
            secrets: Arc::new(PostgresSecretValues::new(db.clone())),
            quotas: Arc::new(PostgresProviderQuotas::new(db.clone())),
            leases: Arc::new(PostgresLeases::new(db.clone())),
            completions: Arc::new(PostgresCompletionLedger::new(db.clone())),
            journal: Arc::new(PostgresEffectJournal::new(db.clone())),
            sandbox_runs: Arc::new(PostgresSandboxRuns::new(db.clone())),
            database: Some(db),
        }
    }

    /// Connects to `dsn`, applies pending migrations, and builds the stores.
    pub async fn open(
        dsn: &str,
        options: MigrationOptions,
    ) -> Result<(Self, MigrationReport), StoreError> {
        let db = Database::connect(dsn).await?;
        let report = Migrator::new(db.clone(), options).run().await?;
        Ok((Self::postgres(db), report))
    }
}
