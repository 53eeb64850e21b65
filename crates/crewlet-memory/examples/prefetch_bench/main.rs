//! `cargo xtask bench memory` (prefetch section): the Plan prefetch's diary
//! candidate selection on a large PostgreSQL diary. Run in release mode:
//!
//! ```sh
//! cargo run --release -p crewlet-memory --example prefetch_bench -- \
//!     --diary-rows 1000000 --agent-rows 100000 --agents 1000 --queries 500
//! ```
//!
//! A database of its own on the server of `cargo xtask services up`
//! (dropped at the end unless `--keep-db NAME`, which also skips the load
//! when `NAME` already holds the same shape), migrated with 384-wide
//! embeddings, filled by binary `COPY` with every index but the primary key
//! dropped, then the migration's indexes rebuilt from their own definitions.
//!
//! Vectors are synthetic but shaped like text embeddings: unit vectors
//! around topic centroids (Gaussian noise, cosine ~0.7 to the centroid),
//! centroids sharing a common direction (pairwise cosine ~0.15, as real
//! embeddings are anisotropic); each agent writes half its rows on its own
//! 12 topics, half on any. Queries are drawn like the queried agent's rows.
//!
//! Each timed query is what `diary_candidates` in crewlet-learning does:
//! `similar(agent, q, 50)` and `recent(agent, 50)` at once through the
//! PostgreSQL `Diary`, merged by id (vector hits first), capped at 100.

use std::collections::HashSet;
use std::pin::pin;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{DateTime, TimeDelta, Utc};
use crewlet_core::AgentId;
use crewlet_memory::{Diary, DiaryEntry, MemoryStores, Page, Scored};
use crewlet_store::{Database, MigrationOptions, Migrator};
use crewlet_test_support::database::{FreshDatabase, with_database};
use pgvector::Vector;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};

mod corpus;

use corpus::{Corpus, DIM, Rng, SEED, agent_id};

const USAGE: &str = "prefetch_bench [--diary-rows N] [--agent-rows N] [--small-rows N] [--agents N] \
     [--queries N] [--warmup N] [--topics N] [--keep-db NAME] [--maintenance-work-mem SIZE] [--quick]";
const VECTOR_LIMIT: usize = 50;
const RECENCY_LIMIT: usize = 50;
const POOL_CAP: usize = 100;
const TARGET_P99: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, PartialEq)]
struct Args {
    diary_rows: u64,
    agent_rows: u64,
    small_rows: u64,
    agents: u64,
    queries: usize,
    warmup: usize,
    topics: usize,
    keep_db: Option<String>,
    maintenance_work_mem: String,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        diary_rows: 1_000_000,
        agent_rows: 100_000,
        small_rows: 100,
        agents: 1_000,
        queries: 500,
        warmup: 50,
        topics: 300,
        keep_db: None,
        maintenance_work_mem: "4GB".to_owned(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--quick" {
            (a.diary_rows, a.agent_rows, a.agents, a.queries) = (20_000, 2_000, 100, 200);
            a.maintenance_work_mem = "256MB".to_owned();
            continue;
        }
        let value = it
            .next()
            .with_context(|| format!("{flag} needs a value; {USAGE}"))?;
        let num = |v: &str| v.parse::<u64>().with_context(|| format!("{flag} {v}"));
        match flag.as_str() {
            "--diary-rows" => a.diary_rows = num(&value)?,
            "--agent-rows" => a.agent_rows = num(&value)?,
            "--small-rows" => a.small_rows = num(&value)?,
            "--agents" => a.agents = num(&value)?,
            "--queries" => a.queries = usize::try_from(num(&value)?)?,
            "--warmup" => a.warmup = usize::try_from(num(&value)?)?,
            "--topics" => a.topics = usize::try_from(num(&value)?)?.max(1),
            "--keep-db" => a.keep_db = Some(value),
            "--maintenance-work-mem" => a.maintenance_work_mem = value,
            other => bail!("unknown flag {other}; {USAGE}"),
        }
    }
    if a.agents < 3 || a.agent_rows + a.small_rows > a.diary_rows {
        bail!("need --agents >= 3 and --agent-rows + --small-rows <= --diary-rows");
    }
    if let Some(name) = &a.keep_db
        && !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        bail!("--keep-db {name}: use lowercase letters, digits and _");
    }
    Ok(a)
}

/// Who wrote each row, in write order: every agent's rows spread over the
/// whole history (a shuffle), as long-lived agents' rows are.
fn owners(a: &Args, rng: &mut Rng) -> Vec<u16> {
    let rows = usize::try_from(a.diary_rows).unwrap_or(usize::MAX);
    let mut owners = Vec::with_capacity(rows);
    owners.extend(std::iter::repeat_n(0u16, a.agent_rows as usize));
    owners.extend(std::iter::repeat_n(1u16, a.small_rows as usize));
    let others = a.agents - 2;
    let rest = a.diary_rows - a.agent_rows - a.small_rows;
    for i in 0..rest {
        owners.push(u16::try_from(2 + i % others).unwrap_or(u16::MAX));
    }
    for i in (1..owners.len()).rev() {
        owners.swap(i, rng.below(i + 1));
    }
    owners
}

// ------------------------------------------------------------------- loading

async fn connect(dsn: &str) -> anyhow::Result<Client> {
    let (client, conn) = tokio_postgres::connect(dsn, NoTls)
        .await
        .with_context(|| format!("cannot connect to {dsn}"))?;
    tokio::spawn(conn);
    Ok(client)
}

/// The shape a kept database was loaded with, and how long that took.
const META: &str = "CREATE TABLE IF NOT EXISTS prefetch_bench_meta (
        shape text PRIMARY KEY, load_secs float8 NOT NULL, index_secs text NOT NULL)";

fn shape(a: &Args) -> String {
    format!(
        "rows={} agent={} small={} agents={} topics={} dim={DIM} seed={SEED:x}",
        a.diary_rows, a.agent_rows, a.small_rows, a.agents, a.topics
    )
}

/// Loads the diary unless a kept database already holds this shape.
async fn prepare(dsn: &str, a: &Args, corpus: &Corpus) -> anyhow::Result<()> {
    let client = connect(dsn).await?;
    client.batch_execute(META).await?;
    let kept = client
        .query_opt(
            "SELECT load_secs, index_secs FROM prefetch_bench_meta WHERE shape = $1",
            &[&shape(a)],
        )
        .await?;
    if let Some(row) = kept {
        let (load, index): (f64, String) = (row.get(0), row.get(1));
        println!(
            "kept database already loaded ({}): loaded in {load:.1} s; {index}",
            shape(a)
        );
        return Ok(());
    }
    let n: i64 = client
        .query_one("SELECT count(*) FROM agent_diary", &[])
        .await?
        .get(0);
    if n > 0 {
        bail!(
            "the database holds {n} diary rows of another shape; drop it or pick another --keep-db"
        );
    }
    let indexes: Vec<(String, String)> = client
        .query(
            "SELECT c.relname::text, pg_get_indexdef(i.indexrelid)
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             WHERE i.indrelid = 'agent_diary'::regclass AND NOT i.indisprimary
             ORDER BY c.relname",
            &[],
        )
        .await?
        .iter()
        // The diary is partitioned: its indexes are defined `ON ONLY` the
        // parent, which would build nothing on the partitions.
        .map(|r| {
            (
                r.get(0),
                r.get::<_, String>(1).replacen(" ON ONLY ", " ON ", 1),
            )
        })
        .collect();
    for (name, _) in &indexes {
        client.batch_execute(&format!("DROP INDEX {name}")).await?;
    }

    let started = Instant::now();
    copy_rows(&client, a, corpus).await?;
    let load = started.elapsed();
    println!(
        "loaded {} diary rows ({} agents) by binary COPY in {:.1} s ({:.0} rows/s)",
        a.diary_rows,
        a.agents,
        load.as_secs_f64(),
        a.diary_rows as f64 / load.as_secs_f64()
    );

    client
        .batch_execute(&format!(
            "SET maintenance_work_mem = '{}'; SET max_parallel_maintenance_workers = 2",
            a.maintenance_work_mem.replace('\'', "")
        ))
        .await?;
    let mut index_times = Vec::new();
    for (name, def) in &indexes {
        let started = Instant::now();
        client
            .batch_execute(def)
            .await
            .with_context(|| format!("rebuilding {name}"))?;
        let took = started.elapsed();
        println!("index {name}: {:.1} s  ({def})", took.as_secs_f64());
        index_times.push(format!("{name} {:.1} s", took.as_secs_f64()));
    }
    let started = Instant::now();
    client.batch_execute("VACUUM ANALYZE agent_diary").await?;
    println!("VACUUM ANALYZE: {:.1} s", started.elapsed().as_secs_f64());
    let size: String = client
        .query_one(
            // Summed over the partitions (a partitioned relation has no
            // storage of its own).
            "SELECT pg_size_pretty(sum(pg_table_size(relid))
                        FILTER (WHERE relid::text NOT LIKE '%embedding%')) || ' table, ' ||
                    pg_size_pretty(sum(pg_relation_size(relid))
                        FILTER (WHERE relid::text LIKE '%embedding%')) || ' hnsw index'
             FROM (SELECT relid FROM pg_partition_tree('agent_diary')
                   UNION ALL SELECT relid FROM pg_partition_tree('agent_diary_embedding')) t",
            &[],
        )
        .await?
        .get(0);
    println!("size: {size}");
    client
        .execute(
            "INSERT INTO prefetch_bench_meta VALUES ($1, $2, $3)",
            &[&shape(a), &load.as_secs_f64(), &index_times.join(", ")],
        )
        .await?;
    Ok(())
}

/// One binary `COPY` of every row, in write order (one second apart, the
/// newest now), with v7 ids as `Diary::write` makes them.
async fn copy_rows(client: &Client, a: &Args, corpus: &Corpus) -> anyhow::Result<()> {
    // The column types, the extension's `vector` included, as the server
    // names them.
    let stmt = client
        .prepare(
            "INSERT INTO agent_diary (id, agent_id, kind, content, embedding, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .await?;
    let types = stmt.params().to_vec();
    let sink = client
        .copy_in(
            "COPY agent_diary (id, agent_id, kind, content, embedding, created_at)
             FROM STDIN (FORMAT binary)",
        )
        .await?;
    let mut writer = pin!(BinaryCopyInWriter::new(sink, &types));
    let mut rng = Rng::new(SEED ^ 1);
    let owners = owners(a, &mut rng);
    let ids: Vec<uuid::Uuid> = (0..a.agents).map(|i| agent_id(i).as_uuid()).collect();
    let start = Utc::now() - TimeDelta::seconds(i64::try_from(a.diary_rows)?);
    for (g, &owner) in owners.iter().enumerate() {
        let owner = u64::from(owner);
        let at = start + TimeDelta::seconds(i64::try_from(g)?);
        let id = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            u64::try_from(at.timestamp())?,
            at.timestamp_subsec_nanos(),
        ));
        let content = format!("bench note {g} of agent {owner}");
        let v = Vector::from(corpus.sample(owner, &mut rng));
        let agent = ids[owner as usize];
        let row: [&(dyn ToSql + Sync); 6] = [&id, &agent, &"diary_long", &content, &v, &at];
        writer.as_mut().write(&row).await?;
        if g > 0 && g % 200_000 == 0 {
            println!("  {g} rows copied");
        }
    }
    writer.finish().await?;
    Ok(())
}

// ----------------------------------------------------------------- measuring

/// `merge_candidates` of crewlet-learning's prefetch: vector hits first,
/// then recent rows not already in, cut to the pool cap.
fn merge(similar: Vec<Scored<DiaryEntry>>, recent: Vec<DiaryEntry>) -> Vec<DiaryEntry> {
    let mut seen = HashSet::new();
    similar
        .into_iter()
        .map(|s| s.item)
        .chain(recent)
        .filter(|e| seen.insert(e.id))
        .take(POOL_CAP)
        .collect()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1);
    sorted.get(i).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Run {
    times: Vec<Duration>,
    total: Duration,
    similar: Vec<usize>,
    recent: Vec<usize>,
    merged: Vec<usize>,
}

async fn candidates(
    diary: &dyn Diary,
    agent: &AgentId,
    q: &[f32],
    now: DateTime<Utc>,
) -> anyhow::Result<(usize, usize, Vec<DiaryEntry>)> {
    let (similar, recent) = tokio::join!(
        diary.similar(agent, q, VECTOR_LIMIT, now),
        diary.recent(agent, Page::first(RECENCY_LIMIT), now)
    );
    let (similar, recent) = (similar?, recent?);
    let (s, r) = (similar.len(), recent.len());
    Ok((s, r, merge(similar, recent)))
}

async fn measure(
    diary: &dyn Diary,
    agent: &AgentId,
    queries: &[Vec<f32>],
    warmup: usize,
) -> anyhow::Result<Run> {
    let now = Utc::now();
    let (warm, timed) = queries.split_at(warmup.min(queries.len()));
    for q in warm {
        candidates(diary, agent, q, now).await?;
    }
    let mut run = Run {
        times: Vec::with_capacity(timed.len()),
        total: Duration::ZERO,
        similar: Vec::new(),
        recent: Vec::new(),
        merged: Vec::new(),
    };
    let all = Instant::now();
    for q in timed {
        let started = Instant::now();
        let (s, r, merged) = candidates(diary, agent, q, now).await?;
        run.times.push(started.elapsed());
        run.similar.push(s);
        run.recent.push(r);
        run.merged.push(merged.len());
    }
    run.total = all.elapsed();
    run.times.sort_unstable();
    Ok(run)
}

fn mean(v: &[usize]) -> f64 {
    v.iter().sum::<usize>() as f64 / v.len().max(1) as f64
}

fn report(label: &str, holds: u64, run: &Run) {
    let n = run.times.len();
    let mean_t = run.times.iter().sum::<Duration>() / u32::try_from(n.max(1)).unwrap_or(1);
    let p99 = percentile(&run.times, 0.99);
    let expect_similar = holds.min(VECTOR_LIMIT as u64) as usize;
    let short = run.similar.iter().filter(|&&s| s < expect_similar).count();
    println!("{label} ({holds} rows): {n} queries");
    println!(
        "  p50 {:.2} ms, p99 {:.2} ms, mean {:.2} ms, max {:.2} ms; {:.0} queries/s (one at a time)",
        ms(percentile(&run.times, 0.5)),
        ms(p99),
        ms(mean_t),
        ms(run.times.last().copied().unwrap_or_default()),
        n as f64 / run.total.as_secs_f64().max(f64::EPSILON)
    );
    println!(
        "  p99 target < {} ms: {}",
        TARGET_P99.as_millis(),
        if p99 < TARGET_P99 { "met" } else { "NOT met" }
    );
    println!(
        "  candidates: {:.2} on average (min {}, max {}); vector hits {:.2} (min {}), recent {:.2} (min {}); {short} queries with fewer than {expect_similar} vector hits",
        mean(&run.merged),
        run.merged.iter().min().copied().unwrap_or(0),
        run.merged.iter().max().copied().unwrap_or(0),
        mean(&run.similar),
        run.similar.iter().min().copied().unwrap_or(0),
        mean(&run.recent),
        run.recent.iter().min().copied().unwrap_or(0),
    );
}

/// What the two passes of `Diary::similar` do on their own, for a sample
/// of queries: how many rows the HNSW pass returns (short means the exact
/// fallback runs), its plan, and its recall@50 against the exact scan.
/// The SQL is the approx/exact pair of `postgres/diary.rs`.
async fn diagnose(
    client: &mut Client,
    agent: &AgentId,
    queries: &[Vec<f32>],
) -> anyhow::Result<()> {
    const APPROX: &str = "WITH nearest AS MATERIALIZED (
            SELECT id, embedding <=> $2 AS distance FROM agent_diary
            WHERE agent_id = $1 AND embedding IS NOT NULL
              AND (ttl_until IS NULL OR ttl_until > $3)
            ORDER BY embedding <=> $2 LIMIT $4)
        SELECT id FROM nearest ORDER BY distance + 0";
    const EXACT: &str = "SELECT id FROM (SELECT id, embedding <=> $2 AS distance
            FROM agent_diary WHERE agent_id = $1 AND embedding IS NOT NULL
              AND (ttl_until IS NULL OR ttl_until > $3)) live
        ORDER BY distance + 0 LIMIT $4";
    let now = Utc::now();
    let limit = VECTOR_LIMIT as i64;
    let (mut short, mut found, mut hits, mut exact_n) = (0, 0, 0, 0);
    let mut approx_times = Vec::new();
    let mut plan = String::new();
    for (i, q) in queries.iter().enumerate() {
        let v = Vector::from(q.clone());
        let params: [&(dyn ToSql + Sync); 4] = [&agent.as_uuid(), &v, &now, &limit];
        let tx = client.transaction().await?;
        tx.batch_execute(
            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),
                    set_config('hnsw.ef_search', '50', true),
                    set_config('plan_cache_mode', 'force_custom_plan', true)",
        )
        .await?;
        if i == 0 {
            let rows = tx.query(&format!("EXPLAIN {APPROX}"), &params).await?;
            plan = rows
                .iter()
                .map(|r| r.get::<_, String>(0))
                .filter(|l| l.contains("Scan") || l.contains("Sort  "))
                .map(|l| {
                    // The node alone: no costs, no vector literal.
                    let node = l.split("  (cost").next().unwrap_or(&l);
                    node.trim().trim_start_matches("-> ").to_owned()
                })
                .collect::<Vec<_>>()
                .join(" / ");
        }
        let started = Instant::now();
        let approx = tx.query(APPROX, &params).await?;
        approx_times.push(started.elapsed());
        tx.commit().await?;
        if approx.len() < VECTOR_LIMIT {
            short += 1;
        }
        found += approx.len();
        let exact = client.query(EXACT, &params).await?;
        exact_n += exact.len();
        let exact: HashSet<uuid::Uuid> = exact.iter().map(|r| r.get(0)).collect();
        hits += approx
            .iter()
            .filter(|r| exact.contains(&r.get::<_, uuid::Uuid>(0)))
            .count();
    }
    approx_times.sort_unstable();
    let n = queries.len().max(1);
    println!(
        "  HNSW pass alone over {} queries: {:.2} rows on average, {short} short of {VECTOR_LIMIT} (those pay the exact fallback); p50 {:.2} ms, p99 {:.2} ms; recall@{VECTOR_LIMIT} vs the exact scan {:.3}",
        queries.len(),
        found as f64 / n as f64,
        ms(percentile(&approx_times, 0.5)),
        ms(percentile(&approx_times, 0.99)),
        hits as f64 / exact_n.max(1) as f64
    );
    println!("  plan: {plan}");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = parse_args()?;
    let admin = crewlet_test_support::services::postgres_dsn();
    println!(
        "prefetch candidate selection: {} diary rows, {} agents; big agent {} rows, small agent {} rows; dim {DIM}, {} topics",
        a.diary_rows, a.agents, a.agent_rows, a.small_rows, a.topics
    );
    // A throw-away database, or the kept one.
    let mut fresh = None;
    let dsn = match &a.keep_db {
        Some(name) => {
            let client = connect(&admin).await?;
            let exists = client
                .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[name])
                .await?
                .is_some();
            if !exists {
                client
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .await?;
            }
            println!("database {name} (kept; drop it with DROP DATABASE {name})");
            with_database(&admin, name)
        }
        None => {
            let db = FreshDatabase::create(&admin).await;
            let dsn = db.dsn.clone();
            fresh = Some(db);
            dsn
        }
    };
    let db = Database::connect(&dsn).await?;
    // A kept database made by an older build is upgraded here: the time of
    // a migration over a full diary is a figure worth having.
    let started = Instant::now();
    let migrated = Migrator::new(
        db.clone(),
        MigrationOptions {
            embedding_dim: DIM as u32,
        },
    )
    .run()
    .await?;
    if !migrated.applied.is_empty() {
        println!(
            "migrations {} applied in {:.1} s",
            migrated.applied.join(", "),
            started.elapsed().as_secs_f64()
        );
    }
    let corpus = Corpus::new(a.topics, a.agents);
    prepare(&dsn, &a, &corpus).await?;

    let stores = MemoryStores::postgres(db.clone()).await?;
    let mut rng = Rng::new(SEED ^ 2);
    let total = a.warmup + a.queries;
    for (label, agent, holds) in [
        ("big agent", 0u64, a.agent_rows),
        ("small agent", 1, a.small_rows),
    ] {
        let queries: Vec<Vec<f32>> = (0..total).map(|_| corpus.sample(agent, &mut rng)).collect();
        let id = agent_id(agent);
        let run = measure(stores.diary.as_ref(), &id, &queries, a.warmup).await?;
        report(label, holds, &run);
        let mut client = connect(&dsn).await?;
        let sample = &queries[a.warmup..(a.warmup + 50).min(total)];
        diagnose(&mut client, &id, sample).await?;
    }
    drop(db);
    drop(fresh);
    Ok(())
}
