//! One module per command. A command returns the process exit code, or an
//! error that is printed and exits with 2.

mod budgets;
mod config;
mod confluence;
mod gitlab;
mod llm;
mod mattermost;
mod migrate;
mod models;
mod node;
mod plane;
mod provisioning;
mod replay;
mod run;
mod run_api;
mod schema;
mod secrets;
mod slack;
mod task;
mod validate;

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use crewlet_config::Bootstrap;
use crewlet_store::Stores;

/// Crewlet runs an AI agent company described in YAML.
#[derive(Debug, Parser)]
#[command(name = "crewlet", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a company file or a bootstrap config.yaml and list every problem
    /// (reads no environment, touches no network).
    Validate(validate::Args),
    /// Print the JSON Schema of a configuration file, or its reference docs.
    Schema(schema::Args),
    /// Apply the database migrations (`--check`: only report, exit 1 if pending).
    Migrate(migrate::Args),
    /// Run the company (the engine, with the embedded API when `api.port > 0`);
    /// `run api` runs the standalone API process.
    Run(run::RunArgs),
    /// The company's stored revisions: import, export, show, revisions, diff.
    Config(config::Args),
    /// Token budgets: show the ledger, reset a budget.
    Budgets(budgets::Args),
    /// The secret store: `set` (value from stdin), `list`, `rm`, `rekey`,
    /// `keygen`. Values never come back out.
    Secrets(secrets::Args),
    /// Hand a seat work through the running API (`task send HANDLE TEXT --wait`).
    Task(task::Args),
    /// The fleet's nodes: `list`, `drain NODE` (hand its seats over).
    Node(node::Args),
    /// Re-run a recorded turn from its journal, step by step, with no model
    /// call and no tool run (`--from-step N --model NAME`: the rest live).
    Replay(replay::Args),
    /// The model cache: `pull [NAME]` (verified by sha256), `list`,
    /// `rm NAME`, `verify [NAME]`.
    Models(models::Args),
    /// Subscription (cli-agent) model providers: `list`, `login NAME`
    /// (`--from-host`, `--capture-token`), `doctor`, `status`, `logout NAME`.
    Llm(llm::Args),
    /// Mattermost bots: `provision` the seats' bots and tokens, `doctor`
    /// checks an install.
    Mattermost(mattermost::Args),
    /// Slack apps: `provision` one app per seat through the manifest API.
    Slack(slack::Args),
    /// Confluence: `import` a folder of Markdown as knowledge pages.
    Confluence(confluence::Args),
    /// Plane: `import` a folder of Markdown as pages, `provision` the
    /// projects, memberships and webhook.
    Plane(plane::Args),
    /// GitLab: `provision` the seats' users, group membership, tokens and
    /// the webhook to the API.
    Gitlab(gitlab::Args),
}

/// Exit code for a file that cannot be read (or another failure of the tool).
pub const EXIT_UNREADABLE: u8 = 2;

pub fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Validate(args) => validate::run(&args),
        Command::Schema(args) => schema::run(&args),
        Command::Migrate(args) => migrate::run(&args),
        Command::Run(args) => run::dispatch(args),
        Command::Config(args) => config::run(args),
        Command::Budgets(args) => budgets::run(args),
        Command::Secrets(args) => secrets::run(args),
        Command::Task(args) => task::run(args),
        Command::Node(args) => node::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Models(args) => models::run(args),
        Command::Llm(args) => llm::run(args),
        Command::Mattermost(args) => mattermost::run(args),
        Command::Slack(args) => slack::run(args),
        Command::Confluence(args) => confluence::run(args),
        Command::Plane(args) => plane::run(args),
        Command::Gitlab(args) => gitlab::run(args),
    };
    result.unwrap_or_else(|e| {
        eprintln!("error: {e:#}");
        ExitCode::from(EXIT_UNREADABLE)
    })
}

/// The `--config` of the commands that work on the database.
#[derive(Debug, clap::Args)]
pub struct DatabaseArgs {
    /// The Tier A bootstrap file (config.yaml) naming the database;
    /// `CREWLET_*` variables override it.
    #[arg(
        long,
        short = 'c',
        global = true,
        env = "CREWLET_CONFIG",
        value_name = "CONFIG"
    )]
    pub config: Option<PathBuf>,
}

/// The preamble of the commands that work on the database (`config`,
/// `budgets`): load the bootstrap, start a runtime, open (and migrate) the
/// stores it names, then run `work` with both.
fn with_stores<F, Fut>(
    database: &DatabaseArgs,
    command: &'static str,
    work: F,
) -> anyhow::Result<ExitCode>
where
    F: FnOnce(Bootstrap, Stores) -> Fut,
    Fut: Future<Output = anyhow::Result<ExitCode>>,
{
    let bootstrap = Bootstrap::load(database.config.as_deref())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let stores = crewlet_engine::admin::open_stores(&bootstrap, command).await?;
        work(bootstrap, stores).await
    })
}
