//! The conformance suite every [`Sandbox`] backend passes.
//!
//! Each case takes a backend and returns `Err(reason)` on a failed check.
//! [`sandbox_conformance!`](crate::sandbox_conformance) turns them into tests:
//!
//! ```text
//! crewlet_sandbox::sandbox_conformance!(local, async { make_backend().await });
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use crate::setup::{SetupStep, provision};
use crate::{BoxSpec, Exec, Limits, RunState, Sandbox, SandboxError};

/// A failed check.
pub type Check = Result<(), String>;

/// The local backend (with limits) over `state_dir`, or `None` when this
/// host cannot run it: the test skips on a laptop, and fails under
/// `CI=true`, where a missing service is a failure.
pub async fn local_or_skip(
    state_dir: impl Into<std::path::PathBuf>,
) -> Option<crate::local::LocalSandbox> {
    use crate::local::{LocalOptions, LocalSandbox};
    match LocalSandbox::new(LocalOptions::new(state_dir)).await {
        Ok(sb) if sb.enforces_limits() => Some(sb),
        Ok(_) => skip(
            "this host cannot enforce sandbox limits (no writable cgroup v1 controllers nor a delegated cgroup v2 subtree)",
        ),
        Err(e) => skip(&e.to_string()),
    }
}

/// Skips (`None`) with `why`, or panics under `CI=true`.
pub fn skip<T>(why: &str) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but the sandbox is unavailable: {why}");
    }
    eprintln!("skipping: {why}");
    None
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn err(e: SandboxError) -> String {
    e.to_string()
}

/// A spec with small limits and one credential-like variable.
pub fn spec() -> BoxSpec {
    let mut env = BTreeMap::new();
    env.insert("BOX_VAR".to_owned(), "from-box".to_owned());
    env.insert("SHARED".to_owned(), "box".to_owned());
    BoxSpec {
        env,
        limits: Limits {
            memory_mb: Some(256),
            pids: Some(128),
            cpus: Some(1.0),
        },
        ..BoxSpec::default()
    }
}

/// Waits (boundedly, by polling) for a detached run to leave `Running`.
pub async fn wait_run(
    sb: &dyn Sandbox,
    id: &crate::BoxId,
    run: &crate::RunId,
) -> Result<RunState, String> {
    for _ in 0..3000 {
        match sb.poll(id, run).await.map_err(err)? {
            RunState::Running => tokio::time::sleep(Duration::from_millis(20)).await,
            other => return Ok(other),
        }
    }
    Err("the run did not finish within a minute".into())
}

/// Commands run in the workspace, report exit codes and both streams, and
/// see the box's environment under the command's own.
pub async fn exec_and_env(sb: &dyn Sandbox) -> Check {
    let id = sb.create(&spec()).await.map_err(err)?;
    let out = sb
        .exec(
            &id,
            &Exec::shell("pwd; echo \"$BOX_VAR $SHARED\"; echo oops >&2; exit 3")
                .env("SHARED", "cmd"),
        )
        .await
        .map_err(err)?;
    ensure!(out.exit_code == Some(3), "exit code {:?}", out.exit_code);
    ensure!(
        out.stdout == "/home/user/workspace\nfrom-box cmd\n",
        "stdout {:?}",
        out.stdout
    );
    ensure!(out.stderr == "oops\n", "stderr {:?}", out.stderr);
    ensure!(!out.timed_out && !out.oom_killed, "flags {out:?}");
    let ok = sb.exec(&id, &Exec::new(["true"])).await.map_err(err)?;
    ensure!(ok.success(), "true failed: {ok:?}");
    sb.kill(&id).await.map_err(err)
}

/// Files written by the host are seen by commands and the other way round;
/// the workspace persists between commands; paths out of the home are refused.
pub async fn files_round_trip(sb: &dyn Sandbox) -> Check {
    let id = sb.create(&spec()).await.map_err(err)?;
    sb.write_file(&id, "dir/in.txt", b"hello")
        .await
        .map_err(err)?;
    let out = sb
        .exec(&id, &Exec::shell("cat dir/in.txt > out.txt && echo done"))
        .await
        .map_err(err)?;
    ensure!(out.stdout == "done\n", "exec: {out:?}");
    let back = sb
        .read_file(&id, "/home/user/workspace/out.txt")
        .await
        .map_err(err)?;
    ensure!(
        back == b"hello",
        "read back {:?}",
        String::from_utf8_lossy(&back)
    );
    let refused = sb.write_file(&id, "/etc/evil", b"x").await;
    ensure!(
        matches!(refused, Err(SandboxError::PathOutside(_))),
        "write outside: {refused:?}"
    );
    let refused = sb.read_file(&id, "../../../etc/passwd").await;
    ensure!(
        matches!(refused, Err(SandboxError::PathOutside(_))),
        "read outside: {refused:?}"
    );
    sb.kill(&id).await.map_err(err)
}

/// A detached run keeps going after `start` returns, is polled to its exit
/// code, and leaves its output.
pub async fn detached_run(sb: &dyn Sandbox) -> Check {
    let id = sb.create(&spec()).await.map_err(err)?;
    let script = "while [ ! -f go ]; do sleep 0.05; done; echo working; echo warn >&2; exit 7";
    let run = sb.start(&id, &Exec::shell(script)).await.map_err(err)?;
    let state = sb.poll(&id, &run).await.map_err(err)?;
    ensure!(state == RunState::Running, "before go: {state:?}");
    sb.write_file(&id, "go", b"").await.map_err(err)?;
    let state = wait_run(sb, &id, &run).await?;
    ensure!(state == RunState::Exited { code: 7 }, "after go: {state:?}");
    let out = sb.run_output(&id, &run).await.map_err(err)?;
    ensure!(
        out.stdout == "working\n" && out.stderr == "warn\n",
        "output {out:?}"
    );
    let missing = sb.poll(&id, &crate::RunId("run-nope".into())).await;
    ensure!(
        matches!(missing, Err(SandboxError::NoSuchRun { .. })),
        "unknown run: {missing:?}"
    );
    sb.kill(&id).await.map_err(err)
}

/// A command past its timeout is killed, with everything it started.
pub async fn timeout_kills(sb: &dyn Sandbox) -> Check {
    let id = sb.create(&spec()).await.map_err(err)?;
    let cmd = Exec::shell("sleep 60 & sleep 60; echo never").timeout(Duration::from_millis(500));
    let out = sb.exec(&id, &cmd).await.map_err(err)?;
    ensure!(out.timed_out, "not timed out: {out:?}");
    ensure!(!out.stdout.contains("never"), "ran on: {out:?}");
    // The box is still usable.
    let ok = sb
        .exec(&id, &Exec::shell("echo alive"))
        .await
        .map_err(err)?;
    ensure!(ok.stdout == "alive\n", "after timeout: {ok:?}");
    sb.kill(&id).await.map_err(err)
}

/// A paused box's run makes no progress; resumed, it finishes.
pub async fn pause_and_resume(sb: &dyn Sandbox) -> Check {
    let id = sb.create(&spec()).await.map_err(err)?;
    let run = sb
        .start(
            &id,
            &Exec::shell("while [ ! -f go ]; do sleep 0.02; done; echo finished"),
        )
        .await
        .map_err(err)?;
    sb.pause(&id).await.map_err(err)?;
    sb.write_file(&id, "go", b"").await.map_err(err)?;
    // Room for a run that was not paused to see `go` and finish: if it does,
    // pausing did nothing. Slowness can only make this pass, never fail.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let state = sb.poll(&id, &run).await.map_err(err)?;
    ensure!(state == RunState::Running, "paused run moved on: {state:?}");
    sb.resume(&id).await.map_err(err)?;
    let state = wait_run(sb, &id, &run).await?;
    ensure!(state == RunState::Exited { code: 0 }, "resumed: {state:?}");
    sb.kill(&id).await.map_err(err)
}

/// Killing a box ends its runs and removes it; a second kill is fine.
pub async fn kill_removes(sb: &dyn Sandbox) -> Check {
    let id = sb.create(&spec()).await.map_err(err)?;
    let _run = sb
        .start(&id, &Exec::shell("sleep 600"))
        .await
        .map_err(err)?;
    ensure!(sb.list().await.map_err(err)?.contains(&id), "not listed");
    sb.kill(&id).await.map_err(err)?;
    ensure!(!sb.list().await.map_err(err)?.contains(&id), "still listed");
    let gone = sb.exec(&id, &Exec::new(["true"])).await;
    ensure!(
        matches!(gone, Err(SandboxError::NoSuchBox(_))),
        "exec after kill: {gone:?}"
    );
    sb.kill(&id).await.map_err(err)
}

/// Setup steps write files, run commands with the environment so far and
/// collect briefs; a failing command names the step and its position only.
pub async fn setup_steps(sb: &dyn Sandbox) -> Check {
    let id = sb.create(&spec()).await.map_err(err)?;
    let mut files = BTreeMap::new();
    files.insert(
        "/home/user/.local/bin/hello".to_owned(),
        "#!/bin/sh\necho hello $1\n".to_owned(),
    );
    let mut env = BTreeMap::new();
    env.insert("STEP_VAR".to_owned(), "one".to_owned());
    let steps = vec![
        SetupStep {
            name: "tool".into(),
            files,
            commands: vec![
                "chmod +x $HOME/.local/bin/hello".into(),
                "test \"$STEP_VAR\" = one".into(),
            ],
            env,
            brief: Some("hello is installed".into()),
            timeout: Duration::from_secs(60),
        },
        SetupStep {
            name: "check".into(),
            commands: vec!["$HOME/.local/bin/hello x > greeting".into()],
            timeout: Duration::from_secs(60),
            ..SetupStep::default()
        },
    ];
    let done = provision(sb, &id, &steps, &BTreeMap::new())
        .await
        .map_err(err)?;
    ensure!(
        done.briefs == ["hello is installed"],
        "briefs {:?}",
        done.briefs
    );
    ensure!(
        done.env.get("STEP_VAR").map(String::as_str) == Some("one"),
        "env"
    );
    let greeting = sb.read_file(&id, "greeting").await.map_err(err)?;
    ensure!(
        greeting == b"hello x\n",
        "greeting {:?}",
        String::from_utf8_lossy(&greeting)
    );
    let failing = vec![SetupStep {
        name: "broken".into(),
        commands: vec!["true".into(), "echo secret-value; exit 4".into()],
        timeout: Duration::from_secs(60),
        ..SetupStep::default()
    }];
    match provision(sb, &id, &failing, &BTreeMap::new()).await {
        Err(e @ SandboxError::Setup { .. }) => {
            let text = e.to_string();
            ensure!(
                text.contains("`broken`") && text.contains("command 2"),
                "error {text}"
            );
            ensure!(!text.contains("secret-value"), "error leaks output: {text}");
        }
        other => return Err(format!("broken step: {other:?}")),
    }
    sb.kill(&id).await.map_err(err)
}

/// Every case, by name, for the macro.
#[macro_export]
macro_rules! sandbox_conformance {
    ($make:expr) => {
        $crate::sandbox_conformance!(@case $make, exec_and_env);
        $crate::sandbox_conformance!(@case $make, files_round_trip);
        $crate::sandbox_conformance!(@case $make, detached_run);
        $crate::sandbox_conformance!(@case $make, timeout_kills);
        $crate::sandbox_conformance!(@case $make, pause_and_resume);
        $crate::sandbox_conformance!(@case $make, kill_removes);
        $crate::sandbox_conformance!(@case $make, setup_steps);
    };
    (@case $make:expr, $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some(sb) = $make.await else { return };
            if let Err(e) = $crate::testsuite::$name(&*sb).await {
                panic!("{}: {e}", stringify!($name));
            }
        }
    };
}
