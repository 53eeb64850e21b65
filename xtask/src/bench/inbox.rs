//! `cargo xtask bench inbox`: inbox batching under a burst of 1,000
//! comments over 50 conversations into one busy seat (the `burst_bench`
//! example of `crewlet-engine`, in release): turns run per conversation,
//! time to drain, memory.

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Comments in the burst.
    #[arg(long, default_value_t = 1000)]
    pub messages: usize,
    /// Conversations (issues) they are spread over, interleaved.
    #[arg(long, default_value_t = 50)]
    pub conversations: usize,
    /// The fake model's time per call, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pub model_ms: u64,
    /// `notification_coalesce_window_seconds`.
    #[arg(long, default_value_t = 0.0)]
    pub window: f64,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-engine", None, "burst_bench");
    cargo.args([
        "--messages",
        &args.messages.to_string(),
        "--conversations",
        &args.conversations.to_string(),
        "--model-ms",
        &args.model_ms.to_string(),
        "--window",
        &args.window.to_string(),
    ]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the inbox bench failed")
}
