//! The words of the sandbox: boxes, their specs and limits, commands and runs.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The home directory inside every box, the same on every backend.
pub const HOME: &str = "/home/user";
/// The working directory commands start in unless they name another.
pub const WORKSPACE: &str = "/home/user/workspace";

/// A box's id, unique per backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BoxId(pub String);

impl fmt::Display for BoxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A detached run's id, unique within its box.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub String);

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a box may reach on the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Its own network namespace with nothing but its own loopback: no
    /// internet, and none of the host's ports.
    #[default]
    None,
    /// The host's network, every port of it included.
    Host,
}

/// Resources one box may use. `None` leaves that resource to the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Memory (and swap) of all the box's processes together, in MiB.
    pub memory_mb: Option<u64>,
    /// Processes and threads alive in the box at once.
    pub pids: Option<u32>,
    /// CPU time per wall-clock second (1.0 is one core).
    pub cpus: Option<f64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mb: Some(2048),
            pids: Some(256),
            cpus: Some(1.0),
        }
    }
}

impl Limits {
    /// No limits at all.
    pub fn none() -> Self {
        Self {
            memory_mb: None,
            pids: None,
            cpus: None,
        }
    }

    /// True when any limit is set.
    pub fn any(&self) -> bool {
        self.memory_mb.is_some() || self.pids.is_some() || self.cpus.is_some()
    }
}

/// How a box is made.
#[derive(Clone, Default)]
pub struct BoxSpec {
    /// The environment of every command in the box, beyond the backend's
    /// minimal base (PATH, HOME, locale). Nothing else of the engine's
    /// environment enters a box: credentials are passed here, explicitly.
    pub env: BTreeMap<String, String>,
    /// Network policy.
    pub network: Network,
    /// Resource limits.
    pub limits: Limits,
    /// Free-form labels (seat, turn) kept with the box for listing.
    pub labels: BTreeMap<String, String>,
}

impl fmt::Debug for BoxSpec {
    // Values of `env` are credentials: only their names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoxSpec")
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("network", &self.network)
            .field("limits", &self.limits)
            .field("labels", &self.labels)
            .finish()
    }
}

/// One command line to run in a box.
#[derive(Clone)]
pub struct Exec {
    /// The program and its arguments (no shell unless you ask for one).
    pub argv: Vec<String>,
    /// Extra environment on top of the box's.
    pub env: BTreeMap<String, String>,
    /// Working directory inside the box (default [`WORKSPACE`]).
    pub cwd: Option<String>,
    /// Wall-clock limit of a foreground command; past it every process the
    /// command started is killed. Detached runs ignore it.
    pub timeout: Duration,
}

impl fmt::Debug for Exec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exec")
            .field("program", &self.argv.first())
            .field("args", &self.argv.len().saturating_sub(1))
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Exec {
    /// A command line with the default timeout of ten minutes.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            cwd: None,
            timeout: Duration::from_secs(600),
        }
    }

    /// `sh -c script`.
    pub fn shell(script: impl Into<String>) -> Self {
        Self::new(["/bin/sh".to_owned(), "-c".to_owned(), script.into()])
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Adds one environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }
}

/// How a command ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutput {
    /// Exit code; `None` when a signal ended it.
    pub exit_code: Option<i32>,
    /// Standard output (lossy UTF-8, capped).
    pub stdout: String,
    /// Standard error (lossy UTF-8, capped).
    pub stderr: String,
    /// The command ran past its timeout and was killed.
    pub timed_out: bool,
    /// The box ran out of memory while the command ran and the kernel
    /// killed a process of it.
    pub oom_killed: bool,
}

impl ExecOutput {
    /// Exited with code 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// Where a detached run is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RunState {
    /// Still going (or paused with its box).
    Running,
    /// Finished with this exit code (a signal shows as 128 + its number).
    Exited { code: i32 },
    /// Gone without an exit code: killed with its box, or lost with the host.
    Lost,
}

/// Output of a detached run, read back from its box.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOutput {
    /// Standard output so far (capped at the tail).
    pub stdout: String,
    /// Standard error so far (capped at the tail).
    pub stderr: String,
}

/// Most bytes of a stream kept in an [`ExecOutput`] or [`RunOutput`].
pub const OUTPUT_CAP: usize = 256 * 1024;

/// Lossy UTF-8 of at most [`OUTPUT_CAP`] bytes: the tail, where the error is.
pub fn capped(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(OUTPUT_CAP);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}
