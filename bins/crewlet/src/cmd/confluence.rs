//! `crewlet confluence import COMPANY [DIR]` publishes a folder of
//! Markdown to Confluence: knowledge docs into the space named by their
//! directory, tool skills (frontmatter with `trigger:`) into the Tool
//! Skills space. It prints the plan first, then progress, then a report.
//! `crewlet confluence resync COMPANY` reads the Tool Skills space as the
//! engine does and prints the skills it would load.
//! `${VAR}`s are read from the env file first, then from the process
//! environment. Exit codes: 0 all published (or nothing to do), 1 a page
//! failed, 2 anything else.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use crewlet_integrations::knowledge::import::{self, DEFAULT_SKILLS_CONTAINER, Publisher};
use crewlet_integrations::knowledge::{ConfluencePublisher, ConfluenceSkills, SkillSource};

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
    /// Read the Tool Skills space the way the engine does and print what
    /// it would load (a running engine re-reads it on its own).
    Resync(ResyncArgs),
}

#[derive(Debug, clap::Args)]
pub struct ResyncArgs {
    /// The company file (its `integrations.confluence` is used).
    pub company: PathBuf,
    /// The Tool Skills space.
    #[arg(long, alias = "space", default_value = DEFAULT_SKILLS_CONTAINER, value_name = "KEY")]
    pub skills_space: String,
    /// The env file `${VAR}`s are read from first.
    #[arg(long, default_value = ".env", value_name = "PATH")]
    pub env_file: PathBuf,
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
    #[arg(long, alias = "space", default_value = DEFAULT_SKILLS_CONTAINER, value_name = "KEY")]
    pub skills_space: String,
    /// The env file `${VAR}`s are read from first.
    #[arg(long, default_value = ".env", value_name = "PATH")]
    pub env_file: PathBuf,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let runtime = runtime()?;
    match args.cmd {
        ConfluenceCommand::Import(a) => runtime.block_on(import_cmd(a)),
        ConfluenceCommand::Resync(a) => runtime.block_on(resync_cmd(a)),
    }
}

async fn resync_cmd(args: ResyncArgs) -> Result<ExitCode> {
    let (company, _, env) = load(&args.company, &args.env_file)?;
    let source = ConfluenceSkills::from_company(&company, env, args.skills_space.trim())
        .context("the company has no usable integrations.confluence (url and token)")?;
    resync(&source).await
}

/// Walks `source` as the engine does and prints the skills it would load
/// and the pages it would pass over. Exit codes: 0 every skill page read,
/// 1 some page was passed over, 2 the walk failed.
pub(super) async fn resync(source: &dyn SkillSource) -> Result<ExitCode> {
    println!("reading tool skills from {}", source.describe());
    let walk = match source.walk().await {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut passed_over: Vec<(String, String)> = walk.rejected.clone();
    let pages = walk.pages.len();
    let valid: Vec<(String, String)> = walk
        .pages
        .into_iter()
        .filter_map(|page| {
            match crewlet_turn::ToolSkill::from_parts(
                page.frontmatter,
                &page.body,
                page.source.clone(),
            ) {
                Ok(skill) => Some((skill.key, skill.source)),
                Err(why) => {
                    passed_over.push((page.source, why));
                    None
                }
            }
        })
        .collect();
    println!("{} skill(s) of {pages} skill page(s):", valid.len());
    for (key, source) in &valid {
        println!("  {key}  ({source})");
    }
    for (source, why) in &passed_over {
        println!("  passed over {source}: {why}");
    }
    Ok(exit_code(!passed_over.is_empty()))
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
