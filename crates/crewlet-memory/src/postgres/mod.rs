//! The PostgreSQL + pgvector repositories over `crewlet_store::Database`.
//!
//! Vectors are zero-padded to the embedding column's width (read once by
//! `MemoryStores::postgres`), so a narrower model's vectors fit and every
//! cosine is unchanged. Similarity is `1 - (embedding <=> query)` through
//! the HNSW indexes; see [`nearest`] for how a per-agent search stays both
//! fast and complete.

mod diary;
mod episodes;
mod onboarding;
mod profiles;
mod skills;

pub use diary::PostgresDiary;
pub use episodes::PostgresEpisodes;
pub use onboarding::PostgresOnboardingMarkers;
pub use profiles::PostgresCounterpartyProfiles;
pub use skills::PostgresSkills;

use crewlet_store::{Database, GenericClient, StoreError, describe, query_err};
use pgvector::Vector;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::error::MemoryError;
use crate::rules::check;

/// Query parameters as the driver takes them.
pub(crate) type Params<'a> = [&'a (dyn ToSql + Sync)];

/// A vector as the column stores it: checked, then zero-padded to `dim`.
pub(crate) fn padded(what: &str, v: &[f32], dim: usize) -> Result<Vector, MemoryError> {
    check(what, v, dim)?;
    let mut p = Vec::with_capacity(dim);
    p.extend_from_slice(v);
    p.resize(dim, 0.0);
    Ok(Vector::from(p))
}

/// An optional row vector, padded.
pub(crate) fn padded_opt(
    what: &str,
    v: Option<&[f32]>,
    dim: usize,
) -> Result<Option<Vector>, MemoryError> {
    v.map(|v| padded(what, v, dim)).transpose()
}

/// Maps a column read failure to [`StoreError::Decode`] naming the table.
pub(crate) fn decode(table: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError {
    move |e| StoreError::decode(table, describe(&e))
}

/// A count or page bound for SQL; nothing real reaches `i64::MAX`.
pub(crate) fn sql_int(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A SQL count back to `usize` (negative would be bad data: read as 0).
pub(crate) fn count(n: i64) -> usize {
    usize::try_from(n).unwrap_or(0)
}

/// Runs a prepared statement and returns its rows.
pub(crate) async fn query(
    client: &impl GenericClient,
    what: &str,
    sql: &str,
    params: &Params<'_>,
) -> Result<Vec<Row>, MemoryError> {
    let stmt = client
        .prepare_cached(sql)
        .await
        .map_err(query_err(format!("preparing {what}")))?;
    Ok(client
        .query(&stmt, params)
        .await
        .map_err(query_err(what.to_owned()))?)
}

/// Runs a prepared statement that returns at most one row.
pub(crate) async fn query_opt(
    client: &impl GenericClient,
    what: &str,
    sql: &str,
    params: &Params<'_>,
) -> Result<Option<Row>, MemoryError> {
    let stmt = client
        .prepare_cached(sql)
        .await
        .map_err(query_err(format!("preparing {what}")))?;
    Ok(client
        .query_opt(&stmt, params)
        .await
        .map_err(query_err(what.to_owned()))?)
}

/// Runs a prepared statement; how many rows it touched.
pub(crate) async fn execute(
    client: &impl GenericClient,
    what: &str,
    sql: &str,
    params: &Params<'_>,
) -> Result<u64, MemoryError> {
    let stmt = client
        .prepare_cached(sql)
        .await
        .map_err(query_err(format!("preparing {what}")))?;
    Ok(client
        .execute(&stmt, params)
        .await
        .map_err(query_err(what.to_owned()))?)
}

/// One similarity search in two forms: `approx` orders by
/// `embedding <=> $query` inside a materialized CTE so the HNSW index serves
/// it; `exact` orders by `distance + 0`, which no index matches, so the
/// planner reads the agent's rows through its btree and sorts them.
pub(crate) struct NearestSql {
    pub approx: &'static str,
    pub exact: &'static str,
}

/// Turns on pgvector 0.8's iterative index scans for one transaction: a
/// filtered HNSW scan keeps walking the graph until `LIMIT` rows pass the
/// filter (up to `hnsw.max_scan_tuples`), instead of stopping after
/// `ef_search` candidates of which only a few belong to the agent.
/// `relaxed_order` may return slightly out of order, hence the outer
/// `ORDER BY distance + 0` in every approx query. Custom plans: a generic
/// plan would price every agent at the average selectivity and walk the
/// graph for an agent with ten rows (or sort a big agent's rows); a custom
/// plan sees the agent's own share in the statistics.
const SCAN_SETTINGS: &str = "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),
        set_config('hnsw.ef_search', $1, true),
        set_config('plan_cache_mode', 'force_custom_plan', true)";

/// Candidates each pass of the graph keeps: the limit, at least pgvector's
/// default 40. More buys little here: the iterative scan keeps going until
/// the limit is met, and every extra candidate is a page read when the
/// index does not fit in shared buffers (measured: ef 100 took three times
/// as long as ef 40 for a 10% agent of 1M rows).
fn ef_search(limit: usize) -> usize {
    limit.clamp(40, 1000)
}

/// The `limit` rows nearest to the query among the rows `params` select.
///
/// The HNSW pass is fast; when it returns fewer than `limit` rows, either
/// the agent holds fewer matching rows (the exact pass is then cheap) or
/// the iterative scan gave up (`hnsw.max_scan_tuples`, an agent owning a
/// tiny share of a large table): either way the exact pass answers
/// completely.
pub(crate) async fn nearest(
    db: &Database,
    what: &str,
    sql: &NearestSql,
    params: &Params<'_>,
    limit: usize,
) -> Result<Vec<Row>, MemoryError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let client = db.client().await?;
    let settings = client
        .prepare_cached(SCAN_SETTINGS)
        .await
        .map_err(query_err("preparing the hnsw scan settings"))?;
    let search = client
        .prepare_cached(sql.approx)
        .await
        .map_err(query_err(format!("preparing {what}")))?;
    let ef = ef_search(limit).to_string();
    let ef_param: [&(dyn ToSql + Sync); 1] = [&ef];
    // The transaction, its settings, the search and the commit in one round
    // trip: the driver queues each request when its future is first polled,
    // in poll order, and `join!` polls all four in that order within one
    // poll (so a cancelled call either sent all four or none). `join!`, not
    // `try_join!`: an early error must not keep COMMIT from being queued,
    // or the pooled connection would stay inside the transaction. After a
    // failed statement the COMMIT rolls back.
    let (begin, set, found, commit) = tokio::join!(
        client.batch_execute("BEGIN"),
        client.query(&settings, &ef_param),
        client.query(&search, params),
        client.batch_execute("COMMIT"),
    );
    begin.map_err(query_err(format!("starting {what}")))?;
    set.map_err(query_err("setting the hnsw scan"))?;
    let rows = found.map_err(query_err(what.to_owned()))?;
    commit.map_err(query_err(format!("finishing {what}")))?;
    if rows.len() >= limit {
        return Ok(rows);
    }
    query(&client, what, sql.exact, params).await
}

/// The similarity score of a row whose last column is the cosine distance.
pub(crate) fn score(row: &Row, table: &'static str) -> Result<f32, MemoryError> {
    let distance: f64 = row.try_get("distance").map_err(decode(table))?;
    Ok((1.0 - distance) as f32)
}
