//! `cargo xtask bench fleet`: a fleet of `crewlet run` processes on Pulsar
//! and PostgreSQL: boot to every seat placed, RSS per node, turns/s across
//! the fleet against one node, failover after SIGKILL (p50/p99). The work
//! is done by `bins/crewlet/examples/fleet_bench.rs` (release), which runs
//! the release `crewlet` binary built first.

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Agent seats in the company.
    #[arg(long, default_value_t = 10_000)]
    pub seats: usize,
    /// Engine nodes.
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// Tasks posted for the throughput figures (fleet, then one node).
    #[arg(long, default_value_t = 300)]
    pub turns: usize,
    /// SIGKILLs timed.
    #[arg(long, default_value_t = 10)]
    pub failovers: usize,
    /// Lease TTL of the nodes, seconds.
    #[arg(long, default_value_t = 6)]
    pub ttl: u32,
    /// Heartbeat of the nodes, seconds.
    #[arg(long, default_value_t = 1)]
    pub heartbeat: u32,
    /// The fake model's latency per call, milliseconds.
    #[arg(long, default_value_t = 100)]
    pub model_ms: u64,
}

pub fn run(args: Args) -> Result<()> {
    super::cargo_build_release("crewlet")?;
    let binary = super::release_binary("crewlet");
    let mut cargo = super::release_example("crewlet", None, "fleet_bench");
    cargo.args([
        "--binary".to_owned(),
        binary.display().to_string(),
        "--seats".to_owned(),
        args.seats.to_string(),
        "--nodes".to_owned(),
        args.nodes.to_string(),
        "--turns".to_owned(),
        args.turns.to_string(),
        "--failovers".to_owned(),
        args.failovers.to_string(),
        "--ttl".to_owned(),
        args.ttl.to_string(),
        "--heartbeat".to_owned(),
        args.heartbeat.to_string(),
        "--model-ms".to_owned(),
        args.model_ms.to_string(),
    ]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the fleet bench failed")
}
