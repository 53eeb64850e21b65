//! `crewlet confluence import COMPANY [DIR]` publishes a folder of
//! Markdown to Confluence: knowledge docs into the space named by their
//! directory, tool skills (frontmatter with `trigger:`) into the Tool
//! Skills space. It prints the plan first, then progress, then a report.
//! `${VAR}`s are read from the env file first, then from the process
//! environment. Exit codes: 0 all published (or nothing to do), 1 a page
//! failed, 2 anything else.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use crewlet_integrations::knowledge::ConfluencePublisher;
use crewlet_integrations::knowledge::import::{self, DEFAULT_SKILLS_CONTAINER, Publisher};

use super::provisioning::{Out, exit_code, load, runtime};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: ConfluenceCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ConfluenceCommand {
    /// Publish a folder of Markdown (knowledge docs and tool skills) as
    /// Confluence pages, creating or updating them in place.
    Import(ImportArgs),
}

#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The company file (its `integrations.confluence` is used).
    pub company: PathBuf,
    /// The folder to publish (walked recursively).
    #[arg(default_value = "examples")]
    pub dir: PathBuf,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The space tool skills are published to.
    #[arg(long, default_value = DEFAULT_SKILLS_CONTAINER, value_name = "KEY")]
    pub skills_space: String,
    /// The env file `${VAR}`s are read from first.
    #[arg(long, default_value = ".env", value_name = "PATH")]
    pub env_file: PathBuf,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let runtime = runtime()?;
    match args.cmd {
        ConfluenceCommand::Import(a) => runtime.block_on(import_cmd(a)),
    }
}

async fn import_cmd(args: ImportArgs) -> Result<ExitCode> {
    let (company, _, env) = load(&args.company, &args.env_file)?;
    let publisher = ConfluencePublisher::from_company(&company, env).map_err(anyhow::Error::msg)?;
    publish(
        &publisher,
        &args.dir,
        args.skills_space.trim(),
        args.dry_run,
    )
    .await
}

/// Collects `dir`, prints the plan, and (unless `dry_run`) publishes it.
pub(super) async fn publish(
    publisher: &dyn Publisher,
    dir: &Path,
    skills: &str,
    dry_run: bool,
) -> Result<ExitCode> {
    let collected =
        import::collect(dir, skills).with_context(|| format!("cannot read {}", dir.display()))?;
    println!(
        "reading {} pages from {}",
        collected.docs.len(),
        dir.display()
    );
    let mut progress = |line: &str| println!("  ... {line}");
    let plan = import::plan(publisher, collected, &mut progress).await;
    let out = Out::new(false);
    out.plan(&plan);
    let planned_failures = plan
        .items
        .iter()
        .any(|i| matches!(i.action, import::Action::Fail(_)));
    if dry_run {
        return Ok(out.dry_run(planned_failures));
    }
    let report = import::apply(publisher, &plan, &mut progress).await;
    println!("report:\n{report}");
    Ok(exit_code(!report.failed.is_empty()))
}
