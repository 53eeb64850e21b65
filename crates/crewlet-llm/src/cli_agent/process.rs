//! Running one CLI process: its own process group, a cleared environment,
//! stdin fed while stdout and stderr are drained, and a deadline after
//! which the whole group is terminated (the CLI's runtime helpers too).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// How long a terminated CLI gets to exit before it is killed.
const TERM_GRACE: Duration = Duration::from_secs(2);
/// How long the pipes may stay open after the CLI has exited.
const PIPE_GRACE: Duration = Duration::from_secs(5);

/// One invocation.
pub(crate) struct Invocation<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    pub cwd: &'a Path,
    pub stdin: Option<&'a str>,
    pub timeout: Duration,
}

/// A finished run.
#[derive(Debug)]
pub(crate) struct Finished {
    /// The exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    pub fn status(&self) -> String {
        match self.code {
            Some(code) => format!("status {code}"),
            None => "a signal".into(),
        }
    }
}

pub(crate) enum RunError {
    Spawn(PathBuf, std::io::Error),
    TimedOut,
}

/// Kills the group when dropped, unless disarmed: a cancelled call (a turn
/// stopped, the engine shutting down) must not leave a CLI running.
struct GroupGuard(Option<i32>);

impl GroupGuard {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            signal_group(pgid, Signal::Kill);
        }
    }
}

#[derive(Clone, Copy)]
enum Signal {
    Term,
    Kill,
}

#[cfg(unix)]
fn signal_group(pgid: i32, signal: Signal) {
    let sig = match signal {
        Signal::Term => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    };
    if pgid > 1 {
        // SAFETY: kill(2) with a negative pid signals the process group
        // `pgid`, which the child leads (spawned with process_group(0));
        // it takes no pointers and an error (ESRCH: the group is gone)
        // is harmless.
        unsafe {
            libc::kill(-pgid, sig);
        }
    }
}

#[cfg(not(unix))]
fn signal_group(_: i32, _: Signal) {}

/// Runs `inv` to its end or its deadline.
pub(crate) async fn run(inv: Invocation<'_>) -> Result<Finished, RunError> {
    let mut cmd = Command::new(inv.program);
    cmd.args(inv.args)
        .env_clear()
        .envs(inv.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(inv.cwd)
        .stdin(if inv.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    cmd.process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| RunError::Spawn(inv.program.to_path_buf(), e))?;
    let pgid = child.id().and_then(|id| i32::try_from(id).ok());
    let mut guard = GroupGuard(pgid);

    if let (Some(text), Some(mut stdin)) = (inv.stdin, child.stdin.take()) {
        let bytes = text.as_bytes().to_vec();
        // A CLI that exits without reading its prompt closes the pipe: not
        // an error of ours, its exit status says what happened.
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
            let _ = stdin.shutdown().await;
        });
    }
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);

    let status = match tokio::time::timeout(inv.timeout, child.wait()).await {
        Ok(status) => status.ok(),
        Err(_) => {
            if let Some(pgid) = pgid {
                signal_group(pgid, Signal::Term);
                if tokio::time::timeout(TERM_GRACE, child.wait())
                    .await
                    .is_err()
                {
                    signal_group(pgid, Signal::Kill);
                    let _ = child.wait().await;
                }
                // helpers that ignored SIGTERM
                signal_group(pgid, Signal::Kill);
            } else {
                let _ = child.kill().await;
            }
            guard.disarm();
            return Err(RunError::TimedOut);
        }
    };
    // The CLI is done; anything it left running in its group goes too, or
    // it would hold the pipes (and the seat's home) open.
    if let Some(pgid) = pgid {
        signal_group(pgid, Signal::Kill);
    }
    guard.disarm();
    let stdout = collect(stdout).await;
    let stderr = collect(stderr).await;
    Ok(Finished {
        code: status.and_then(|s| s.code()),
        stdout,
        stderr,
    })
}

type Drain = tokio::task::JoinHandle<Vec<u8>>;

fn drain<R: tokio::io::AsyncRead + Unpin + Send + 'static>(mut pipe: R) -> Drain {
    tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf).await;
        buf
    })
}

/// A pipe's bytes. Bounded: a helper that left the group could hold the
/// pipe open forever.
async fn collect(handle: Option<Drain>) -> String {
    let Some(handle) = handle else {
        return String::new();
    };
    match tokio::time::timeout(PIPE_GRACE, handle).await {
        Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        _ => String::new(),
    }
}
