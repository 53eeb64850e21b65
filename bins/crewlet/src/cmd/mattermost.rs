//! `crewlet mattermost provision COMPANY` creates or repairs the seats'
//! bots, their team and channel memberships and their tokens (minted into
//! the env file); `crewlet mattermost doctor COMPANY` checks an install and
//! changes nothing. `${VAR}`s are read from the env file first, then from
//! the process environment. Exit codes: 0 all good, 1 a seat failed (or
//! the doctor found a problem), 2 anything else (a refused preflight
//! included).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use crewlet_integrations::mattermost::doctor::diagnose;
use crewlet_integrations::mattermost::provision::{self, ADMIN_TOKEN_VAR, Options, admin_client};

use super::provisioning::{Out, Secret, admin_token, exit_code, load, runtime};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: MattermostCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum MattermostCommand {
    /// Create or repair every seat's bot, its team and channel memberships
    /// and its token (minted into the seat's `${VAR}` in the env file).
    Provision(ProvisionArgs),
    /// Check the server, its SiteURL, a browser's websocket and every
    /// seat's bot, token, memberships and websocket; changes nothing.
    Doctor(DoctorArgs),
}

#[derive(Debug, clap::Args)]
pub struct ProvisionArgs {
    /// The company file.
    pub company: PathBuf,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Only these seats (comma separated handles).
    #[arg(long, value_delimiter = ',', value_name = "HANDLES")]
    pub handles: Vec<String>,
    /// Disable these seats' bots and revoke their tokens.
    #[arg(long, value_delimiter = ',', value_name = "HANDLES")]
    pub decommission: Vec<String>,
    /// The env file minted tokens are written to.
    #[arg(long, default_value = ".env", value_name = "PATH")]
    pub env_file: PathBuf,
    /// A system admin's token (never read from the company file); default:
    /// MATTERMOST_ADMIN_TOKEN from the environment, then from the env file.
    #[arg(long, env = ADMIN_TOKEN_VAR, hide_env_values = true, value_name = "TOKEN")]
    pub admin_token: Option<Secret>,
    /// Print `export VAR=value` for each minted token on stdout (the rest
    /// of the output then goes to stderr).
    #[arg(long)]
    pub print: bool,
}

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The company file.
    pub company: PathBuf,
    /// The env file the seats' `${VAR}`s are read from first.
    #[arg(long, default_value = ".env", value_name = "PATH")]
    pub env_file: PathBuf,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let runtime = runtime()?;
    match args.cmd {
        MattermostCommand::Provision(a) => runtime.block_on(provision(a)),
        MattermostCommand::Doctor(a) => runtime.block_on(doctor(a)),
    }
}

async fn provision(args: ProvisionArgs) -> Result<ExitCode> {
    let (company, mut file, env) = load(&args.company, &args.env_file)?;
    let admin_token = admin_token(args.admin_token, &file, ADMIN_TOKEN_VAR);
    let admin = admin_client(&company, &admin_token, &env)?;
    let options = Options {
        handles: args.handles,
        decommission: args.decommission,
    };
    let out = Out::new(args.print);
    let plan = provision::plan(&company, &admin, &options, &env).await?;
    out.plan(&plan);
    if args.dry_run {
        return Ok(out.dry_run(plan.fails()));
    }
    if plan.changes() > 0 {
        out.say("\napplying:");
    }
    let report = provision::apply(&plan, &admin, &mut file, &mut |who: &str, what: &str| {
        out.step(who, what)
    })
    .await;
    let failed = report.failed();
    Ok(out.finish(&report, failed, &report.minted, &file, args.print))
}

async fn doctor(args: DoctorArgs) -> Result<ExitCode> {
    let (company, _, env) = load(&args.company, &args.env_file)?;
    let report = diagnose(&company, &env).await;
    println!("{report}");
    Ok(exit_code(!report.ok()))
}
