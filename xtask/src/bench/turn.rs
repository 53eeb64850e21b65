//! `cargo xtask bench turn`: turns/s, CPU time per turn and memory of the
//! turn engine, with an in-process zero-latency model (engine overhead) and
//! with the fake OpenAI server over loopback HTTP.
//!
//! The work is done by `crates/crewlet-turn/examples/turn_bench.rs` (run in
//! release mode) so xtask stays free of the engine's dependencies.

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Turns per model (after a warm-up); RSS is sampled every tenth.
    #[arg(long, default_value_t = 10_000)]
    pub turns: usize,
    /// 1 000 turns per model, for a smoke run.
    #[arg(long)]
    pub quick: bool,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-turn", None, "turn_bench");
    if args.quick {
        cargo.arg("--quick");
    } else {
        cargo.args(["--turns", &args.turns.to_string()]);
    }
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the turn bench failed")
}
