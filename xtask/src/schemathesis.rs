//! `cargo xtask ci`'s schemathesis step: the embedded default (`crewlet run`
//! on the memory queue and stores) on a free port, then schemathesis (PyPI,
//! pinned, in a venv cached under the target dir) against its
//! `/openapi.json` with every check, a bounded number of examples and a time
//! bound. Any failure fails the step. Configuration: `xtask/schemathesis/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::engine_process::{EngineProcess, free_port};
use crate::{cmd, workspace_root};

/// The schemathesis release the step installs.
pub const VERSION: &str = "4.32.5";
/// Test cases per operation and phase.
const MAX_EXAMPLES: &str = "10";
/// The whole run's time budget, in seconds.
const MAX_TIME: &str = "45";
/// Fixed, so a failure reproduces (`st replay` or the same seed).
const SEED: &str = "1";
const READY_WITHIN: Duration = Duration::from_secs(90);

pub fn run() -> Result<()> {
    let root = workspace_root();
    let target = target_dir(&root)?;
    let cache = target
        .join("xtask-cache")
        .join(format!("schemathesis-{VERSION}"));
    let st = install(&cache)?;

    let mut build = cmd::cargo();
    // The tests step's own build (`cargo test --workspace --all-features`,
    // whose features include the dev-dependencies'): after that step this is
    // a no-op, and `target/debug/crewlet` is the binary its tests ran.
    build
        .current_dir(&root)
        .args(["test", "--workspace", "--all-features", "--no-run"]);
    cmd::run(&mut build)?;
    let crewlet = target.join("debug").join("crewlet");

    let port = free_port()?;
    let token = format!(
        "schemathesis-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let dir = root.join("xtask").join("schemathesis");
    let log = cache.join("server.log");
    let mut server = Command::new(&crewlet);
    server
        .current_dir(&root)
        .arg("run")
        .arg(dir.join("config.yaml"))
        .arg("--import-company")
        .arg(dir.join("company.yaml"))
        .args(["--api-port", &port.to_string()])
        .env("CREWLET_SCHEMATHESIS_TOKEN", &token)
        .env_remove("OPENAI_API_KEY");
    println!(
        "    server: {} (log {})",
        cmd::describe(&server),
        log.display()
    );
    let mut server = EngineProcess::spawn(server, &log)?;
    let took = server.wait_ready(port, &log, READY_WITHIN, Duration::from_millis(200))?;
    println!(
        "    server ready on 127.0.0.1:{port} in {:.1} s",
        took.as_secs_f64()
    );

    let base = format!("http://127.0.0.1:{port}");
    let mut check = Command::new(&st);
    check
        .current_dir(&cache)
        .arg("--config-file")
        .arg(dir.join("schemathesis.toml"))
        .arg("run")
        .arg(format!("{base}/openapi.json"))
        .args(["--checks", "all"])
        .args(["--max-examples", MAX_EXAMPLES])
        .args(["--max-time", MAX_TIME])
        .args(["--seed", SEED])
        .args(["--request-timeout", "10"])
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    println!("    {}", cmd::describe(&check).replace(&token, "[token]"));
    let status = cmd::status(&mut check)?;
    drop(server);
    if !status.success() {
        bail!(
            "schemathesis found failures against the OpenAPI document (exit {status}); the server log is {}",
            log.display()
        );
    }
    Ok(())
}

/// Cargo's target directory (`CARGO_TARGET_DIR`, else `<root>/target`).
fn target_dir(root: &Path) -> Result<PathBuf> {
    Ok(match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                root.join(dir)
            }
        }
        _ => root.join("target"),
    })
}

/// The `schemathesis` executable of a venv in `cache`, installed once per
/// version (a marker file records a finished install).
fn install(cache: &Path) -> Result<PathBuf> {
    let venv = cache.join("venv");
    let st = venv.join("bin").join("schemathesis");
    let marker = cache.join("installed");
    if marker.is_file() && st.is_file() {
        println!("    schemathesis {VERSION}: cached in {}", venv.display());
        return Ok(st);
    }
    std::fs::create_dir_all(cache).with_context(|| format!("cannot create {}", cache.display()))?;
    let python = cmd::which("python3").context(
        "python3 is not on PATH: the schemathesis step needs Python 3.10 or later (with venv)",
    )?;
    println!(
        "    installing schemathesis {VERSION} into {}",
        venv.display()
    );
    let _ = std::fs::remove_dir_all(&venv);
    cmd::run(Command::new(&python).arg("-m").arg("venv").arg(&venv))?;
    cmd::run(
        Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("schemathesis=={VERSION}")),
    )?;
    if !st.is_file() {
        bail!("pip installed schemathesis but {} is missing", st.display());
    }
    std::fs::write(&marker, VERSION)
        .with_context(|| format!("cannot write {}", marker.display()))?;
    Ok(st)
}
