//! `cargo xtask bench live-edit`: time from `PUT /config/roles/{handle}`
//! on the standalone API to `config_revision_applied` from the engine, on
//! Pulsar + PostgreSQL (`cargo xtask services up`), p50/p99. The work is
//! done by `crates/crewlet-engine/examples/live_edit_bench.rs` (release).

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Edits timed (one warm-up edit comes first).
    #[arg(long, default_value_t = 30)]
    pub rounds: usize,
    /// Agent seats in the company.
    #[arg(long, default_value_t = 20)]
    pub seats: usize,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-engine", None, "live_edit_bench");
    cargo.args([
        "--rounds",
        &args.rounds.to_string(),
        "--seats",
        &args.seats.to_string(),
    ]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the live-edit bench failed")
}
