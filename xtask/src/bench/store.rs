//! `cargo xtask bench store`: event store throughput and token-breakdown
//! latency against the PostgreSQL of `cargo xtask services up`.
//!
//! The work is done by `crates/crewlet-store/examples/store_bench.rs` (run
//! in release mode) so xtask stays free of database dependencies.

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Events stored before timing the token breakdown.
    #[arg(long, default_value_t = 1_000_000)]
    pub events: usize,
    /// Events pushed through the buffered store (and copied raw for the ceiling).
    #[arg(long, default_value_t = 200_000)]
    pub buffered: usize,
    /// Events written one insert at a time through the publish writer.
    #[arg(long, default_value_t = 20_000)]
    pub per_publish: usize,
    /// Small sizes for a smoke run (100k stored, 20k buffered, 2k per publish).
    #[arg(long)]
    pub quick: bool,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-store", None, "store_bench");
    if args.quick {
        cargo.arg("--quick");
    } else {
        cargo.args([
            "--events",
            &args.events.to_string(),
            "--buffered",
            &args.buffered.to_string(),
            "--per-publish",
            &args.per_publish.to_string(),
        ]);
    }
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the store bench failed")
}
