//! `crewlet plane import COMPANY [DIR]` publishes a folder of Markdown as
//! Plane pages (the projects must exist). `crewlet plane provision
//! COMPANY` creates the company's projects, adds the seats as members and
//! registers the workspace webhook on `{--base-url}/webhooks/plane`; it
//! checks the seats' tokens but cannot mint them (Plane has no API for
//! another user's token). `crewlet plane resync COMPANY` reads the Tool
//! Skills project as the engine does and prints the skills it would load.
//! `${VAR}`s are read from the env file first, then
//! from the process environment. Exit codes: 0 done (or nothing to do),
//! 1 something failed, 2 anything else (a refused preflight included).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use crewlet_integrations::knowledge::import::DEFAULT_SKILLS_CONTAINER;
use crewlet_integrations::knowledge::{PlanePublisher, PlaneSkills};
use crewlet_integrations::plane::provision::{
    self, Options, PROVISION_TOKEN_VAR, TokenState, operator_client,
};

use super::confluence::{publish, resync};
use super::provisioning::{Out, Secret, exit_code, load, runtime};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: PlaneCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum PlaneCommand {
    /// Publish a folder of Markdown (knowledge docs and tool skills) as
    /// Plane pages, creating or updating them in place.
    Import(ImportArgs),
    /// Create the company's projects, add the seats to them and register
    /// the workspace webhook; check every seat's token.
    Provision(ProvisionArgs),
    /// Read the Tool Skills project the way the engine does and print what
    /// it would load (a running engine re-reads it on its own).
    Resync(ResyncArgs),
}

#[derive(Debug, clap::Args)]
pub struct ResyncArgs {
    /// The company file (its `integrations.plane` is used).
    pub company: PathBuf,
    /// The Tool Skills project.
    #[arg(long, alias = "project", default_value = DEFAULT_SKILLS_CONTAINER, value_name = "IDENTIFIER")]
    pub skills_project: String,
    /// The env file `${VAR}`s are read from first.
    #[arg(long, default_value = ".env", value_name = "PATH")]
    pub env_file: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The company file (its `integrations.plane` is used).
    pub company: PathBuf,
    /// The folder to publish (walked recursively).
    #[arg(default_value = "examples")]
    pub dir: PathBuf,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The project tool skills are published to.
    #[arg(long, alias = "project", default_value = DEFAULT_SKILLS_CONTAINER, value_name = "IDENTIFIER")]
    pub skills_project: String,
    /// The env file `${VAR}`s are read from first.
    #[arg(long, default_value = ".env", value_name = "PATH")]
    pub env_file: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct ProvisionArgs {
    /// The company file.
    pub company: PathBuf,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The API's public URL: the webhook goes to `{URL}/webhooks/plane`
    /// (without it the webhook is left alone).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// The env file `${VAR}`s are read from, and a webhook secret Plane
    /// generates is written to.
    #[arg(long, default_value = ".env", value_name = "PATH")]
    pub env_file: PathBuf,
    /// A workspace admin's API token; default: PLANE_PROVISION_TOKEN, then
    /// `integrations.plane.token`.
    #[arg(long, env = PROVISION_TOKEN_VAR, hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<Secret>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let runtime = runtime()?;
    match args.cmd {
        PlaneCommand::Import(a) => runtime.block_on(import_cmd(a)),
        PlaneCommand::Provision(a) => runtime.block_on(provision_cmd(a)),
        PlaneCommand::Resync(a) => runtime.block_on(resync_cmd(a)),
    }
}

async fn resync_cmd(args: ResyncArgs) -> Result<ExitCode> {
    let (company, _, env) = load(&args.company, &args.env_file)?;
    let source =
        PlaneSkills::from_company(&company, env, args.skills_project.trim()).ok_or_else(|| {
            anyhow::anyhow!(
                "the company has no enabled integrations.plane with url, workspace and token"
            )
        })?;
    resync(&source).await
}

async fn import_cmd(args: ImportArgs) -> Result<ExitCode> {
    let (company, _, env) = load(&args.company, &args.env_file)?;
    let publisher = PlanePublisher::from_company(&company, env).map_err(anyhow::Error::msg)?;
    publish(
        &publisher,
        &args.dir,
        args.skills_project.trim(),
        args.dry_run,
    )
    .await
}

async fn provision_cmd(args: ProvisionArgs) -> Result<ExitCode> {
    let (company, mut file, env) = load(&args.company, &args.env_file)?;
    let token = match args.token {
        Some(t) => t.0,
        None => file
            .get(PROVISION_TOKEN_VAR)
            .or_else(|| {
                let raw = company.integrations.plane.as_ref()?.token.clone()?;
                crewlet_config::interpolate(&raw, &env).ok()
            })
            .unwrap_or_default(),
    };
    let client = operator_client(&company, &token, &env)?;
    let options = Options {
        base_url: args.base_url,
    };
    let out = Out::new(false);
    let plan = provision::plan(&company, &client, &options, &env).await?;
    out.plan(&plan);
    let needs_tokens = plan
        .tokens
        .iter()
        .any(|t| !matches!(t.state, TokenState::Ok));
    if needs_tokens {
        println!("some seats need attention to their token (see above)");
    }
    if args.dry_run {
        return Ok(out.dry_run(plan.blocked()));
    }
    if plan.changes() == 0 && !plan.blocked() {
        return Ok(ExitCode::SUCCESS);
    }
    println!("\napplying:");
    let report = provision::apply(&plan, &client, &mut file, &mut |line: &str| {
        println!("  {line}")
    })
    .await;
    println!("\nreport:\n{report}");
    if let Some(var) = &report.secret_recorded {
        println!(
            "{var} written to {}; restart `crewlet run` so the API reads it",
            file.path().display()
        );
    }
    Ok(exit_code(report.failed()))
}
