//! `crewlet-api [config] [--host H] [--port P] [--debug]`: the standalone
//! API process (the same as `crewlet run api`). `--openapi` prints the
//! OpenAPI document and exits. No logic lives here.

use std::path::PathBuf;

use clap::Parser;
use crewlet_api::standalone;

/// The Crewlet API on its own: webhook receiver, reads and config.
#[derive(Debug, Parser)]
#[command(name = "crewlet-api", version, about)]
struct Cli {
    /// The Tier A bootstrap file (config.yaml).
    config: Option<PathBuf>,
    /// Address to listen on (default: `api.host`).
    #[arg(long)]
    host: Option<String>,
    /// Port to listen on (`api.port` is the engine's embedded API and is not read).
    #[arg(long, default_value_t = standalone::DEFAULT_PORT)]
    port: u16,
    /// DEBUG logs.
    #[arg(long)]
    debug: bool,
    /// Print the OpenAPI document and exit.
    #[arg(long)]
    openapi: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.openapi {
        print!("{}", crewlet_api::openapi::json());
        return Ok(());
    }
    standalone::run_blocking(standalone::Options {
        config: cli.config,
        host: cli.host,
        port: cli.port,
        debug: cli.debug,
    })?;
    Ok(())
}
