//! Limits without cgroups (an operator's opt-in): rlimits set inside the
//! box, and pausing with signals.
//!
//! Weaker than cgroups, and docs/sandbox.md says how: `RLIMIT_AS` bounds
//! each process's address space (not the box's memory), `RLIMIT_NPROC`
//! counts the processes of one command's user namespace and is not enforced
//! at all when the engine runs as root, `RLIMIT_CPU` is a total of CPU
//! seconds per process (not a share), and there is no OOM accounting.
//!
//! The limits are set by a small shell at the start of the command, inside
//! bwrap (after its user namespace exists), as both soft and hard limits:
//! the box cannot raise them, and `RLIMIT_NPROC` counts the box's own
//! processes rather than every process of the engine's user.

use std::time::Duration;

use super::process;
use crate::{Limits, Result, SandboxError};

/// Sets the limits given as its first three arguments (`-` for none:
/// address space in KiB, processes, CPU seconds), then runs the rest in its
/// place. `ulimit -u` is bash's processes flag; dash calls it `-p`. Exit
/// 125 when a limit cannot be set: the command never runs unlimited.
const SCRIPT: &str = r#"v=$1 p=$2 t=$3; shift 3
fail() { echo "crewlet: cannot set the box's $1 limit" >&2; exit 125; }
if [ "$v" != - ]; then ulimit -v "$v" || fail memory; fi
if [ "$p" != - ]; then ulimit -u "$p" 2>/dev/null || ulimit -p "$p" || fail process; fi
if [ "$t" != - ]; then ulimit -t "$t" || fail cpu; fi
exec "$@""#;

/// `argv` wrapped to run under `limits` (`cpu_seconds` for the CPU time
/// when the box has a CPU limit at all).
pub(crate) fn wrap(limits: &Limits, cpu_seconds: u64, argv: &[String]) -> Vec<String> {
    let or_none = |n: Option<u64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
    let mut out = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        SCRIPT.to_owned(),
        "crewlet-limits".to_owned(),
        or_none(limits.memory_mb.map(|mb| mb.max(8) * 1024)),
        or_none(limits.pids.map(|p| u64::from(p.max(1)))),
        or_none(limits.cpus.map(|_| cpu_seconds.max(1))),
    ];
    out.extend(argv.iter().cloned());
    out
}

/// Stops every process descended from `roots` (the box's launchers) and
/// waits until each is stopped. A listing is not atomic: a parent can finish
/// a fork after `/proc` was read and before its own stop shows, so its child
/// is in no listing yet and runs on. The stop counts as done only when two
/// listings in a row hold the same processes, all stopped: a stopped process
/// cannot fork, so whatever was forked before the first of them is in the
/// second (or, its parent gone, under the box's init, which is listed too).
/// A process that holds a SIGSTOP it has not yet taken counts as stopped:
/// it runs none of its own code before it takes it, and it may hold it for
/// good (a shell's `vfork` parent waits in the kernel for a child that was
/// stopped before its `exec`).
pub(crate) async fn stop(roots: &[i32]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut stopped_before: Option<Vec<i32>> = None;
    loop {
        let listed = process::tree(roots);
        let running: Vec<(i32, char)> = listed
            .iter()
            .filter(|&&(pid, state)| !matches!(state, 'T' | 't') && !process::stop_pending(pid))
            .copied()
            .collect();
        if running.is_empty() {
            let mut all: Vec<i32> = listed.into_iter().map(|(pid, _)| pid).collect();
            all.sort_unstable();
            if stopped_before.as_ref() == Some(&all) {
                return Ok(());
            }
            stopped_before = Some(all);
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        stopped_before = None;
        if tokio::time::Instant::now() >= deadline {
            let named: Vec<String> = running
                .iter()
                .map(|(pid, state)| format!("{pid} ({state})"))
                .collect();
            return Err(SandboxError::Api(format!(
                "processes of the box did not stop within 60 s: {}",
                named.join(", ")
            )));
        }
        for (pid, _) in running {
            process::signal(pid, libc::SIGSTOP);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Continues every process descended from `roots`.
pub(crate) fn cont(roots: &[i32]) {
    for (pid, _) in process::tree(roots) {
        process::signal(pid, libc::SIGCONT);
    }
}

/// Kills every process descended from `roots`, the roots' process groups
/// with them (the group holds the box's pid-namespace init, whose death
/// takes every process of the namespace along).
pub(crate) fn kill(roots: &[i32]) {
    for &root in roots {
        process::signal(-root, libc::SIGKILL);
    }
    for (pid, _) in process::tree(roots) {
        process::signal(pid, libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrapper_gets_the_limits_then_the_command() {
        let limits = Limits {
            memory_mb: Some(64),
            pids: Some(32),
            cpus: Some(0.5),
        };
        let argv = vec!["echo".to_owned(), "hi".to_owned()];
        let w = wrap(&limits, 90, &argv);
        assert_eq!(&w[..2], ["/bin/sh", "-c"]);
        assert_eq!(
            &w[3..],
            ["crewlet-limits", "65536", "32", "90", "echo", "hi"]
        );
        let none = wrap(&Limits::none(), 90, &argv);
        assert_eq!(&none[3..], ["crewlet-limits", "-", "-", "-", "echo", "hi"]);
    }

    #[test]
    fn the_wrapper_sets_both_limits_in_this_hosts_shell() {
        // The script itself, run by this host's /bin/sh (dash on Debian):
        // it must set soft and hard limits and then run the command.
        let w = wrap(
            &Limits {
                memory_mb: Some(512),
                pids: Some(77),
                cpus: Some(1.0),
            },
            33,
            &[
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                "ulimit -S -v; ulimit -H -v; ulimit -S -t; ulimit -H -t".to_owned(),
            ],
        );
        let out = std::process::Command::new(&w[0])
            .args(&w[1..])
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "524288\n524288\n33\n33\n"
        );
    }
}
