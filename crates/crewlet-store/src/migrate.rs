//! Forward-only migrations from `migrations/*.sql`, embedded at build time.
//!
//! Rules: files run in filename order, each in its own transaction, recorded
//! by filename in `schema_migrations`; the whole run holds one advisory lock
//! (a second process waits, then finds nothing to do); a database holding a
//! migration this binary does not know is refused. The runner owns two
//! bookkeeping tables it creates itself: `schema_migrations` and
//! `crewlet_settings` (embedding width and time-partitioning mode, fixed at
//! the first run).

use std::collections::BTreeSet;
use std::fmt;

use tracing::{info, warn};

use crate::db::Database;
use crate::error::{StoreError, describe, query_err};
use crate::partitions::{DEFAULT_WEEKS_AHEAD, TimePartitioning, ensure_partitions};

/// One embedded migration file.
#[derive(Clone, Copy, Debug)]
pub struct Migration {
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration this binary knows, in the order they run.
pub static MIGRATIONS: &[Migration] = include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// Default width of embedding vectors (OpenAI text-embedding-3-small).
pub const DEFAULT_EMBEDDING_DIM: u32 = 1536;
/// pgvector's HNSW index handles `vector` columns up to this width.
pub const MAX_EMBEDDING_DIM: u32 = 2000;

/// `pg_advisory_lock` key held for a whole migration run ("crewlet\0m").
const MIGRATION_LOCK_KEY: i64 = 0x6372_6577_6c65_7400;

/// What the runner needs from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrationOptions {
    /// Width of every `vector` column, fixed at the first migration.
    pub embedding_dim: u32,
}

impl Default for MigrationOptions {
    fn default() -> Self {
        Self {
            embedding_dim: DEFAULT_EMBEDDING_DIM,
        }
    }
}

/// Where one file stands, reported to the progress callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Applying,
    Applied { millis: u64 },
}

/// Progress of one file: `index` counts from 1 up to `total` pending files.
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a> {
    pub name: &'a str,
    pub index: usize,
    pub total: usize,
    pub step: Step,
}

impl fmt::Display for Progress<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.step {
            Step::Applying => write!(f, "[{}/{}] applying {}", self.index, self.total, self.name),
            Step::Applied { millis } => write!(
                f,
                "[{}/{}] applied  {} ({millis} ms)",
                self.index, self.total, self.name
            ),
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationReport {
    /// Files applied by this run, in order.
    pub applied: Vec<String>,
    /// Files that were already applied before this run.
    pub already_applied: usize,
    pub embedding_dim: u32,
    pub partitioning: TimePartitioning,
}

/// Where a database stands, without changing it (`crewlet migrate --check`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrationStatus {
    pub applied: Vec<String>,
    pub pending: Vec<String>,
    /// Applied in the database but unknown to this binary (a newer crewlet).
    pub unknown: Vec<String>,
    /// The stored width, once the first run fixed it.
    pub embedding_dim: Option<u32>,
    pub partitioning: Option<TimePartitioning>,
}

impl MigrationStatus {
    /// Up to date: nothing pending and nothing unknown.
    pub fn is_current(&self) -> bool {
        self.pending.is_empty() && self.unknown.is_empty()
    }
}

/// Applies the embedded migrations to one database.
#[derive(Clone, Debug)]
pub struct Migrator {
    db: Database,
    options: MigrationOptions,
}

impl Migrator {
    pub fn new(db: Database, options: MigrationOptions) -> Self {
        Self { db, options }
    }

    /// Reads where the database stands. Takes no lock and writes nothing.
    pub async fn status(&self) -> Result<MigrationStatus, StoreError> {
        let client = self.db.client().await?;
        let exists = client
            .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
            .await
            .map_err(query_err("reading schema_migrations"))?
            .try_get::<_, bool>(0)
            .map_err(|e| StoreError::decode("schema_migrations", describe(&e)))?;
        let applied = if exists {
            applied_names(&client).await?
        } else {
            Vec::new()
        };
        let settings_exist = client
            .query_one("SELECT to_regclass('crewlet_settings') IS NOT NULL", &[])
            .await
            .map_err(query_err("reading crewlet_settings"))?
            .try_get::<_, bool>(0)
            .map_err(|e| StoreError::decode("crewlet_settings", describe(&e)))?;
        let (embedding_dim, partitioning) = if settings_exist {
            (
                read_setting(&client, "embedding_dim")
                    .await?
                    .map(|v| parse_dim(&v))
                    .transpose()?,
                read_setting(&client, "time_partitioning")
                    .await?
                    .map(|v| TimePartitioning::parse(&v))
                    .transpose()?,
            )
        } else {
            (None, None)
        };
        let (pending, unknown) = split(&applied);
        Ok(MigrationStatus {
            applied,
            pending,
            unknown,
            embedding_dim,
            partitioning,
        })
    }

    /// Applies every pending migration. See [`Migrator::run_with_progress`].
    pub async fn run(&self) -> Result<MigrationReport, StoreError> {
        self.run_with_progress(|_| {}).await
    }

    /// Applies every pending migration under the advisory lock, reporting each
    /// file to `progress`, then (native partitioning) creates the weekly
    /// partitions ahead.
    pub async fn run_with_progress(
        &self,
        mut progress: impl FnMut(Progress<'_>) + Send,
    ) -> Result<MigrationReport, StoreError> {
        if self.options.embedding_dim == 0 || self.options.embedding_dim > MAX_EMBEDDING_DIM {
            return Err(StoreError::invalid(
                "embedding width",
                format!(
                    "{} is outside 1..={MAX_EMBEDDING_DIM} (pgvector HNSW indexes support at most {MAX_EMBEDDING_DIM} dimensions)",
                    self.options.embedding_dim
                ),
            ));
        }
        self.db.require_extension("vector").await?;

        let mut client = self.db.client().await?;
        client
            .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
            .await
            .map_err(query_err("taking the migration lock"))?;
        let result = self.run_locked(&mut client, &mut progress).await;
        let unlock = client
            .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY])
            .await;
        if let Err(e) = unlock {
            // The lock dies with the session; make sure that session is not reused.
            warn!(error = %describe(&e), "releasing the migration lock failed; dropping the connection");
            let _ = deadpool_postgres::Object::take(client);
        }
        let report = result?;
        if report.partitioning == TimePartitioning::Native {
            ensure_partitions(&self.db, DEFAULT_WEEKS_AHEAD).await?;
        }
        Ok(report)
    }

    async fn run_locked(
        &self,
        client: &mut deadpool_postgres::Object,
        progress: &mut (impl FnMut(Progress<'_>) + Send),
    ) -> Result<MigrationReport, StoreError> {
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (
                     filename   text        PRIMARY KEY,
                     applied_at timestamptz NOT NULL DEFAULT now()
                 );
                 CREATE TABLE IF NOT EXISTS crewlet_settings (
                     key        text        PRIMARY KEY,
                     value      text        NOT NULL,
                     updated_at timestamptz NOT NULL DEFAULT now()
                 );",
            )
            .await
            .map_err(query_err("creating schema_migrations"))?;

        let applied = applied_names(client).await?;
        let (pending, unknown) = split(&applied);
        if !unknown.is_empty() {
            return Err(StoreError::UnknownMigrations { names: unknown });
        }

        let embedding_dim = self.settle_embedding_dim(client).await?;
        let partitioning = self.settle_partitioning(client).await?;
        match partitioning {
            TimePartitioning::Timescale => {
                info!("event store: TimescaleDB hypertables (7-day chunks)");
                client
                    .batch_execute("CREATE EXTENSION IF NOT EXISTS timescaledb")
                    .await
                    .map_err(query_err("creating the timescaledb extension"))?;
            }
            TimePartitioning::Native => info!(
                "event store: native weekly range partitions (TimescaleDB not in use); run ensure_partitions regularly"
            ),
        }

        let total = pending.len();
        let mut done = Vec::with_capacity(total);
        for (i, name) in pending.iter().enumerate() {
            let Some(migration) = MIGRATIONS.iter().find(|m| m.name == name) else {
                continue;
            };
            let index = i + 1;
            progress(Progress {
                name,
                index,
                total,
                step: Step::Applying,
            });
            let started = std::time::Instant::now();
            let sql = migration
                .sql
                .replace("{{embedding_dim}}", &embedding_dim.to_string());
            let failed = |e: tokio_postgres::Error| StoreError::Migration {
                name: name.clone(),
                reason: describe(&e),
            };
            let tx = client.transaction().await.map_err(failed)?;
            tx.batch_execute(&sql).await.map_err(failed)?;
            tx.execute(
                "INSERT INTO schema_migrations (filename) VALUES ($1)",
                &[name],
            )
            .await
            .map_err(failed)?;
            tx.commit().await.map_err(failed)?;
            let millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            info!(migration = %name, millis, "migration applied");
            progress(Progress {
                name,
                index,
                total,
                step: Step::Applied { millis },
            });
            done.push(name.clone());
        }
        Ok(MigrationReport {
            applied: done,
            already_applied: applied.len(),
            embedding_dim,
            partitioning,
        })
    }

    async fn settle_embedding_dim(
        &self,
        client: &deadpool_postgres::Object,
    ) -> Result<u32, StoreError> {
        let configured = self.options.embedding_dim;
        if let Some(stored) = read_setting(client, "embedding_dim").await? {
            let stored = parse_dim(&stored)?;
            if stored != configured {
                return Err(StoreError::EmbeddingWidthMismatch { configured, stored });
            }
            return Ok(stored);
        }
        write_setting(client, "embedding_dim", &configured.to_string()).await?;
        Ok(configured)
    }

    async fn settle_partitioning(
        &self,
        client: &deadpool_postgres::Object,
    ) -> Result<TimePartitioning, StoreError> {
        if let Some(stored) = read_setting(client, "time_partitioning").await? {
            return TimePartitioning::parse(&stored);
        }
        let row = client
            .query_one(
                "SELECT
                     EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'timescaledb'),
                     EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'),
                     current_setting('shared_preload_libraries') LIKE '%timescaledb%'",
                &[],
            )
            .await
            .map_err(query_err("looking for timescaledb"))?;
        let get = |i: usize| {
            row.try_get::<_, bool>(i)
                .map_err(|e| StoreError::decode("pg_available_extensions", describe(&e)))
        };
        let (available, installed, preloaded) = (get(0)?, get(1)?, get(2)?);
        let mode = if available && (installed || preloaded) {
            TimePartitioning::Timescale
        } else {
            if available {
                warn!(
                    "timescaledb is installed on the server but not in shared_preload_libraries; using native partitions"
                );
            }
            TimePartitioning::Native
        };
        write_setting(client, "time_partitioning", mode.as_str()).await?;
        Ok(mode)
    }
}

async fn applied_names(client: &deadpool_postgres::Object) -> Result<Vec<String>, StoreError> {
    let rows = client
        .query(
            "SELECT filename FROM schema_migrations ORDER BY filename",
            &[],
        )
        .await
        .map_err(query_err("reading schema_migrations"))?;
    rows.iter()
        .map(|r| {
            r.try_get::<_, String>(0)
                .map_err(|e| StoreError::decode("schema_migrations.filename", describe(&e)))
        })
        .collect()
}

/// (pending, unknown) given the names already applied.
fn split(applied: &[String]) -> (Vec<String>, Vec<String>) {
    let applied_set: BTreeSet<&str> = applied.iter().map(String::as_str).collect();
    let known: BTreeSet<&str> = MIGRATIONS.iter().map(|m| m.name).collect();
    let pending = MIGRATIONS
        .iter()
        .filter(|m| !applied_set.contains(m.name))
        .map(|m| m.name.to_owned())
        .collect();
    let unknown = applied
        .iter()
        .filter(|a| !known.contains(a.as_str()))
        .cloned()
        .collect();
    (pending, unknown)
}

/// The embedding width the first migration fixed, or `None` when the
/// database was never migrated. Vector repositories read it once, to
/// zero-pad narrower vectors to the column width.
pub async fn stored_embedding_dim(db: &Database) -> Result<Option<u32>, StoreError> {
    let client = db.client().await?;
    let exists = client
        .query_one("SELECT to_regclass('crewlet_settings') IS NOT NULL", &[])
        .await
        .map_err(query_err("reading crewlet_settings"))?
        .try_get::<_, bool>(0)
        .map_err(|e| StoreError::decode("crewlet_settings", describe(&e)))?;
    if !exists {
        return Ok(None);
    }
    read_setting(&client, "embedding_dim")
        .await?
        .map(|v| parse_dim(&v))
        .transpose()
}

pub(crate) async fn read_setting(
    client: &tokio_postgres::Client,
    key: &str,
) -> Result<Option<String>, StoreError> {
    let row = client
        .query_opt("SELECT value FROM crewlet_settings WHERE key = $1", &[&key])
        .await
        .map_err(query_err(format!("reading setting `{key}`")))?;
    row.map(|r| {
        r.try_get::<_, String>(0)
            .map_err(|e| StoreError::decode(format!("setting `{key}`"), describe(&e)))
    })
    .transpose()
}

async fn write_setting(
    client: &tokio_postgres::Client,
    key: &str,
    value: &str,
) -> Result<(), StoreError> {
    client
        .execute(
            "INSERT INTO crewlet_settings (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
            &[&key, &value],
        )
        .await
        .map_err(query_err(format!("writing setting `{key}`")))?;
    Ok(())
}

fn parse_dim(value: &str) -> Result<u32, StoreError> {
    value
        .trim()
        .parse()
        .map_err(|e| StoreError::decode("setting `embedding_dim`", format!("`{value}`: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_embedded_in_filename_order() {
        assert!(!MIGRATIONS.is_empty());
        let names: Vec<_> = MIGRATIONS.iter().map(|m| m.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert!(names.iter().all(|n| n.ends_with(".sql")));
    }

    #[test]
    fn pending_and_unknown_are_told_apart() {
        let applied = vec![MIGRATIONS[0].name.to_owned(), "9999_future.sql".to_owned()];
        let (pending, unknown) = split(&applied);
        assert_eq!(pending.len(), MIGRATIONS.len() - 1);
        assert_eq!(unknown, vec!["9999_future.sql".to_owned()]);
    }

    #[test]
    fn progress_line_names_the_file() {
        let p = Progress {
            name: "0001_foundation.sql",
            index: 1,
            total: 5,
            step: Step::Applied { millis: 12 },
        };
        assert_eq!(p.to_string(), "[1/5] applied  0001_foundation.sql (12 ms)");
    }
}
