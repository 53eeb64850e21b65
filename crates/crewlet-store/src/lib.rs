//! Crewlet's PostgreSQL: the connection pool, forward-only migrations, the
//! operational tables (budgets, company config revisions, webhook dedupe,
//! thread follows, schedule claims) and the event store.
//!
//! Every repository is a small trait with a PostgreSQL and an in-memory
//! implementation of the same semantics; one conformance suite per trait
//! (feature `testsuite`) runs against both. The vector tables (diary,
//! episodes, skills, profiles) are created here; their repositories live in
//! `crewlet-memory`. This crate never imports `crewlet-queue`: the engine
//! registers [`EventStoreWriter::on_publish`] as a publish listener.
//!
//! See `docs/store.md` for the schema and the rules.

mod db;
mod error;
pub mod events;
pub mod migrate;
pub mod partitions;
mod patience;
pub mod repos;
pub mod secret_store;
mod sql;
mod stores;

#[cfg(feature = "testsuite")]
pub mod testsuite;

pub use db::{Database, DatabaseOptions, parse_dsn};
/// The pooled connection and the trait both it and its transactions
/// implement, for repositories outside this crate (`crewlet-memory`).
pub use deadpool_postgres::{GenericClient, Object as PooledClient};
pub use error::{DbTarget, StoreError, describe, query_err, sqlstate};
pub use events::{
    AgentGroup, BreakdownQuery, BufferedEventStore, BufferedOptions, CompositeEventStore, Cursor,
    DEFAULT_RECENT_TURNS, EventPage, EventQuery, EventStore, EventStoreWriter, MAX_BREAKDOWN_DAYS,
    MAX_TURNS_IN_BREAKDOWN, MemoryEventStore, ModelGroup, PhaseGrain, PhaseGroup,
    PostgresEventStore, TokenBreakdown, TokenTotals, TurnGroup, WorkerGroup,
};
pub use migrate::{
    DEFAULT_EMBEDDING_DIM, MAX_EMBEDDING_DIM, MigrationOptions, MigrationReport, MigrationStatus,
    Migrator, stored_embedding_dim,
};
pub use partitions::{TimePartitioning, ensure_partitions, ensure_partitions_at};
pub use patience::{Patience, retry_transient};
pub use repos::config_revisions::{
    ActiveKey, ConfigRevision, ConfigRevisions, MemoryConfigRevisions, NewRevision,
    PostgresConfigRevisions,
};
pub use repos::fleet::completions::{
    CompletionLedger, CompletionRow, MemoryCompletionLedger, PostgresCompletionLedger,
    TurnCompletion,
};
pub use repos::fleet::journal::{
    Appended, EffectJournal, JournalEntry, MemoryEffectJournal, NewJournalEntry,
    PostgresEffectJournal,
};
pub use repos::fleet::leases::{
    DUTY_PREFIX, Fence, Lease, LeaseClaim, LeaseStore, MemoryLeases, NODE_PREFIX, PostgresLeases,
    SEAT_PREFIX, seat_resource,
};
pub use repos::follows::{MemoryThreadFollows, PostgresThreadFollows, ThreadFollows, ThreadRef};
pub use repos::ledger::{
    BudgetCharge, BudgetRefusal, BudgetRow, BudgetType, BudgetWarning, ChargeOutcome,
    MemoryTokenLedger, ORG_SCOPE, PostgresTokenLedger, ReservationId, ReserveOutcome, TokenLedger,
    UnitCap, UsageRow, agent_scope, new_period, unit_scope,
};
pub use repos::quotas::{MemoryProviderQuotas, PostgresProviderQuotas};
pub use repos::sandbox_runs::{
    MemorySandboxRuns, PostgresSandboxRuns, SandboxRun, SandboxRunPatch, SandboxRunStatus,
    SandboxRuns,
};
pub use repos::schedules::{
    MemoryScheduledRuns, PostgresScheduledRuns, ScheduledFire, ScheduledRuns,
};
pub use repos::secrets::{MemorySecretValues, PostgresSecretValues, SealedSecret, SecretValues};
pub use repos::webhooks::{MemoryWebhookDeliveries, PostgresWebhookDeliveries, WebhookDeliveries};
pub use secret_store::{
    Keyring, KeyringError, RekeyReport, SecretError, SecretInfo, SecretSnapshot, SecretStore,
    is_secret_name,
};
pub use stores::Stores;
