//! `cargo xtask bench api`: webhook ingest. Runs the `api_bench` example of
//! `crewlet-api` in release: GitHub-signed deliveries per second and p50/p99
//! latency from a bounded load generator (N keep-alive connections on
//! loopback), against the API embedded on the memory broker and, when
//! `cargo xtask services up` has started them, the standalone API on
//! Pulsar + PostgreSQL. Prints a markdown table.
//!
//! `--wrk` measures the real binary instead: `crewlet` is built in release
//! mode and run as `crewlet run` (embedded) and `crewlet run api` (Pulsar +
//! PostgreSQL), and `wrk` (Debian package `wrk`) sends pre-signed
//! deliveries, each body different.

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
    /// Measure the release `crewlet` binary with `wrk` instead.
    #[arg(long)]
    pub wrk: bool,
    /// Length of each wrk run.
    #[arg(long, default_value_t = 10)]
    pub wrk_seconds: u64,
    /// Distinct signed deliveries prepared for each wrk run.
    #[arg(long, default_value_t = 300_000)]
    pub wrk_requests: usize,
}

pub fn run(args: Args) -> Result<()> {
    let binary = if args.wrk {
        if std::process::Command::new("wrk")
            .arg("--version")
            .output()
            .is_err()
        {
            anyhow::bail!("bench api --wrk needs wrk: `apt-get install wrk`");
        }
        super::cargo_build_release("crewlet")?;
        Some(super::release_binary("crewlet"))
    } else {
        None
    };
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
    if let Some(binary) = binary {
        cargo
            .arg("--wrk")
            .arg(binary)
            .args(["--wrk-seconds", &args.wrk_seconds.to_string()])
            .args(["--wrk-requests", &args.wrk_requests.to_string()]);
    }
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the api bench failed")
}
