//! Operational tables, one small trait per table group, each with a
//! PostgreSQL and an in-memory implementation of the same semantics.

mod claim_batch;
pub mod config_revisions;
pub mod fleet;
pub mod follows;
pub mod ledger;
pub mod quotas;
pub mod sandbox_runs;
pub mod schedules;
pub mod secrets;
pub mod webhooks;
