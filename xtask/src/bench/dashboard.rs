//! `cargo xtask bench dashboard`: the dashboard's page weight, the
//! `/stream/snapshot` latency at 1,000 seats and the `WS /ws/stream`
//! fan-out to 50 clients at 10,000 events/s (the `stream_bench` example of
//! `crewlet-api`, in release); then the time to first render of Mission
//! control with 1,000 seats and 1,000,000 stored events in headless
//! Chromium (the `render_bench` example: needs PostgreSQL and the browser
//! service).

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
    /// Stored events of the render bench.
    #[arg(long, default_value_t = 1_000_000)]
    pub events: usize,
    /// Cold page loads timed by the render bench.
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    /// Run one part only.
    #[arg(long, value_enum)]
    pub only: Option<Part>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Page weight, snapshot latency, fan-out.
    Stream,
    /// Time to first render in Chromium.
    Render,
}

pub fn run(args: Args) -> Result<()> {
    if args.only != Some(Part::Render) {
        stream(&args)?;
    }
    if args.only != Some(Part::Stream) {
        render(&args)?;
    }
    Ok(())
}

fn render(args: &Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-api", None, "render_bench");
    cargo.args([
        "--seats",
        &args.seats.to_string(),
        "--events",
        &args.events.to_string(),
        "--runs",
        &args.runs.to_string(),
    ]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the dashboard render bench failed")
}

fn stream(args: &Args) -> Result<()> {
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
