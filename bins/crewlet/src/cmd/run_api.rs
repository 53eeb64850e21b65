//! `crewlet run api [config] [--host H] [--port P] [--debug]`: the
//! standalone API process (webhook receiver, reads, config). The port
//! defaults to 8000 and `api.port` is never read: that is the engine's
//! embedded API.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use crewlet_api::standalone;

#[derive(Debug, clap::Subcommand)]
pub enum RunCommand {
    /// Run the API on its own (webhooks, reads, config), talking to the
    /// engine through the queue and the database.
    Api(Args),
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The Tier A bootstrap file (config.yaml).
    pub config: Option<PathBuf>,
    /// Address to listen on (default: `api.host`).
    #[arg(long)]
    pub host: Option<String>,
    /// Port to listen on; `api.port` (the engine's embedded API) is not read.
    #[arg(long, default_value_t = standalone::DEFAULT_PORT)]
    pub port: u16,
    /// DEBUG logs.
    #[arg(long)]
    pub debug: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    standalone::run_blocking(standalone::Options {
        config: args.config,
        host: args.host,
        port: args.port,
        debug: args.debug,
    })?;
    Ok(ExitCode::SUCCESS)
}
