//! `cargo xtask bench validate`: wall time of `crewlet validate <file>`.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{Stats, cargo_build_release, release_binary};
use crate::{cmd, workspace_root};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Company file, relative to the workspace root.
    #[arg(long, default_value = "examples/acme/company.yaml")]
    pub file: PathBuf,
    /// How many timed runs.
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
}

pub fn run(args: Args) -> Result<()> {
    let root = workspace_root();
    let file = root.join(&args.file);
    if !file.is_file() {
        bail!("{} does not exist", file.display());
    }
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    cargo_build_release("crewlet")?;
    let binary = release_binary("crewlet");
    if !binary.is_file() {
        bail!("no binary at {} after the build", binary.display());
    }
    let mut samples: Vec<Duration> = Vec::with_capacity(args.runs);
    for i in 0..args.runs {
        let mut validate = Command::new(&binary);
        validate.current_dir(&root).arg("validate").arg(&file);
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
    let stats = Stats::from_samples(&samples).context("no samples")?;
    println!("bench validate {}: {}", args.file.display(), stats.to_line());
    Ok(())
}
