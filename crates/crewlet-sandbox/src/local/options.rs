//! The local backend's options: where boxes live, bubblewrap, host mounts
//! and what enforces limits.

use std::path::PathBuf;

use super::limits::LimitPolicy;
use crate::{HOME, Result, SandboxError};

/// Options of the local backend.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Where boxes live on the host (each in `<state_dir>/<box>`).
    pub state_dir: PathBuf,
    /// The bubblewrap binary (`bwrap` on the PATH by default).
    pub bwrap: PathBuf,
    /// Host paths every box gets (a toolchain, a coding agent's install).
    pub mounts: Vec<Mount>,
    /// On a cgroup v2 host, the delegated directory boxes are made under;
    /// `None`: the engine's own cgroup.
    pub cgroup_root: Option<PathBuf>,
    /// What enforces limits (cgroups by default; rlimits only on request).
    pub limits: LimitPolicy,
    /// Under rlimits, the CPU seconds each process of a box may use.
    pub rlimit_cpu_seconds: u64,
}

/// A host path mounted into every box.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub host: PathBuf,
    /// Where it appears in the box (absolute).
    pub target: String,
    /// Writable (default read-only).
    pub writable: bool,
}

impl std::str::FromStr for Mount {
    type Err = SandboxError;

    /// `host:box` or `host:box:rw` (or `:ro`).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            SandboxError::Invalid(format!(
                "mount `{s}`: expected `host:box[:ro|:rw]` with absolute paths"
            ))
        };
        let mut parts = s.split(':');
        let (host, target) = (parts.next().ok_or_else(bad)?, parts.next().ok_or_else(bad)?);
        let writable = match parts.next() {
            None | Some("ro") => false,
            Some("rw") => true,
            Some(_) => return Err(bad()),
        };
        if parts.next().is_some() || !host.starts_with('/') || !target.starts_with('/') {
            return Err(bad());
        }
        if target == "/" || target.starts_with(HOME) && target.len() <= HOME.len() + 1 {
            return Err(SandboxError::Invalid(format!(
                "mount `{s}` would cover the box's root or home"
            )));
        }
        Ok(Self {
            host: PathBuf::from(host),
            target: target.to_owned(),
            writable,
        })
    }
}

impl LocalOptions {
    /// Boxes under `state_dir`, bubblewrap from the PATH.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            bwrap: PathBuf::from("bwrap"),
            mounts: Vec::new(),
            cgroup_root: None,
            limits: LimitPolicy::Cgroups,
            rlimit_cpu_seconds: 3600,
        }
    }
}
