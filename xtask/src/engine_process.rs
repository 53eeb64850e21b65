//! A `crewlet run` process that xtask started (a bench's engine, the
//! schemathesis target): its port, its readiness, and its stop when dropped.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::services::process::{log_tail, signal};

/// How long a stopped engine may take to drain before it is killed.
const STOP_WITHIN: Duration = Duration::from_secs(30);

/// A port nothing listens on now (the kernel picks it).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(listener
        .local_addr()
        .context("cannot find a free port")?
        .port())
}

/// The running engine; stopped (SIGTERM, then SIGKILL after 30 s) when
/// dropped.
pub struct EngineProcess {
    child: Child,
}

impl EngineProcess {
    /// Starts `command` (a `crewlet run ...`) with no stdin and its stdout
    /// and stderr in `log` (created afresh).
    pub fn spawn(mut command: Command, log: &Path) -> Result<Self> {
        let file = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone().context("cannot share the engine's log")?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("cannot start {:?}", command.get_program()))?;
        Ok(Self { child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `/ready` on `port` answers 200 (the company imported and
    /// running), polling every `poll`; the time it took. An engine that
    /// exits first, or is not ready `within`, is an error with the end of
    /// its `log`.
    pub fn wait_ready(
        &mut self,
        port: u16,
        log: &Path,
        within: Duration,
        poll: Duration,
    ) -> Result<Duration> {
        let host = format!("127.0.0.1:{port}");
        let started = Instant::now();
        loop {
            if crate::http::get(&host, "/ready", Duration::from_secs(2))
                .is_ok_and(|r| r.status == 200)
            {
                return Ok(started.elapsed());
            }
            if let Some(status) = self.child.try_wait().context("waiting for crewlet run")? {
                bail!(
                    "crewlet run exited with {status} before /ready answered:\n{}",
                    log_tail(log, 30)
                );
            }
            if started.elapsed() > within {
                bail!(
                    "crewlet run did not answer 200 on /ready within {} s:\n{}",
                    within.as_secs(),
                    log_tail(log, 30)
                );
            }
            std::thread::sleep(poll);
        }
    }
}

impl Drop for EngineProcess {
    fn drop(&mut self) {
        let _ = signal(self.child.id(), "TERM");
        let deadline = Instant::now() + STOP_WITHIN;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
