//! Store upkeep while an engine runs: at boot and then every
//! [`MAINTENANCE_INTERVAL`] (24 h; `EngineOptions::maintenance_interval`),
//!
//! - with PostgreSQL, the weekly partitions of `crewlet_events` and
//!   `episodes` are created [`PARTITION_WEEKS_AHEAD`] weeks ahead
//!   (`crewlet_store::ensure_partitions`; native partitioning only, a no-op
//!   under TimescaleDB). Migrations create them once; without this a process
//!   running for more than four weeks would send every new row to the
//!   default partition;
//! - closed sandbox runs and the fleet's ledgers past
//!   [`FLEET_RETENTION_DAYS`] are deleted (parked and running runs stay);
//! - old webhook delivery claims are deleted (`WebhookDeliveries::gc`),
//!   unless an API in the same process already does it
//!   (`EngineOptions::gc_webhook_deliveries`; `crewlet run` turns it off when
//!   it serves the embedded API).
//!
//! A failure is logged (warn) and retried at the next step; it never stops
//! the engine. The task is aborted by [`Engine::shutdown`](crate::Engine::shutdown).

use std::time::Duration;

use chrono::{DateTime, Utc};
use crewlet_store::{Stores, ensure_partitions_at};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

/// How often a running engine does its upkeep (the first step runs at boot).
pub const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);
/// How long finished turns stay in the completion ledger and their steps
/// in the effect journal (`crewlet replay` reads them back).
pub const FLEET_RETENTION_DAYS: i64 = 14;
/// Weeks of partitions kept ready after the current one.
pub const PARTITION_WEEKS_AHEAD: u32 = crewlet_store::partitions::DEFAULT_WEEKS_AHEAD;

/// The upkeep of one engine's stores.
#[derive(Clone)]
pub struct Maintenance {
    stores: Stores,
    weeks_ahead: u32,
    gc_webhooks: bool,
    learning: Option<std::sync::Arc<crewlet_learning::Learning>>,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintenance")
            .field("database", &self.stores.database.is_some())
            .field("weeks_ahead", &self.weeks_ahead)
            .field("gc_webhooks", &self.gc_webhooks)
            .finish()
    }
}

/// What one [`Maintenance::step`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Partitions created (empty without a database, under TimescaleDB, or
    /// when they all existed).
    pub partitions_created: Vec<String>,
    /// Webhook delivery claims deleted (`None`: GC not run by this engine).
    pub webhook_claims_deleted: Option<u64>,
    /// Expired `diary_short` rows deleted (learning on).
    pub diary_rows_expired: u64,
    /// Raw episodes folded into compacted ones (learning on).
    pub episodes_compacted: usize,
    /// Completion ledger rows past the retention horizon, deleted.
    pub completions_pruned: u64,
    /// Turn journal entries past the retention horizon, deleted.
    pub journal_pruned: u64,
    /// Closed sandbox runs past the retention horizon, deleted.
    pub sandbox_runs_pruned: u64,
    /// What failed, one line each (already logged).
    pub failures: Vec<String>,
}

impl Maintenance {
    /// Upkeep of `stores`: partitions [`PARTITION_WEEKS_AHEAD`] weeks ahead
    /// and webhook claim GC.
    pub fn new(stores: Stores) -> Self {
        Self {
            stores,
            weeks_ahead: PARTITION_WEEKS_AHEAD,
            gc_webhooks: true,
            learning: None,
        }
    }

    /// Also keeps the learning tables in shape: expired diary rows are
    /// deleted and agents over the raw-episode threshold are compacted.
    pub fn learning(
        mut self,
        learning: Option<std::sync::Arc<crewlet_learning::Learning>>,
    ) -> Self {
        self.learning = learning;
        self
    }

    pub fn weeks_ahead(mut self, weeks: u32) -> Self {
        self.weeks_ahead = weeks;
        self
    }

    /// Whether to delete old webhook delivery claims (off when an API in
    /// this process already does).
    pub fn gc_webhooks(mut self, on: bool) -> Self {
        self.gc_webhooks = on;
        self
    }

    /// One round of upkeep as if it were `now`. Never fails: failures are
    /// logged and listed in the report.
    pub async fn step(&self, now: DateTime<Utc>) -> MaintenanceReport {
        let mut report = MaintenanceReport::default();
        if let Some(db) = &self.stores.database {
            match ensure_partitions_at(db, now, self.weeks_ahead).await {
                Ok(created) => report.partitions_created = created,
                Err(e) => {
                    warn!(error = %e, weeks_ahead = self.weeks_ahead, "cannot create the weekly partitions ahead; retrying at the next maintenance");
                    report.failures.push(format!("partitions: {e}"));
                }
            }
        }
        if self.gc_webhooks {
            match self.stores.webhooks.gc_at(now).await {
                Ok(n) => report.webhook_claims_deleted = Some(n),
                Err(e) => {
                    warn!(error = %e, "cannot delete old webhook delivery claims; retrying at the next maintenance");
                    report.failures.push(format!("webhook claims: {e}"));
                }
            }
        }
        // The fleet's ledgers: finished work is remembered for a retention
        // horizon (a redelivery older than that is not expected).
        let horizon = now - chrono::Duration::days(FLEET_RETENTION_DAYS);
        match self.stores.completions.prune(horizon).await {
            Ok(n) => report.completions_pruned = n,
            Err(e) => report.failures.push(format!("turn completions: {e}")),
        }
        match self.stores.journal.prune(horizon).await {
            Ok(n) => report.journal_pruned = n,
            Err(e) => report.failures.push(format!("turn journal: {e}")),
        }
        match self.stores.sandbox_runs.prune(horizon).await {
            Ok(n) => report.sandbox_runs_pruned = n,
            Err(e) => report.failures.push(format!("sandbox runs: {e}")),
        }
        if let Some(learning) = &self.learning {
            let (expired, compacted) = learning.maintain().await;
            report.diary_rows_expired = expired;
            report.episodes_compacted = compacted;
        }
        if !report.partitions_created.is_empty() {
            info!(partitions = ?report.partitions_created, "maintenance created partitions");
        }
        debug!(
            partitions_created = report.partitions_created.len(),
            webhook_claims_deleted = report.webhook_claims_deleted.unwrap_or(0),
            failures = report.failures.len(),
            "store maintenance done"
        );
        report
    }

    /// Runs [`step`](Self::step) now and then every `every` (at least a
    /// second) until the task is aborted.
    /// In a fleet (`duties`), a tick runs only on the node holding the
    /// `maintenance` duty.
    pub fn spawn(self, every: Duration, duties: Option<crate::fleet::Duties>) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut interval = tokio::time::interval(every.max(Duration::from_secs(1)));
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                interval.tick().await;
                if let Some(d) = &duties
                    && !d.hold(crate::fleet::duties::MAINTENANCE).await
                {
                    continue;
                }
                self.step(Utc::now()).await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use crewlet_store::partitions::week_start;
    use crewlet_store::{MigrationOptions, Stores};
    use crewlet_test_support::database::FreshDatabase;

    use super::*;

    async fn exists(stores: &Stores, table: &str) -> bool {
        let Some(db) = &stores.database else {
            return false;
        };
        let client = db.client().await.unwrap_or_else(|e| panic!("{e}"));
        client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .get(0)
    }

    #[tokio::test]
    async fn a_step_creates_the_partitions_of_its_week_and_the_weeks_ahead() {
        let admin = crewlet_test_support::require!(postgres);
        let fresh = FreshDatabase::create(&admin).await;
        let (stores, _) = Stores::open(&fresh.dsn, MigrationOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let later = Utc
            .with_ymd_and_hms(2031, 6, 18, 12, 0, 0)
            .single()
            .unwrap_or_else(|| panic!("a valid date"));
        let weeks = |t: DateTime<Utc>| {
            let suffix = week_start(t).format("%Y%m%d").to_string();
            [
                format!("crewlet_events_w{suffix}"),
                format!("episodes_w{suffix}"),
            ]
        };
        let far_ahead = later + chrono::Duration::weeks(i64::from(PARTITION_WEEKS_AHEAD));
        for table in weeks(later).iter().chain(&weeks(far_ahead)) {
            assert!(!exists(&stores, table).await, "{table} before the step");
        }

        stores
            .webhooks
            .claim_at("slack", "old", later - chrono::Duration::hours(1))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let report = Maintenance::new(stores.clone()).step(later).await;
        assert!(report.failures.is_empty(), "{report:?}");
        // Last week, this week and 4 ahead, for both tables.
        assert_eq!(report.partitions_created.len(), 12, "{report:?}");
        for table in weeks(later).iter().chain(&weeks(far_ahead)) {
            assert!(exists(&stores, table).await, "{table} after the step");
        }
        assert_eq!(report.webhook_claims_deleted, Some(1));

        // Idempotent; GC can be left to the API.
        let again = Maintenance::new(stores.clone())
            .gc_webhooks(false)
            .step(later)
            .await;
        assert_eq!(again, MaintenanceReport::default());
    }

    #[tokio::test]
    async fn without_a_database_a_step_only_collects_webhook_claims() {
        let stores = Stores::memory();
        let now = Utc::now();
        stores
            .webhooks
            .claim_at("github", "d1", now - chrono::Duration::hours(2))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        stores
            .webhooks
            .claim_at("github", "d2", now)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let report = Maintenance::new(stores).step(now).await;
        assert_eq!(
            report,
            MaintenanceReport {
                webhook_claims_deleted: Some(1),
                ..MaintenanceReport::default()
            }
        );
    }

    #[tokio::test]
    async fn a_step_forgets_closed_sandbox_runs_past_the_horizon_and_keeps_open_ones() {
        use crewlet_store::{SandboxRun, SandboxRunStatus};
        let stores = Stores::memory();
        let now = Utc::now();
        let old = now - chrono::Duration::days(FLEET_RETENTION_DAYS + 1);
        let run = |call: &str, status: SandboxRunStatus| SandboxRun {
            id: uuid::Uuid::now_v7(),
            seat: "eng".into(),
            task_id: "t".into(),
            turn_id: uuid::Uuid::nil(),
            call_id: call.into(),
            trigger_event: serde_json::Value::Null,
            conversation: None,
            backend: "local".into(),
            box_id: String::new(),
            run_id: String::new(),
            coding_agent: "command".into(),
            status,
            question: None,
            answer: None,
            result: None,
            paused_at: None,
            created_at: old,
            updated_at: old,
        };
        for (call, status) in [
            ("done", SandboxRunStatus::Completed),
            ("waiting", SandboxRunStatus::AwaitingAnswer),
        ] {
            stores
                .sandbox_runs
                .insert(&run(call, status))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let report = Maintenance::new(stores.clone())
            .gc_webhooks(false)
            .step(now)
            .await;
        assert_eq!(report.sandbox_runs_pruned, 1, "{report:?}");
        let left = stores
            .sandbox_runs
            .with_status(
                None,
                &[
                    SandboxRunStatus::Completed,
                    SandboxRunStatus::AwaitingAnswer,
                ],
            )
            .await
            .unwrap_or_default();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].call_id, "waiting", "a parked run is never pruned");
    }
}
