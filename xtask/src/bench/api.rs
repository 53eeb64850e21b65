//! `cargo xtask bench api`: webhook ingest. Runs the `api_bench` example of
//! `crewlet-api` in release: GitHub-signed deliveries per second and p50/p99
//! latency from a bounded load generator (N keep-alive connections on
//! loopback), against the API embedded on the memory broker and, when
//! `cargo xtask services up` has started them, the standalone API on
//! Pulsar + PostgreSQL. Prints a markdown table.

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Timed requests per target.
    #[arg(long, default_value_t = 50_000)]
    pub requests: usize,
    /// Concurrent connections.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Untimed requests first.
    #[arg(long, default_value_t = 2_000)]
    pub warmup: usize,
    /// `memory`, `standalone` (Pulsar + PostgreSQL) or `all`.
    #[arg(long, default_value = "all")]
    pub target: String,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-api", None, "api_bench");
    cargo.args([
        "--requests",
        &args.requests.to_string(),
        "--connections",
        &args.connections.to_string(),
        "--warmup",
        &args.warmup.to_string(),
        "--target",
        &args.target,
    ]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the api bench failed")
}
