//! One whole quickstart turn as a new user runs it: the release `crewlet
//! run` on `examples/quickstart/config.yaml` with no model key (so every
//! seat falls back to the local SmolLM2), and `crewlet task send ceo ...
//! --wait` timed from the post to the printed outcome. Each turn after the
//! first finds the seat's company and seat prompt cached.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::bench::{cargo_build_release, release_binary};
use crate::engine_process::{EngineProcess, free_port};
use crate::workspace_root;

/// The README's task.
const TASK: &str = "Ask the CTO to write a short status update on the product.";

/// One timed turn.
pub struct Turn {
    pub wall: Duration,
    /// The outcome line `task send` printed (`completed (done)`, ...).
    pub outcome: String,
}

/// Runs `turns` quickstart turns one after another on one engine.
pub fn quickstart_turns(turns: usize) -> Result<Vec<Turn>> {
    cargo_build_release("crewlet")?;
    let binary = release_binary("crewlet");
    let root = workspace_root();
    let config = root.join("examples/quickstart/config.yaml");
    let dir = std::env::temp_dir().join(format!("crewlet-bench-turn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let port = free_port()?;
    let env = |c: &mut Command| {
        // A new user's shell: no key; the models where `crewlet models`
        // keeps them; the operator token file under this run's own HOME.
        c.env_remove("OPENAI_API_KEY")
            .env("HOME", &dir)
            .env("CREWLET_MODELS_DIR", crewlet_models::models_dir())
            .env("CREWLET_API__PORT", port.to_string())
            .env("RUST_LOG", "warn")
            .current_dir(&dir);
    };
    let log = dir.join("engine.log");
    let mut run = Command::new(&binary);
    run.arg("run").arg(&config).arg("--offline");
    env(&mut run);
    let mut engine = EngineProcess::spawn(run, &log)?;
    engine.wait_ready(port, &log, Duration::from_secs(300), Duration::from_millis(200))?;
    let mut out = Vec::new();
    for n in 1..=turns {
        let mut send = Command::new(&binary);
        send.args(["task", "send", "ceo", TASK, "--wait", "--timeout", "900", "-c"])
            .arg(&config);
        env(&mut send);
        let started = Instant::now();
        let output = send
            .stdin(Stdio::null())
            .output()
            .context("cannot run crewlet task send")?;
        let wall = started.elapsed();
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            bail!(
                "turn {n}: crewlet task send exited with {}:\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let outcome = stdout
            .lines()
            .find(|l| l.starts_with("completed") || l.starts_with("failed"))
            .unwrap_or("no outcome printed")
            .to_owned();
        println!(
            "bench local-model: quickstart turn {n}: {:.1} s, {outcome}",
            wall.as_secs_f64()
        );
        out.push(Turn { wall, outcome });
    }
    drop(engine);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(out)
}
