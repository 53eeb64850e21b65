//! `cargo xtask bench quotas`: many seats against a fake provider that
//! enforces its own request rate (429 + Retry-After), through the guarded
//! provider with the memory and the PostgreSQL quota limiters: 429s seen
//! (target 0), failed calls, and the rate achieved against the cap (target
//! within 5%). The work is done by
//! `crates/crewlet-llm/examples/quota_bench.rs` (release mode).

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seats calling at once.
    #[arg(long, default_value_t = 100)]
    pub seats: u64,
    /// Requests the fake provider allows per window (and the `rpm` the limiter schedules).
    #[arg(long, default_value_t = 60)]
    pub rpm: u64,
    /// The window, in seconds: 60 is a real minute; less compresses the clock.
    #[arg(long, default_value_t = 60)]
    pub window_secs: u64,
    /// Windows measured per limiter.
    #[arg(long, default_value_t = 2)]
    pub windows: u64,
    /// Connection pools sharing the PostgreSQL limiter (as that many processes would).
    #[arg(long, default_value_t = 2)]
    pub processes: u64,
    /// Limiters to run, comma-separated: memory, postgres, none (no quota: 429s and their reset waits only).
    #[arg(long, default_value = "memory,postgres")]
    pub limiters: String,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-llm", None, "quota_bench");
    cargo.args([
        "--seats",
        &args.seats.to_string(),
        "--rpm",
        &args.rpm.to_string(),
        "--window-secs",
        &args.window_secs.to_string(),
        "--windows",
        &args.windows.to_string(),
        "--processes",
        &args.processes.to_string(),
        "--limiters",
        &args.limiters,
    ]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the quotas bench failed")
}
