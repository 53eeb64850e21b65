//! `cargo xtask bench mattermost`: the Mattermost seat sockets at fleet
//! scale against the fake server (the `mattermost_bench` example of
//! `crewlet-engine`, in release): connect time, memory per seat, live
//! publish time, and a reconnect storm after a server restart.

use anyhow::{Context, Result};

use crate::cmd;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seats, each with its own bot and websocket.
    #[arg(long, default_value_t = 100)]
    pub seats: usize,
}

pub fn run(args: Args) -> Result<()> {
    let mut cargo = super::release_example("crewlet-engine", None, "mattermost_bench");
    cargo.args(["--seats", &args.seats.to_string()]);
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the mattermost bench failed")
}
