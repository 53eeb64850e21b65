//! `crewlet mattermost provision COMPANY` creates or repairs the seats'
//! bots, their team and channel memberships and their tokens (minted into
//! the env file); `crewlet mattermost doctor COMPANY` checks an install and
//! changes nothing. `${VAR}`s are read from the env file first, then from
//! the process environment. Exit codes: 0 all good, 1 a seat failed (or
//! the doctor found a problem), 2 anything else (a refused preflight
//! included).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use crewlet_config::Company;
use crewlet_integrations::mattermost::doctor::diagnose;
use crewlet_integrations::mattermost::envfile::EnvFile;
use crewlet_integrations::mattermost::provision::{
    self, ADMIN_TOKEN_VAR, Action, Options, admin_client,
};

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

/// A credential that prints as `***`.
#[derive(Clone)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match args.cmd {
        MattermostCommand::Provision(a) => runtime.block_on(provision(a)),
        MattermostCommand::Doctor(a) => runtime.block_on(doctor(a)),
    }
}

/// The company and a `${VAR}` lookup: the env file, then the environment.
fn load(
    company: &Path,
    env_file: &Path,
) -> Result<(Company, EnvFile, impl Fn(&str) -> Option<String>)> {
    let company = Company::load(company)?;
    let file =
        EnvFile::load(env_file).with_context(|| format!("cannot read {}", env_file.display()))?;
    let values = file.values();
    let lookup = move |var: &str| values.get(var).cloned().or_else(|| std::env::var(var).ok());
    Ok((company, file, lookup))
}

async fn provision(args: ProvisionArgs) -> Result<ExitCode> {
    let (company, mut file, env) = load(&args.company, &args.env_file)?;
    let admin_token = args
        .admin_token
        .map(|s| s.0)
        .or_else(|| file.get(ADMIN_TOKEN_VAR))
        .unwrap_or_default();
    let admin = admin_client(&company, &admin_token, &env)?;
    let options = Options {
        handles: args.handles,
        decommission: args.decommission,
    };
    // With --print, stdout carries only the export lines.
    let to_stderr = args.print;
    let say = |text: &str| {
        if to_stderr {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    };
    let plan = provision::plan(&company, &admin, &options, &env).await?;
    say(&format!("plan:\n{plan}"));
    if args.dry_run {
        say("dry run: nothing was changed");
        let fails = plan
            .seats
            .iter()
            .any(|s| matches!(s.action, Action::Fail(_)));
        return Ok(if fails {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        });
    }
    if plan.changes() > 0 {
        say("\napplying:");
    }
    let report = provision::apply(&plan, &admin, &mut file, &mut |handle: &str, what: &str| {
        say(&format!("  {handle}: {what}"))
    })
    .await;
    say(&format!("\nreport:\n{report}"));
    if !report.minted.is_empty() {
        say(&format!(
            "tokens written to {}; restart `crewlet run` so the engine reads them",
            file.path().display()
        ));
    }
    if args.print {
        for minted in &report.minted {
            println!("export {}={}", minted.var, minted.value());
        }
    }
    Ok(if report.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn doctor(args: DoctorArgs) -> Result<ExitCode> {
    let (company, _, env) = load(&args.company, &args.env_file)?;
    let report = diagnose(&company, &env).await;
    println!("{report}");
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
