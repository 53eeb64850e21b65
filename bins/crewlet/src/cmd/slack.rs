//! `crewlet slack provision COMPANY --base-url URL`: one Slack app per agent
//! seat whose `integrations.slack` credentials are `${VAR}`s, created or
//! updated through Slack's manifest API, recorded in a ledger, installed
//! with one approval per app (the code is pasted back here), and every
//! secret written into the env file under the company file's own names.
//! Exit codes: 0 all good, 1 a seat failed, 2 anything else.

use std::io::{BufRead as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use crewlet_config::Company;
use crewlet_integrations::slack::{
    Action, EnvStore, Options, SlackClient, default_env_file, default_state_file, provision,
};

use super::provisioning::{exit_code, runtime};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: SlackCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum SlackCommand {
    /// Create or update every seat's Slack app from the company file, write
    /// its signing secret, and install it (one approval per app) to write
    /// its bot token.
    Provision(ProvisionArgs),
}

#[derive(Debug, clap::Args)]
pub struct ProvisionArgs {
    /// The company file.
    pub company: PathBuf,
    /// Public https URL of the Crewlet API: the apps' event URLs are
    /// `{URL}/webhooks/slack/{handle}`, their OAuth redirect
    /// `{URL}/webhooks/slack-oauth`.
    #[arg(long, value_name = "URL")]
    pub base_url: String,
    /// The env file secrets are read from and written to (default: `.env`
    /// next to the company file).
    #[arg(long, value_name = "PATH")]
    pub env_file: Option<PathBuf>,
    /// The ledger of created apps (default: `slack-apps.json` next to the
    /// company file).
    #[arg(long, value_name = "PATH")]
    pub state_file: Option<PathBuf>,
    /// Only these seats (comma separated handles).
    #[arg(long, value_delimiter = ',', value_name = "HANDLES")]
    pub handles: Vec<String>,
    /// Validate every manifest and print what would be done; create nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Create and update apps and write signing secrets, but install none.
    #[arg(long)]
    pub skip_install: bool,
    /// Install again even where a bot token is set (after a scope change).
    #[arg(long, conflicts_with = "skip_install")]
    pub reinstall: bool,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let runtime = runtime()?;
    match args.cmd {
        SlackCommand::Provision(a) => runtime.block_on(provision_cmd(a)),
    }
}

/// Shows the install link on stderr and reads the pasted code from stdin.
fn ask_for_code(handle: &str, url: &str) -> std::result::Result<String, String> {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "\nInstall the Slack app of `{handle}`: open this link, choose Allow, then paste the code shown (or the whole address you landed on):\n  {url}"
    );
    let _ = write!(err, "code for {handle}> ");
    let _ = err.flush();
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) => Err("stdin is closed: run interactively, or use --skip-install".into()),
        Ok(_) => Ok(line),
        Err(e) => Err(format!("cannot read stdin: {e}")),
    }
}

async fn provision_cmd(args: ProvisionArgs) -> Result<ExitCode> {
    let company = Company::load(&args.company)?;
    let env_file = args
        .env_file
        .unwrap_or_else(|| default_env_file(&args.company));
    let state_file = args
        .state_file
        .unwrap_or_else(|| default_state_file(&args.company));
    let mut env = EnvStore::open_with_process_env(&env_file)
        .with_context(|| format!("cannot read {}", env_file.display()))?;
    let api_url = company
        .integrations
        .slack
        .as_ref()
        .map(|s| s.api_url.clone())
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "https://slack.com/api".into());
    let api_url = crewlet_config::interpolate(&api_url, |v| env.get(v))
        .context("integrations.slack.api_url")?;
    let client = SlackClient::new(&api_url)?;
    let mut options = Options::new(&args.base_url, state_file);
    options.handles = args.handles;
    options.dry_run = args.dry_run;
    options.skip_install = args.skip_install;
    options.reinstall = args.reinstall;

    let mut prompt = ask_for_code;
    let report = provision(&company, &client, &mut env, &mut prompt, &options).await?;
    if report.seats.is_empty() {
        println!("no agent seat has integrations.slack: nothing to provision");
        return Ok(ExitCode::SUCCESS);
    }
    println!("\n{report}");
    let changed = report
        .seats
        .iter()
        .any(|s| s.installed || matches!(s.action, Action::Created | Action::Updated));
    if report.dry_run {
        println!("dry run: no app was created or updated");
    } else if changed {
        println!(
            "secrets are in {}, the ledger in {}; invite each bot to its channels and restart `crewlet run`",
            env.path().display(),
            options.state_file.display()
        );
    }
    Ok(exit_code(report.failed()))
}
