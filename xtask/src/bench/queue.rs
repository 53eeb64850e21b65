//! `cargo xtask bench queue`: publish -> handler -> ack throughput and
//! publish latency of the memory broker and of Pulsar on loopback (the
//! Pulsar of `cargo xtask services up`).
//!
//! The work is done by `crates/crewlet-queue/examples/queue_bench.rs` (run in
//! release mode) so xtask stays free of the queue's dependencies. First it
//! prints the event envelope's JSON round trip
//! (`crates/crewlet-core/examples/envelope_bench.rs`), the work every
//! message on the broker costs on both ends.

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Memory,
    Pulsar,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this backend (default: both).
    #[arg(long, value_enum)]
    pub only: Option<Backend>,
    /// Events per memory-broker run.
    #[arg(long, default_value_t = 2_000_000)]
    pub memory_events: usize,
    /// Events per pipelined Pulsar run (the sequential run uses a twentieth).
    #[arg(long, default_value_t = 50_000)]
    pub pulsar_events: usize,
    /// Broker URL (default: `CREWLET_TEST_PULSAR_URL` or pulsar://127.0.0.1:6650).
    #[arg(long)]
    pub url: Option<String>,
}

pub fn run(args: Args) -> Result<()> {
    let mut envelope = super::release_example("crewlet-core", None, "envelope_bench");
    println!("bench: {}", cmd::describe(&envelope));
    cmd::run(&mut envelope).context("the envelope bench failed")?;
    let mut cargo = super::release_example("crewlet-queue", Some("pulsar"), "queue_bench");
    cargo.args([
        "--memory-events",
        &args.memory_events.to_string(),
        "--pulsar-events",
        &args.pulsar_events.to_string(),
    ]);
    if let Some(only) = args.only {
        cargo.args(["--only", if only == Backend::Memory { "memory" } else { "pulsar" }]);
    }
    if let Some(url) = &args.url {
        cargo.args(["--url", url]);
    }
    super::ceilings::pass_to(&mut cargo);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the queue bench failed")
}
