//! `crewlet run [config] [--import-company FILE] [--api-port N] [--api-host H]
//! [--tool-skills DIR] [--roles ingress,seats,duties] [--offline] [--debug]`: the engine, with the embedded API when `api.port > 0` or
//! `--api-port` is given. `crewlet run api ...` is the standalone API
//! (`run_api.rs`). Everything happens in `crewlet_engine::run`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use crewlet_config::Bootstrap;
use crewlet_engine::RunOptions;

use super::run_api::{self, RunCommand};

/// `crewlet run`: the engine, or `run api`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RunArgs {
    #[command(subcommand)]
    pub cmd: Option<RunCommand>,
    #[command(flatten)]
    pub engine: Args,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The Tier A bootstrap file (config.yaml); `CREWLET_*` variables
    /// override it. Without one: memory queue and stores, no embedded API.
    pub config: Option<PathBuf>,
    /// Validate this company file and make it the active revision before
    /// starting (otherwise: the active revision, or `company.yaml` beside
    /// the config file when none is active).
    #[arg(long, value_name = "FILE")]
    pub import_company: Option<PathBuf>,
    /// Serve the API inside the engine on this port (over `api.port`).
    #[arg(long, value_name = "N")]
    pub api_port: Option<u16>,
    /// Address of the embedded API (over `api.host`).
    #[arg(long, value_name = "H")]
    pub api_host: Option<String>,
    /// DEBUG logs for crewlet's own components.
    #[arg(long)]
    pub debug: bool,
    /// Read the tool skills from this folder of Markdown files (e.g.
    /// `examples/tool-skills`) instead of the knowledge backend.
    #[arg(long, value_name = "DIR")]
    pub tool_skills: Option<PathBuf>,
    /// What this node of a fleet does: a comma list of `ingress` (the API),
    /// `seats` (runs agent seats), `duties` (scheduler, maintenance);
    /// default `node.roles` of the config, else all three.
    #[arg(long, value_name = "ROLES")]
    pub roles: Option<String>,
    /// Never download: a local model the company names and this machine
    /// does not have makes its provider unavailable, and the log says which
    /// command fetches it (also `CREWLET_OFFLINE=1`).
    #[arg(long)]
    pub offline: bool,
}

pub fn dispatch(args: RunArgs) -> Result<ExitCode> {
    match args.cmd {
        Some(RunCommand::Api(a)) => run_api::run(a),
        None => run(args.engine),
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let roles = args
        .roles
        .as_deref()
        .map(crewlet_engine::fleet::parse_roles)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--roles: {e}"))?;
    let bootstrap = Bootstrap::load(args.config.as_deref())?;
    let telemetry = crewlet_engine::init_telemetry(&bootstrap, args.debug);
    let options = RunOptions {
        config_path: args.config,
        import_company: args.import_company,
        api_port: args.api_port,
        api_host: args.api_host,
        debug: args.debug,
        tool_skills_dir: args.tool_skills,
        roles,
        offline: args.offline,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(crewlet_engine::run::run(bootstrap, options));
    drop(runtime);
    telemetry.shutdown();
    result?;
    Ok(ExitCode::SUCCESS)
}
