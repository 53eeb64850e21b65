//! `cargo xtask bench sandbox`: the local code sandbox (bubblewrap +
//! cgroups): start to first command (p50/p99) and concurrent boxes on this
//! machine (wall time, failures, memory). The work is done by
//! `crates/crewlet-sandbox/examples/sandbox_bench.rs` in release mode.

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Boxes made one at a time for the start-to-first-command figure.
    #[arg(long, default_value_t = 100)]
    pub runs: usize,
    /// Boxes at once for the concurrency figure.
    #[arg(long, default_value_t = 20)]
    pub concurrent: usize,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-sandbox", None, "sandbox_bench");
    cargo.args([
        "--runs",
        &args.runs.to_string(),
        "--concurrent",
        &args.concurrent.to_string(),
    ]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the sandbox bench failed")
}
