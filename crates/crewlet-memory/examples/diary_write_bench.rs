//! `cargo xtask bench memory` (diary writes section): diary writes per
//! second with embedding by the local all-MiniLM-L6-v2 model, on PostgreSQL
//! and on the in-memory twin. Run in release mode:
//!
//! ```sh
//! cargo run --release -p crewlet-memory --example diary_write_bench -- --writes 512
//! ```
//!
//! Two modes per store, each over its own diary sentences (all different,
//! since an exact duplicate is not written twice):
//! - single: embed one text, then `Diary::write` it, one after the other;
//! - batched: embed 32 texts in one call, then the 32 writes.
//!
//! PostgreSQL is a throw-away database on the server of `cargo xtask
//! services up`, migrated with 384-wide embeddings (dropped at the end).
//! The model comes from `cargo xtask services up` (or `cargo xtask models
//! fetch`); `CREWLET_EMBED_MODEL_DIR` overrides where it is read.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::Utc;
use crewlet_core::AgentId;
use crewlet_embed_local::{LocalEmbedder, LocalEmbedderOptions, default_model_dir};
use crewlet_llm::Embedder;
use crewlet_memory::{Diary, DiaryKind, DiaryWrite, MemoryStores, NewDiaryEntry};
use crewlet_store::{Database, MigrationOptions, Migrator};
use crewlet_test_support::database::FreshDatabase;

const USAGE: &str =
    "diary_write_bench [--writes N] [--batch N] [--threads N] [--only postgres|memory] [--quick]";
const DIM: u32 = 384;

struct Args {
    writes: usize,
    batch: usize,
    threads: usize,
    only: Option<String>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        writes: 512,
        batch: 32,
        threads: 0,
        only: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--quick" {
            a.writes = 128;
            continue;
        }
        let value = it
            .next()
            .with_context(|| format!("{flag} needs a value; {USAGE}"))?;
        let num = |v: &str| v.parse::<usize>().with_context(|| format!("{flag} {v}"));
        match flag.as_str() {
            "--writes" => a.writes = num(&value)?,
            "--batch" => a.batch = num(&value)?.max(1),
            "--threads" => a.threads = num(&value)?,
            "--only" if value == "postgres" || value == "memory" => a.only = Some(value),
            other => bail!("unknown flag or value {other} {value}; {USAGE}"),
        }
    }
    a.writes = a.writes.max(a.batch);
    Ok(a)
}

// ----------------------------------------------------------------- sentences

/// splitmix64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next_u64() % from.len() as u64) as usize]
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

const PEOPLE: &[&str] = &[
    "Maria from finance",
    "The customer at Northwind",
    "Our CTO",
    "Kenji (on call this week)",
    "The new support hire",
    "Priya, the product lead,",
    "The Acme account manager",
    "A contributor on GitHub",
    "The security reviewer",
    "Tom from legal",
    "The design team",
    "Our biggest reseller",
];
const ASKS: &[&str] = &[
    "asked why the nightly export to the warehouse failed",
    "reported that invoices in euros were rounded differently from the ledger",
    "approved moving the billing service to the new cluster",
    "wants the onboarding checklist to mention the staging credentials",
    "noticed the retry queue growing after the API deployment",
    "requested a summary of open incidents",
    "prefers short written updates over calls",
    "flagged a spike in 502 errors on the checkout page",
    "asked for the Q3 churn numbers broken down by plan",
    "complained that the search results ignore archived tickets",
    "confirmed the SSO migration can start",
    "wants weekly digests instead of daily ones",
    "pointed out a typo in the pricing page",
    "needs the data processing agreement signed",
];
const WHEN: &[&str] = &[
    "on Monday",
    "before Friday's review",
    "during the standup",
    "late last night",
    "right after the release",
    "in the quarterly planning",
    "twice this week",
    "while I was drafting the changelog",
];
const OUTCOME: &[&str] = &[
    "I replied with the runbook link and promised a follow-up tomorrow morning.",
    "We agreed to pair on it and I opened a ticket to track it.",
    "The cause was the statement timeout of the export role; raising it fixed the run.",
    "I escalated to the platform team since it touches production data.",
    "Nothing to do yet: they will send the details by email.",
    "I updated the wiki page so the next person does not have to ask.",
    "Next time, check the cron logs first; it was the same issue last month.",
    "They were happy with the workaround for now.",
    "I could not reproduce it; asked for a screenshot and the request id.",
    "It is blocked on the vendor's answer.",
];
const REFS: &[&str] = &["ticket", "incident", "PR", "invoice", "order"];

/// `n` diary-like sentences (one to three clauses, 15 to 45 words), all
/// different: a reference number makes most of them unique and a collision
/// is drawn again.
fn diary_sentences(n: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed);
    let mut seen = HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let who = rng.pick(PEOPLE);
        let asked = rng.pick(ASKS);
        let when = rng.pick(WHEN);
        let mut s = match rng.next_u64() % 3 {
            0 => format!("{who} {asked} {when}"),
            1 => format!("{when}, {} {asked}", who.to_lowercase()),
            _ => format!("{who} {asked}"),
        };
        let s0 = s.remove(0).to_uppercase().to_string();
        s.insert_str(0, &s0);
        let reference = rng.pick(REFS);
        s.push_str(&format!(
            " ({reference} {}-{}).",
            rng.pick(&["OPS", "FIN", "SUP", "ENG"]),
            rng.between(100, 9_999)
        ));
        for _ in 0..rng.between(0, 2) {
            s.push(' ');
            s.push_str(rng.pick(OUTCOME));
        }
        if seen.insert(s.clone()) {
            out.push(s);
        }
    }
    out
}

// ------------------------------------------------------------------- writing

struct Timing {
    writes: usize,
    total: Duration,
    embed: Duration,
    write: Duration,
    duplicates: usize,
}

async fn write_all(
    diary: &dyn Diary,
    embedder: &LocalEmbedder,
    agent: &AgentId,
    texts: &[String],
    batch: usize,
) -> anyhow::Result<Timing> {
    let mut t = Timing {
        writes: 0,
        total: Duration::ZERO,
        embed: Duration::ZERO,
        write: Duration::ZERO,
        duplicates: 0,
    };
    let all = Instant::now();
    for chunk in texts.chunks(batch) {
        let started = Instant::now();
        let vectors = embedder.embed(chunk).await?;
        t.embed += started.elapsed();
        let started = Instant::now();
        for (text, v) in chunk.iter().zip(vectors) {
            let entry = NewDiaryEntry {
                agent_id: *agent,
                kind: DiaryKind::Long,
                content: text.clone(),
                ttl_until: None,
                embedding: Some(v),
            };
            match diary.write(entry, Utc::now()).await? {
                DiaryWrite::Written(_) => t.writes += 1,
                DiaryWrite::Duplicate(_) => t.duplicates += 1,
            }
        }
        t.write += started.elapsed();
    }
    t.total = all.elapsed();
    Ok(t)
}

fn row(store: &str, mode: &str, t: &Timing) {
    let n = (t.writes + t.duplicates).max(1) as f64;
    println!(
        "| {store} | {mode} | {} | {:.1} | {:.2} | {:.2} | {:.2} | {} |",
        t.writes,
        t.writes as f64 / t.total.as_secs_f64().max(f64::EPSILON),
        t.total.as_secs_f64() * 1000.0 / n,
        t.embed.as_secs_f64() * 1000.0 / n,
        t.write.as_secs_f64() * 1000.0 / n,
        t.duplicates
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = parse_args()?;
    let dir = std::env::var_os("CREWLET_EMBED_MODEL_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(default_model_dir, PathBuf::from);
    let options = LocalEmbedderOptions {
        threads: a.threads,
        ..LocalEmbedderOptions::default()
    };
    let embedder = LocalEmbedder::load(&dir, options).with_context(|| {
        format!(
            "cannot load the model from {} (`cargo xtask models fetch`)",
            dir.display()
        )
    })?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    // Four disjoint sets: single and batched, on each store, plus a warm-up.
    let texts = diary_sentences(4 * a.writes + a.batch, 0xd1a7_0001);
    let words: usize = texts.iter().map(|s| s.split_whitespace().count()).sum();
    println!(
        "diary writes with embedding: all-MiniLM-L6-v2 from {}; {} writes per mode, batches of {}; {:.1} words per sentence on average; {cores} cores",
        dir.display(),
        a.writes,
        a.batch,
        words as f64 / texts.len() as f64
    );
    println!("e.g. \"{}\"", texts[0]);
    let (warm, rest) = texts.split_at(a.batch);
    embedder.embed(warm).await?;
    let sets: Vec<&[String]> = rest.chunks(a.writes).collect();
    let agent = AgentId::for_seat("DiaryWriteBench", "writer");

    println!();
    println!(
        "| store | mode | rows written | writes/s | ms per write | of which embedding | of which `Diary::write` | duplicates |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let mut fresh = None;
    for (store, sets) in [("PostgreSQL", &sets[0..2]), ("in-memory twin", &sets[2..4])] {
        let postgres = store == "PostgreSQL";
        match a.only.as_deref() {
            Some("postgres") if !postgres => continue,
            Some("memory") if postgres => continue,
            _ => {}
        }
        let stores = if postgres {
            let db = FreshDatabase::create(&crewlet_test_support::services::postgres_dsn()).await;
            let database = Database::connect(&db.dsn).await?;
            fresh = Some(db);
            Migrator::new(database.clone(), MigrationOptions { embedding_dim: DIM })
                .run()
                .await?;
            MemoryStores::postgres(database).await?
        } else {
            MemoryStores::in_memory_with_embedding_dim(DIM as usize)
        };
        let diary = stores.diary.as_ref();
        let single = write_all(diary, &embedder, &agent, sets[0], 1).await?;
        row(store, "single (embed 1, write 1)", &single);
        let batched = write_all(diary, &embedder, &agent, sets[1], a.batch).await?;
        row(
            store,
            &format!("batched (embed {0}, write {0})", a.batch),
            &batched,
        );
    }
    drop(fresh);
    Ok(())
}
