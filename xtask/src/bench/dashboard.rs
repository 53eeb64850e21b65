//! `cargo xtask bench dashboard`: the dashboard's page weight, the
//! `/stream/snapshot` latency at 1,000 seats and the `WS /ws/stream`
//! fan-out to 50 clients at 10,000 events/s (the `stream_bench` example of
//! `crewlet-api`, in release).

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seats of the generated company.
    #[arg(long, default_value_t = 1000)]
    pub seats: usize,
    /// Snapshot requests timed.
    #[arg(long, default_value_t = 500)]
    pub requests: usize,
    /// Sockets of the fan-out.
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
    /// Events per second published during the fan-out.
    #[arg(long, default_value_t = 10_000)]
    pub rate: usize,
    /// Length of the fan-out.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-api", None, "stream_bench");
    cargo.args([
        "--seats",
        &args.seats.to_string(),
        "--requests",
        &args.requests.to_string(),
        "--clients",
        &args.clients.to_string(),
        "--rate",
        &args.rate.to_string(),
        "--seconds",
        &args.seconds.to_string(),
    ]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the dashboard bench failed")
}
