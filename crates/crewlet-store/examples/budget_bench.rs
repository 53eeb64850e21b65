//! `cargo xtask bench budgets`: reserve-then-settle against one capped
//! budget, in memory and on the PostgreSQL of `cargo xtask services up` (a
//! fresh database). N calls start at once from S seats; each holds an
//! upper bound of its cost, "spends" part of it, and settles. Prints the
//! overspend (what was charged past the cap: must be 0), the calls served
//! and refused, the reservations per second and the p50/p99 of one
//! reserve-plus-settle. This is the ledger alone; the turn engine does not
//! reserve yet.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use crewlet_core::AgentId;
use crewlet_store::{
    BudgetCharge, Database, MemoryTokenLedger, MigrationOptions, Migrator, PostgresTokenLedger,
    ReserveOutcome, TokenLedger,
};
use crewlet_test_support::database::FreshDatabase;

struct Args {
    calls: u64,
    seats: u64,
    hold: u64,
    cap: u64,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        calls: 1000,
        seats: 100,
        hold: 4000,
        cap: 1_000_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value: u64 = match it.next().map(|v| v.parse()) {
            Some(Ok(v)) => v,
            _ => bail!("{flag} needs a number"),
        };
        match flag.as_str() {
            "--calls" => a.calls = value,
            "--seats" => a.seats = value.max(1),
            "--hold" => a.hold = value,
            "--cap" => a.cap = value,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(a)
}

async fn run(name: &str, ledger: Arc<dyn TokenLedger>, a: &Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..a.calls)
        .map(|i| {
            let ledger = Arc::clone(&ledger);
            let (seats, hold, cap) = (a.seats, a.hold, a.cap);
            tokio::spawn(async move {
                let handle = format!("s{}", i % seats);
                let charge =
                    BudgetCharge::new(AgentId::for_seat("Bench", &handle), &handle, hold, cap, 0);
                let t = Instant::now();
                let spent = match ledger.reserve(&charge).await? {
                    ReserveOutcome::Reserved(id) => {
                        // What the call really cost: 40-100% of its bound.
                        let spent = hold * (40 + (i * 7) % 61) / 100;
                        ledger.settle(id, spent).await?;
                        Some(spent)
                    }
                    ReserveOutcome::Refused(_) => None,
                };
                anyhow::Ok((spent, t.elapsed()))
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(tasks.len());
    let (mut spent, mut served, mut refused) = (0u64, 0u64, 0u64);
    for t in tasks {
        let (s, took) = t.await??;
        latencies.push(took);
        match s {
            Some(s) => {
                spent += s;
                served += 1;
            }
            None => refused += 1,
        }
    }
    let wall = started.elapsed();
    let org = ledger
        .budgets()
        .await?
        .into_iter()
        .find(|r| r.scope == "org")
        .map(|r| (r.used_tokens, r.reserved_tokens))
        .unwrap_or_default();
    latencies.sort_unstable();
    let pct = |p: usize| {
        latencies
            .get(latencies.len() * p / 100)
            .copied()
            .unwrap_or(Duration::ZERO)
    };
    println!(
        "| {name} | {} | {} | {served} | {refused} | {} | {} | {} | {:.0} | {:.1} ms | {:.1} ms |",
        a.calls,
        a.cap,
        org.0,
        org.0.saturating_sub(a.cap),
        org.1,
        a.calls as f64 / wall.as_secs_f64(),
        pct(50).as_secs_f64() * 1e3,
        pct(99).as_secs_f64() * 1e3,
    );
    if org.0 != spent {
        bail!("the ledger holds {} but the callers spent {spent}", org.0);
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let a = args()?;
    println!(
        "{} calls from {} seats, each holding {} tokens, against an org cap of {}",
        a.calls, a.seats, a.hold, a.cap
    );
    println!(
        "| ledger | calls | cap | served | refused | charged | overspend | still held | calls/s | p50 reserve+settle | p99 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    run("memory", Arc::new(MemoryTokenLedger::new()), &a).await?;
    let admin = std::env::var("CREWLET_BENCH_DATABASE_URL")
        .unwrap_or_else(|_| crewlet_test_support::services::postgres_dsn());
    if crewlet_test_support::services::require_postgres().is_none() {
        bail!("PostgreSQL is not reachable; start it with `cargo xtask services up`");
    }
    let fresh = FreshDatabase::create(&admin).await;
    let db = Database::connect(&fresh.dsn).await?;
    Migrator::new(db.clone(), MigrationOptions::default())
        .run()
        .await?;
    run("postgres", Arc::new(PostgresTokenLedger::new(db)), &a).await
}
