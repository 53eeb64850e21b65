//! `cargo xtask bench budgets`: reserve-then-settle against one capped
//! budget (memory and PostgreSQL): overspend, calls served, calls/s and
//! latency. The work is done by
//! `crates/crewlet-store/examples/budget_bench.rs` (release mode).

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Calls started at once.
    #[arg(long, default_value_t = 1000)]
    pub calls: u64,
    /// Seats the calls come from.
    #[arg(long, default_value_t = 100)]
    pub seats: u64,
    /// Tokens each call holds (its cost bound; it spends 40-100% of it).
    #[arg(long, default_value_t = 4000)]
    pub hold: u64,
    /// The org cap.
    #[arg(long, default_value_t = 1_000_000)]
    pub cap: u64,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-store", None, "budget_bench");
    cargo.args([
        "--calls",
        &args.calls.to_string(),
        "--seats",
        &args.seats.to_string(),
        "--hold",
        &args.hold.to_string(),
        "--cap",
        &args.cap.to_string(),
    ]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the budgets bench failed")
}
