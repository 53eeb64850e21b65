//! `cargo xtask bench tokens`: prompt tokens per phase, tools-schema tokens,
//! bytes sent and cached-prefix share of one reference turn
//! (`xtask/assets/tokens/reference.json`), ours beside the original's.
//!
//! Ours: `crates/crewlet-engine/examples/tokens_bench.rs` (release mode, so
//! xtask stays free of the engine and the tokenizer). The original: its
//! `src/` is exported from a git repository of it (`--original-repo`, a bare
//! mirror is enough) into `target/bench/tokens/`, its dependencies (read
//! from its `pyproject.toml`) go into a venv there, and
//! `xtask/assets/tokens/original_turn.py` runs the same turn on its own
//! TurnEngine and records the requests; the example counts both the same
//! way. Without the repository, or when a step fails, the bench prints our
//! figures and says why the comparison is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{cmd, workspace_root};

/// Where this workplace keeps its mirror of the original's repository.
const DEFAULT_ORIGINAL_REPO: &str = "/work/.mirror/crewlet+crewlet/repo";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Turns per engine (the first is the cold cache); at least 2.
    #[arg(long, default_value_t = 3)]
    pub iterations: u32,
    /// Git directory of the original (Python) Crewlet; its HEAD is used.
    /// Default: $CREWLET_ORIGINAL_REPO, else this workplace's mirror.
    #[arg(long)]
    pub original_repo: Option<PathBuf>,
    /// Print our figures only.
    #[arg(long)]
    pub no_original: bool,
}

pub fn run(args: Args) -> Result<()> {
    if args.iterations < 2 {
        bail!("--iterations must be at least 2: the second turn shows the warm cache");
    }
    let root = workspace_root();
    let work = super::target_dir().join("bench").join("tokens");
    let original = if args.no_original {
        Err("--no-original".to_owned())
    } else {
        let repo = args
            .original_repo
            .clone()
            .or_else(|| std::env::var_os("CREWLET_ORIGINAL_REPO").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_ORIGINAL_REPO));
        original_requests(&root, &work, &repo, args.iterations).map_err(|e| format!("{e:#}"))
    };

    let mut cargo = super::release_example("crewlet-engine", None, "tokens_bench");
    cargo
        .arg("--root")
        .arg(&root)
        .args(["--iterations", &args.iterations.to_string()]);
    match &original {
        Ok(file) => {
            cargo.arg("--original").arg(file);
        }
        Err(why) => {
            println!("bench: the original's turn is not measured: {why}");
            cargo.arg("--original-unavailable").arg(why);
        }
    }
    println!("bench: {}", cmd::describe(&cargo));
    cmd::run(&mut cargo).context("the tokens bench failed")
}

/// Runs the reference turn on the original engine; the file of its requests.
fn original_requests(root: &Path, work: &Path, repo: &Path, iterations: u32) -> Result<PathBuf> {
    if !repo.exists() {
        bail!(
            "no repository of the original at {} (pass --original-repo or set CREWLET_ORIGINAL_REPO)",
            repo.display()
        );
    }
    let git = |args: &[&str]| {
        let mut c = Command::new("git");
        c.arg("--git-dir").arg(repo).args(args);
        c
    };
    let commit = cmd::output(&mut git(&["rev-parse", "HEAD"]))?
        .trim()
        .to_owned();
    println!(
        "bench: the original at {} (commit {commit})",
        repo.display()
    );
    let src = work.join("original");
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).with_context(|| format!("cannot create {}", src.display()))?;
    let tar = src.join("src.tar");
    cmd::run(
        git(&["archive", "--format=tar", "-o"])
            .arg(&tar)
            .args([&commit, "src", "pyproject.toml"]),
    )?;
    cmd::run(Command::new("tar").arg("-xf").arg(&tar).arg("-C").arg(&src))?;

    let python = venv(work, &src, &commit)?;
    let out = work.join("original-requests.json");
    let assets = root.join("xtask").join("assets").join("tokens");
    cmd::run(
        Command::new(python)
            .arg(assets.join("original_turn.py"))
            .arg("--src")
            .arg(src.join("src"))
            .arg("--reference")
            .arg(assets.join("reference.json"))
            .arg("--company")
            .arg(assets.join("company.yaml"))
            .args(["--iterations", &iterations.to_string()])
            .arg("--out")
            .arg(&out)
            .current_dir(work),
    )
    .context("the original's turn failed")?;
    Ok(out)
}

/// A venv with the original's runtime dependencies, installed once per
/// commit of the original (a marker file records a finished install).
fn venv(work: &Path, src: &Path, commit: &str) -> Result<PathBuf> {
    let venv = work.join("venv");
    let python = venv.join("bin").join("python");
    let marker = work.join("venv-installed");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == commit) && python.is_file() {
        return Ok(python);
    }
    let system = cmd::which("python3")
        .context("python3 (with venv and pip) is needed to run the original engine")?;
    let requirements = src.join("requirements.txt");
    let deps = cmd::output(
        Command::new(&system)
            .arg("-c")
            .arg(
                "import sys, tomllib; \
                 print('\\n'.join(tomllib.load(open(sys.argv[1], 'rb'))['project']['dependencies']))",
            )
            .arg(src.join("pyproject.toml")),
    )
    .context("cannot read the original's dependencies from its pyproject.toml")?;
    std::fs::write(&requirements, deps)
        .with_context(|| format!("cannot write {}", requirements.display()))?;
    println!(
        "bench: installing the original's dependencies into {}",
        venv.display()
    );
    let _ = std::fs::remove_dir_all(&venv);
    cmd::run(Command::new(&system).arg("-m").arg("venv").arg(&venv))?;
    cmd::run(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements),
    )?;
    std::fs::write(&marker, commit)
        .with_context(|| format!("cannot write {}", marker.display()))?;
    Ok(python)
}
