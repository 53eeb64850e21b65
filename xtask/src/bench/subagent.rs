//! `cargo xtask bench subagent`: the cost of a sub-agent turn next to a
//! plain one (p50 / p99 wall time per turn), with an in-process model.
//!
//! The work is done by `crates/crewlet-turn/examples/subagent_bench.rs`
//! (run in release mode) so xtask stays free of the engine's dependencies.

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Turns per shape (after a warm-up of a tenth as many).
    #[arg(long, default_value_t = 2_000)]
    pub runs: usize,
    /// 200 turns per shape, for a smoke run.
    #[arg(long)]
    pub quick: bool,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-turn", None, "subagent_bench");
    if args.quick {
        cargo.arg("--quick");
    } else {
        cargo.args(["--runs", &args.runs.to_string()]);
    }
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the subagent bench failed")
}
