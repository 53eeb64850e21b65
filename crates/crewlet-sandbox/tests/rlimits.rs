//! The local backend with rlimits instead of cgroups (the operator's
//! opt-in where no cgroup is writable), forced here on a host that has
//! cgroups: what each limit really does, weaknesses included.

mod common;

use std::sync::Arc;
use std::time::Duration;

use crewlet_sandbox::local::{Enforcement, LimitPolicy, LocalOptions, LocalSandbox};
use crewlet_sandbox::{BoxId, BoxSpec, Exec, Limits, RunState, Sandbox};

/// The backend with cgroups set aside and `cpu_seconds` of CPU per process,
/// and a box with `limits` in it.
async fn rlimited_box(cpu_seconds: u64, limits: Limits) -> Option<(Arc<LocalSandbox>, BoxId)> {
    let mut opts = LocalOptions::new(common::state_dir());
    opts.limits = LimitPolicy::Rlimits;
    opts.rlimit_cpu_seconds = cpu_seconds;
    let sb = match LocalSandbox::new(opts).await {
        Ok(sb) => sb,
        Err(e) => return crewlet_sandbox::testsuite::skip(&e.to_string()),
    };
    assert!(
        matches!(sb.enforcement(), Enforcement::Rlimits { .. }),
        "{}",
        sb.enforcement()
    );
    let spec = BoxSpec {
        limits,
        ..BoxSpec::default()
    };
    let id = sb.create(&spec).await.expect("create");
    Some((Arc::new(sb), id))
}

/// The limits of the boxes that are paused: room for a shell that forks.
const PAUSABLE: Limits = Limits {
    memory_mb: Some(256),
    pids: Some(64),
    cpus: Some(1.0),
};

/// Polls `check` every 20 ms for up to a minute (a loaded machine is slow,
/// never wrong); whether it came true.
async fn eventually<F, Fut>(mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..3000 {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Host processes whose command line holds `marker`.
fn host_processes_with(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .contains(marker)
            })
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_fails_under_the_address_space_limit() {
    let Some((sb, id)) = rlimited_box(
        600,
        Limits {
            memory_mb: Some(128),
            ..Limits::none()
        },
    )
    .await
    else {
        return;
    };
    let hog = Exec::new([
        "python3",
        "-c",
        "x = bytes(range(256)) * (2 * 1024 * 1024)\nprint('allocated', len(x))",
    ])
    .timeout(Duration::from_secs(120));
    let out = sb.exec(&id, &hog).await.expect("exec");
    assert!(
        !out.stdout.contains("allocated"),
        "512 MiB fit in 128: {out:?}"
    );
    assert!(out.stderr.contains("MemoryError"), "{out:?}");
    assert_ne!(out.exit_code, Some(0));
    // The allocation failed in the process; no OOM killer was involved,
    // and rlimits have no OOM accounting to report one.
    assert!(!out.oom_killed, "{out:?}");
    let fine = Exec::new([
        "python3",
        "-c",
        "x = bytes(range(256)) * 4096\nprint('fine', len(x))",
    ]);
    let ok = sb.exec(&id, &fine).await.expect("after");
    assert_eq!(ok.stdout, "fine 1048576\n", "{ok:?}");
    // The box cannot raise the limit again: it has no CAP_SYS_RESOURCE in
    // the host's user namespace, and the hard limit is set too.
    let raise = sb
        .exec(
            &id,
            &Exec::shell("ulimit -H -v; ulimit -v unlimited 2>/dev/null && echo raised"),
        )
        .await
        .expect("raise");
    assert_eq!(raise.stdout, "131072\n", "{raise:?}");
    sb.kill(&id).await.expect("kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_limit_holds_only_for_an_unprivileged_engine() {
    let Some((sb, id)) = rlimited_box(
        600,
        Limits {
            pids: Some(32),
            ..Limits::none()
        },
    )
    .await
    else {
        return;
    };
    // A bounded "bomb": 100 background sleepers (never an unbounded fork
    // bomb: under root nothing would stop it). One of them in a session of
    // its own, as a daemon would.
    let marker = format!("sleep 30{}", std::process::id() % 1000 + 1000);
    // The spawning runs in a subshell (dash gives up on a failed fork) and
    // the count needs no fork: a glob over the box's own /proc.
    let script = format!(
        "ulimit -H -u 2>/dev/null || ulimit -H -p; \
         setsid {marker} >/dev/null 2>&1 & \
         (i=0; while [ $i -lt 100 ]; do {marker} >/dev/null 2>&1 & i=$((i+1)); done) 2>/dev/null; \
         set -- /proc/[0-9]*; echo $#"
    );
    let out = sb
        .exec(&id, &Exec::shell(script).timeout(Duration::from_secs(120)))
        .await
        .expect("exec");
    let mut lines = out.stdout.lines();
    assert_eq!(lines.next(), Some("32"), "the limit is set: {out:?}");
    let seen: usize = lines
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{out:?}"));
    if running_as_root() {
        // The box's uid 1000 maps to the engine's uid 0, and the kernel does
        // not enforce RLIMIT_NPROC for root: all 101 sleepers ran.
        assert!(seen > 100, "{seen} processes as root: {out:?}");
    } else {
        // Counted per user namespace: this command's own processes only.
        assert!(seen <= 32, "{seen} processes under a limit of 32: {out:?}");
    }
    // Nothing outlives the command, the setsid'd one included: the box's
    // pid namespace dies with its init when the command ends. (bwrap may
    // report the exit while the kernel is still killing the rest: wait.)
    let gone = eventually(|| async { host_processes_with(&marker) == 0 }).await;
    assert!(
        gone,
        "{} left behind after a minute",
        host_processes_with(&marker)
    );
    sb.kill(&id).await.expect("kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_hog_dies_at_its_cpu_seconds() {
    let Some((sb, id)) = rlimited_box(
        2,
        Limits {
            cpus: Some(1.0),
            ..Limits::none()
        },
    )
    .await
    else {
        return;
    };
    let hog = Exec::shell("python3 -c 'while True: pass'; echo \"status $?\"")
        .timeout(Duration::from_secs(300));
    let out = sb.exec(&id, &hog).await.expect("exec");
    // SIGKILL at the hard limit: the shell sees 128 + 9.
    assert!(!out.timed_out, "the hog ran to the timeout: {out:?}");
    assert_eq!(out.stdout, "status 137\n", "{out:?}");
    sb.kill(&id).await.expect("kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_box_stops_every_process_and_can_still_be_killed() {
    let Some((sb, id)) = rlimited_box(600, PAUSABLE).await else {
        return;
    };
    // A run whose children keep forking: all of them must stop.
    let run = sb
        .start(
            &id,
            &Exec::shell("while true; do (sleep 0.01; echo x >> ticks) & sleep 0.01; done"),
        )
        .await
        .expect("start");
    // Wait until it is really going.
    let going =
        eventually(|| async { sb.read_file(&id, "ticks").await.is_ok_and(|t| t.len() > 10) }).await;
    assert!(going, "the run never got going");
    sb.pause(&id).await.expect("pause");
    let before = sb.read_file(&id, "ticks").await.expect("ticks").len();
    // Slowness can only make this pass: a stopped box writes nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = sb.read_file(&id, "ticks").await.expect("ticks").len();
    assert_eq!(before, after, "a paused box kept writing");
    assert_eq!(sb.poll(&id, &run).await.expect("poll"), RunState::Running);
    sb.resume(&id).await.expect("resume");
    let grew =
        eventually(|| async { sb.read_file(&id, "ticks").await.expect("ticks").len() > after })
            .await;
    assert!(grew, "the resumed box did not go on");
    // Paused again, then killed: SIGKILL ends stopped processes too.
    sb.pause(&id).await.expect("pause again");
    sb.kill(&id).await.expect("kill");
    assert!(!sb.list().await.expect("list").contains(&id));
}

/// Pausing right after a start catches the box while bwrap and the shells
/// are still forking: a child forked in the moment between listing the
/// processes and stopping its parent must be stopped too. Repeated, since
/// the moment is narrow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_right_after_start_stops_what_is_still_being_forked() {
    let Some((sb, id)) = rlimited_box(600, PAUSABLE).await else {
        return;
    };
    for round in 0..30 {
        let flag = format!("go{round}");
        let run = sb
            .start(
                &id,
                &Exec::shell(format!(
                    "while [ ! -f {flag} ]; do /bin/true; done; echo finished"
                )),
            )
            .await
            .expect("start");
        sb.pause(&id).await.expect("pause");
        sb.write_file(&id, &flag, b"").await.expect("flag");
        // Slowness can only make this pass: a stopped run cannot finish.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let state = sb.poll(&id, &run).await.expect("poll");
        assert_eq!(
            state,
            RunState::Running,
            "round {round}: the paused run moved on"
        );
        sb.resume(&id).await.expect("resume");
        let done =
            eventually(|| async { sb.poll(&id, &run).await.expect("poll") != RunState::Running })
                .await;
        assert!(done, "round {round}: the resumed run did not finish");
        assert_eq!(
            sb.poll(&id, &run).await.expect("poll"),
            RunState::Exited { code: 0 },
            "round {round}"
        );
    }
    sb.kill(&id).await.expect("kill");
}
