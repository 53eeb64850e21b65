//! Crewlet's code sandbox.
//!
//! A [`Sandbox`] makes isolated boxes: a fresh writable home at
//! [`HOME`](types::HOME) with a workspace in it, nothing of the engine's
//! files or environment, a network policy and resource limits. Commands run
//! in a box in the foreground ([`Sandbox::exec`]) or detached
//! ([`Sandbox::start`]), where they outlive the engine and are polled for
//! completion, which is how a coding agent works for an hour without holding
//! a turn.
//!
//! Backends: [`local::LocalSandbox`] (bubblewrap namespaces and cgroup
//! limits on this Linux host) and [`e2b::E2bSandbox`] (E2B's hosted
//! microVMs over its HTTP API; limits come from the template). The
//! conformance suite in [`testsuite`] is run
//! against every backend.

pub mod e2b;
mod error;
pub mod local;
pub mod setup;
mod types;

#[cfg(feature = "testsuite")]
pub mod testsuite;

use std::time::Duration;

use async_trait::async_trait;

pub use error::{Result, SandboxError};
pub use types::{
    BoxId, BoxSpec, Exec, ExecOutput, HOME, Limits, Network, OUTPUT_CAP, RunId, RunOutput,
    RunState, WORKSPACE, capped,
};

/// A maker of isolated boxes.
///
/// Paths given to the file operations are inside the box: absolute under
/// [`HOME`], or relative to [`WORKSPACE`]. Anything else is refused.
#[async_trait]
pub trait Sandbox: Send + Sync {
    /// The backend's name (`local`, `e2b`).
    fn backend(&self) -> &'static str;

    /// Makes a box and returns its id.
    async fn create(&self, spec: &BoxSpec) -> Result<BoxId>;

    /// Picks up a box made earlier, perhaps by an engine that has since
    /// restarted: its spec (environment included) is given again, since the
    /// credentials it carries are never stored.
    async fn reconnect(&self, id: &BoxId, spec: &BoxSpec) -> Result<()>;

    /// Runs a command to its end (or its timeout).
    async fn exec(&self, id: &BoxId, cmd: &Exec) -> Result<ExecOutput>;

    /// Starts a command detached: it keeps running after this returns, and
    /// after the engine stops. Its output is kept in the box.
    async fn start(&self, id: &BoxId, cmd: &Exec) -> Result<RunId>;

    /// Where a detached run is.
    async fn poll(&self, id: &BoxId, run: &RunId) -> Result<RunState>;

    /// A detached run's output so far.
    async fn run_output(&self, id: &BoxId, run: &RunId) -> Result<RunOutput>;

    /// Writes a file (parents made as needed).
    async fn write_file(&self, id: &BoxId, path: &str, bytes: &[u8]) -> Result<()>;

    /// Reads a file.
    async fn read_file(&self, id: &BoxId, path: &str) -> Result<Vec<u8>>;

    /// Reads at most the last `max` bytes of a file (a report the engine
    /// keeps the end of). Backends that can read a part of a file without
    /// the rest say so by overriding this.
    async fn read_file_tail(&self, id: &BoxId, path: &str, max: usize) -> Result<Vec<u8>> {
        let mut bytes = self.read_file(id, path).await?;
        let start = bytes.len().saturating_sub(max);
        bytes.drain(..start);
        Ok(bytes)
    }

    /// Stops every process of the box where it stands, keeping memory and
    /// disk (a run waiting on a human answer).
    async fn pause(&self, id: &BoxId) -> Result<()>;

    /// Lets a paused box go on.
    async fn resume(&self, id: &BoxId) -> Result<()>;

    /// Says the box is still wanted for `ttl` from now; a box nobody keeps
    /// alive is reaped by [`Sandbox::reap`].
    async fn keepalive(&self, id: &BoxId, ttl: Duration) -> Result<()>;

    /// Kills every process of the box and removes it. Killing a box that is
    /// already gone is not an error.
    async fn kill(&self, id: &BoxId) -> Result<()>;

    /// The boxes this backend holds.
    async fn list(&self) -> Result<Vec<BoxId>>;

    /// Kills the boxes whose keepalive ran out and that run nothing; returns
    /// their ids.
    async fn reap(&self) -> Result<Vec<BoxId>>;
}
