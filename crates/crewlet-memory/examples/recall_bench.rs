//! How fast and how complete a per-agent recall is on a large diary:
//! `similar` top-50 plus `recent` top-50 for one agent holding `--agent`
//! of `--rows` rows, timed over `--queries` random queries (p50, p99), and
//! checked against an exact scan (recall) and for a small agent
//! (completeness).
//!
//! ```sh
//! cargo xtask services up --only postgres
//! cargo run --release -p crewlet-memory --example recall_bench -- \
//!     --rows 1000000 --agent 100000 --dim 64 --queries 300
//! ```
//!
//! The database `crewlet_memory_bench_<rows>_<agent>_<dim>` on the test
//! server is loaded once and kept (drop it by hand); later runs only query.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::Utc;
use crewlet_core::AgentId;
use crewlet_memory::{MemoryStores, Page};
use crewlet_store::{Database, MigrationOptions, Migrator};
use crewlet_test_support::database::with_database;
use tokio_postgres::NoTls;

struct Args {
    /// Create and migrate the database, load nothing (to swap in a table
    /// loaded by hand).
    migrate_only: bool,
    rows: u64,
    agent: u64,
    dim: u32,
    queries: usize,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        migrate_only: false,
        rows: 1_000_000,
        agent: 100_000,
        dim: 64,
        queries: 300,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--migrate-only" {
            a.migrate_only = true;
            continue;
        }
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--rows" => a.rows = value.parse()?,
            "--agent" => a.agent = value.parse()?,
            "--dim" => a.dim = value.parse()?,
            "--queries" => a.queries = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

/// The agent under test, a small agent (100 rows) and 90 others share the rest.
const SMALL_ROWS: u64 = 100;

/// The bench's agents are `md5('big')::uuid` and `md5('small')::uuid`, so
/// the load (and a hand-loaded table) can name them in SQL.
async fn agent(db: &Database, name: &str) -> anyhow::Result<AgentId> {
    let client = db.client().await?;
    let id: uuid::Uuid = client
        .query_one("SELECT md5($1)::uuid", &[&name])
        .await?
        .get(0);
    Ok(AgentId::from_uuid(id))
}

async fn load(db: &Database, a: &Args) -> anyhow::Result<()> {
    let client = db.client().await?;
    let n: i64 = client
        .query_one("SELECT count(*) FROM agent_diary", &[])
        .await?
        .get(0);
    if n > 0 {
        println!("reusing {n} loaded rows");
        return Ok(());
    }
    let started = Instant::now();
    client
        .batch_execute("DROP INDEX IF EXISTS agent_diary_embedding")
        .await?;
    let rows = i64::try_from(a.rows)?;
    let agent = i64::try_from(a.agent)?;
    let small_end = agent + i64::try_from(SMALL_ROWS)?;
    let dim = i32::try_from(a.dim)?;
    // Spread the big agent over the whole table (every k-th row), as a
    // long-lived agent's rows would be.
    let stride = (rows / agent).max(1);
    // Embeddings are clustered (1000 topics, each row a topic plus noise),
    // as real text embeddings are; uniform random vectors are a worst case
    // no ANN index recalls well.
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS bench_topics;
             CREATE TABLE bench_topics AS
             SELECT t, (SELECT array_agg(random()::real - 0.5 + 0 * t + 0 * i ORDER BY i)
                        FROM generate_series(1, {dim}) i) AS v
             FROM generate_series(0, 999) t"
        ))
        .await?;
    client
        .execute(
            "INSERT INTO agent_diary (id, agent_id, kind, content, embedding, created_at)
             SELECT gen_random_uuid(),
                    CASE WHEN g % $1::bigint = 0 AND g / $1::bigint <= $2::bigint THEN md5('big')::uuid
                         WHEN g % $1::bigint = 1 AND g / $1::bigint < $3::bigint - $2::bigint THEN md5('small')::uuid
                         ELSE md5('other' || (g % 90))::uuid END,
                    'diary_long', 'row ' || g,
                    (SELECT array_agg(bt.v[i] + (random()::real - 0.5) * 0.4 ORDER BY i)
                     FROM generate_series(1, $4::int) i)::vector,
                    now() - make_interval(secs => g)
             FROM generate_series(1, $5::bigint) g
             JOIN bench_topics bt ON bt.t = (hashint4(g::int) & 65535) % 1000",
            &[&stride, &agent, &small_end, &dim, &rows],
        )
        .await?;
    println!("loaded {} rows in {:?}", a.rows, started.elapsed());
    let started = Instant::now();
    client
        .batch_execute(
            "SET maintenance_work_mem = '1GB';
             SET max_parallel_maintenance_workers = 2;
             CREATE INDEX agent_diary_embedding ON agent_diary USING hnsw (embedding vector_cosine_ops);
             ANALYZE agent_diary;",
        )
        .await?;
    println!("built the hnsw index in {:?}", started.elapsed());
    Ok(())
}

/// Query vectors like the data: stored rows' vectors (of any agent),
/// nudged so none is an exact hit.
async fn sample_queries(db: &Database, n: usize) -> anyhow::Result<Vec<Vec<f32>>> {
    let client = db.client().await?;
    let rows = client
        .query(
            "SELECT embedding FROM agent_diary TABLESAMPLE SYSTEM (1) LIMIT $1",
            &[&i64::try_from(n)?],
        )
        .await?;
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    Ok(rows
        .iter()
        .map(|r| {
            let v: pgvector::Vector = r.get(0);
            v.to_vec()
                .into_iter()
                .map(|x| {
                    // xorshift: no rand dependency for a bench.
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    x + ((seed % 1000) as f32 / 1000.0 - 0.5) * 0.2
                })
                .collect()
        })
        .collect())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    let admin = crewlet_test_support::services::postgres_dsn();
    let name = format!("crewlet_memory_bench_{}_{}_{}", a.rows, a.agent, a.dim);
    {
        let (client, conn) = tokio_postgres::connect(&admin, NoTls).await?;
        tokio::spawn(conn);
        let exists = client
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
            .await?
            .is_some();
        if !exists {
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await?;
        }
    }
    let db = Database::connect(&with_database(&admin, &name)).await?;
    Migrator::new(
        db.clone(),
        MigrationOptions {
            embedding_dim: a.dim,
        },
    )
    .run()
    .await?;
    if a.migrate_only {
        println!("migrated {name}");
        return Ok(());
    }
    load(&db, &a).await?;
    let stores = MemoryStores::postgres(db.clone()).await?;
    let diary = stores.diary.clone();
    let (big, small) = (agent(&db, "big").await?, agent(&db, "small").await?);
    let now = Utc::now();
    let queries = sample_queries(&db, a.queries + 100).await?;
    if queries.len() < a.queries + 100 {
        bail!("sampled only {} query vectors", queries.len());
    }
    let mut queries = queries.into_iter();
    let mut next = || queries.next().unwrap_or_default();

    // Warm up the cache and the prepared statements.
    for _ in 0..20 {
        let q = next();
        diary.similar(&big, &q, 50, now).await?;
    }
    let mut times = Vec::with_capacity(a.queries);
    let mut short = 0;
    for _ in 0..a.queries {
        let q = next();
        let started = Instant::now();
        let found = diary.similar(&big, &q, 50, now).await?;
        let recent = diary.recent(&big, Page::first(50), now).await?;
        times.push(started.elapsed());
        if found.len() < 50 || recent.len() < 50 {
            short += 1;
        }
    }
    times.sort();
    println!(
        "big agent ({} of {} rows, dim {}): similar top-50 + recent top-50 over {} queries: p50 {:?}, p99 {:?}, max {:?}; {} answers short of 50",
        a.agent,
        a.rows,
        a.dim,
        a.queries,
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times.last().copied().unwrap_or_default(),
        short
    );

    // Recall against an exact scan of the agent's rows.
    let client = db.client().await?;
    let mut hits = 0;
    let checks = 20;
    for _ in 0..checks {
        let q = next();
        let found = diary.similar(&big, &q, 50, now).await?;
        let exact = client
            .query(
                "SELECT id FROM (SELECT id, embedding <=> $2 AS d FROM agent_diary
                 WHERE agent_id = $1) s ORDER BY d + 0 LIMIT 50",
                &[&big.as_uuid(), &pgvector::Vector::from(q.clone())],
            )
            .await?;
        let exact: std::collections::HashSet<uuid::Uuid> = exact.iter().map(|r| r.get(0)).collect();
        hits += found.iter().filter(|s| exact.contains(&s.item.id)).count();
    }
    println!(
        "recall@50 against an exact scan: {:.3}",
        hits as f64 / (checks * 50) as f64
    );

    let mut times = Vec::new();
    let mut counts = Vec::new();
    for _ in 0..50 {
        let q = next();
        let started = Instant::now();
        let found = diary.similar(&small, &q, 50, now).await?;
        times.push(started.elapsed());
        counts.push(found.len());
    }
    times.sort();
    println!(
        "small agent ({SMALL_ROWS} rows): similar top-50: p50 {:?}, p99 {:?}; returned {:?}..={:?} rows",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        counts.iter().min(),
        counts.iter().max()
    );
    Ok(())
}
