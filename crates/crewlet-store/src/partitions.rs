//! Time partitioning of `crewlet_events` (on `event_time`) and `episodes` (on
//! `ended_at`): TimescaleDB hypertables with 7-day chunks when the server has
//! TimescaleDB, otherwise native weekly range partitions that this module
//! creates ahead of time. A DEFAULT partition catches anything outside them,
//! so an insert never fails; creating a week's partition later moves that
//! week's rows out of the default partition.

use chrono::{DateTime, Datelike, Duration, NaiveTime, TimeZone, Utc};
use deadpool_postgres::GenericClient;
use tracing::info;

use crate::db::Database;
use crate::error::{StoreError, describe, query_err, sqlstate};
use crate::migrate::read_setting;

/// Weeks of partitions kept ready after the current one.
pub const DEFAULT_WEEKS_AHEAD: u32 = 4;

/// The time-partitioned tables and their partition keys.
pub const TIME_PARTITIONED: [(&str, &str); 2] =
    [("crewlet_events", "event_time"), ("episodes", "ended_at")];

/// Serializes partition maintenance across processes ("crewlet\0p").
const PARTITION_LOCK_KEY: i64 = 0x6372_6577_6c65_7470;

/// How time-series tables are partitioned, fixed at the first migration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimePartitioning {
    /// TimescaleDB hypertables, 7-day chunks (TimescaleDB manages chunks).
    Timescale,
    /// Native `PARTITION BY RANGE`, weekly partitions plus a default one.
    Native,
}

impl TimePartitioning {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timescale => "timescale",
            Self::Native => "native",
        }
    }

    pub fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "timescale" => Ok(Self::Timescale),
            "native" => Ok(Self::Native),
            other => Err(StoreError::decode(
                "setting `time_partitioning`",
                format!("`{other}` is neither `timescale` nor `native`"),
            )),
        }
    }
}

/// The mode recorded by the first migration.
pub async fn time_partitioning(db: &Database) -> Result<TimePartitioning, StoreError> {
    let client = db.client().await?;
    match read_setting(&client, "time_partitioning").await? {
        Some(v) => TimePartitioning::parse(&v),
        None => Err(StoreError::Query {
            what: "reading the partitioning mode".into(),
            reason: "the database is not migrated yet; run `crewlet migrate`".into(),
        }),
    }
}

/// Monday 00:00 UTC of the week holding `t`.
pub fn week_start(t: DateTime<Utc>) -> DateTime<Utc> {
    let day = t.date_naive() - Duration::days(i64::from(t.weekday().num_days_from_monday()));
    Utc.from_utc_datetime(&day.and_time(NaiveTime::MIN))
}

/// The maintenance call: makes sure the previous week (late events), the
/// current week and `weeks_ahead` weeks after it have partitions. A no-op
/// under TimescaleDB. Returns the names of the partitions it created. Safe to
/// run from several processes at once. Run it daily (the engine does).
pub async fn ensure_partitions(db: &Database, weeks_ahead: u32) -> Result<Vec<String>, StoreError> {
    ensure_partitions_at(db, Utc::now(), weeks_ahead).await
}

/// [`ensure_partitions`] as if it were `now` (tests, clocks of one's own).
pub async fn ensure_partitions_at(
    db: &Database,
    now: DateTime<Utc>,
    weeks_ahead: u32,
) -> Result<Vec<String>, StoreError> {
    ensure_partitions_between(
        db,
        now - Duration::weeks(1),
        now + Duration::weeks(i64::from(weeks_ahead)),
    )
    .await
}

/// Makes sure every week touching `[from, to]` has its partition.
pub async fn ensure_partitions_between(
    db: &Database,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<String>, StoreError> {
    if time_partitioning(db).await? == TimePartitioning::Timescale {
        return Ok(Vec::new());
    }
    let mut created = Vec::new();
    let mut week = week_start(from);
    let mut client = db.client().await?;
    while week <= to {
        let next = week + Duration::weeks(1);
        for (table, column) in TIME_PARTITIONED {
            if let Some(name) = ensure_one(&mut client, table, column, week, next).await? {
                created.push(name);
            }
        }
        week = next;
    }
    if !created.is_empty() {
        info!(partitions = ?created, "created weekly partitions");
    }
    Ok(created)
}

async fn ensure_one(
    client: &mut deadpool_postgres::Object,
    table: &str,
    column: &str,
    lo: DateTime<Utc>,
    hi: DateTime<Utc>,
) -> Result<Option<String>, StoreError> {
    let name = format!("{table}_w{}", lo.format("%Y%m%d"));
    let what = format!("creating partition {name}");
    if partition_exists(&*client, &name, &what).await? {
        return Ok(None);
    }
    let tx = client
        .transaction()
        .await
        .map_err(query_err(what.clone()))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&PARTITION_LOCK_KEY])
        .await
        .map_err(query_err(what.clone()))?;
    if partition_exists(&tx, &name, &what).await? {
        return Ok(None);
    }
    let (lo_s, hi_s) = (
        lo.format("%Y-%m-%d %H:%M:%S+00").to_string(),
        hi.format("%Y-%m-%d %H:%M:%S+00").to_string(),
    );
    // Rows that fell into the default partition for this week move into the
    // new one first; ATTACH then validates against an empty range.
    let sql = format!(
        "CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
         WITH moved AS (
             DELETE FROM {table}_default
             WHERE {column} >= '{lo_s}' AND {column} < '{hi_s}'
             RETURNING *)
         INSERT INTO {name} SELECT * FROM moved;
         ALTER TABLE {table} ATTACH PARTITION {name} FOR VALUES FROM ('{lo_s}') TO ('{hi_s}');"
    );
    match tx.batch_execute(&sql).await {
        Ok(()) => {}
        // Created meanwhile by a process that does not take our lock.
        Err(e) if sqlstate(&e) == Some("42P07") => return Ok(None),
        Err(e) => return Err(query_err(what)(e)),
    }
    tx.commit().await.map_err(query_err(what))?;
    Ok(Some(name))
}

async fn partition_exists<C: GenericClient>(
    client: &C,
    name: &str,
    what: &str,
) -> Result<bool, StoreError> {
    client
        // pg_class through a fresh MVCC snapshot: after the advisory lock this
        // sees a partition another process just committed (the relation
        // cache behind to_regclass may not yet).
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_class
                            WHERE relname = $1 AND relnamespace = current_schema()::regnamespace)",
            &[&name],
        )
        .await
        .map_err(query_err(what))?
        .try_get::<_, bool>(0)
        .map_err(|e| StoreError::decode(what, describe(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weeks_start_on_monday_midnight_utc() {
        let t = Utc.with_ymd_and_hms(2026, 3, 12, 10, 30, 0).single();
        let monday = Utc.with_ymd_and_hms(2026, 3, 9, 0, 0, 0).single();
        assert_eq!(t.map(week_start), monday);
        assert_eq!(monday.map(week_start), monday);
    }
}
