//! `cargo xtask bench validate-scale`: wall time and peak RSS of validating
//! generated company files far larger than real ones (a manager chain of
//! 4 000, 8 000 and 10 000 seats; 100 000 unknown keys).
//!
//! The work is done by `crates/crewlet-config/examples/validate_scale.rs`
//! (run in release mode), which runs each case in a process of its own and
//! reads its `VmHWM` from `/proc/self/status`.

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seats in the manager chain cases, comma-separated.
    #[arg(long, default_value = "4000,8000,10000")]
    pub seats: String,
    /// Unknown top-level keys in the unknown-keys cases, comma-separated.
    #[arg(long, default_value = "100000")]
    pub keys: String,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-config", None, "validate_scale");
    cargo.args([
        "--seats",
        &args.seats,
        "--keys",
        &args.keys,
    ]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the validate-scale bench failed")
}
