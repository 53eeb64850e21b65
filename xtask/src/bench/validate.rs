//! `cargo xtask bench validate`: wall time of `crewlet validate <file>`, by
//! default for our example company and for `xtask/fixtures/orbital.company.yaml`,
//! a 1,100-line company in the original Crewlet's format (target: median
//! under 10 ms).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{Stats, cargo_build_release, release_binary};
use crate::{cmd, workspace_root};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Company files, relative to the workspace root (repeat `--file`).
    #[arg(
        long,
        default_values = ["examples/acme/company.yaml", "xtask/fixtures/orbital.company.yaml"]
    )]
    pub file: Vec<PathBuf>,
    /// How many timed runs.
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
}

pub fn run(args: Args) -> Result<()> {
    let root = workspace_root();
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    for file in &args.file {
        if !root.join(file).is_file() {
            bail!("{} does not exist", root.join(file).display());
        }
    }
    cargo_build_release("crewlet")?;
    let binary = release_binary("crewlet");
    if !binary.is_file() {
        bail!("no binary at {} after the build", binary.display());
    }
    for file in &args.file {
        let lines = std::fs::read_to_string(root.join(file))
            .map(|t| t.lines().count())
            .unwrap_or(0);
        let stats = time_file(&root, &binary, file, args.runs)?;
        println!(
            "bench validate {} ({lines} lines): {}",
            file.display(),
            stats.to_line()
        );
    }
    Ok(())
}

fn time_file(root: &Path, binary: &Path, file: &Path, runs: usize) -> Result<Stats> {
    let mut samples: Vec<Duration> = Vec::with_capacity(runs);
    for i in 0..runs {
        let mut validate = Command::new(binary);
        validate.current_dir(root).arg("validate").arg(file);
        let started = Instant::now();
        let out = validate
            .output()
            .with_context(|| format!("cannot run `{}`", cmd::describe(&validate)))?;
        let elapsed = started.elapsed();
        if !out.status.success() {
            bail!(
                "run {}: `{}` failed with {}:\n{}{}",
                i + 1,
                cmd::describe(&validate),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        samples.push(elapsed);
    }
    Stats::from_samples(&samples).context("no samples")
}
