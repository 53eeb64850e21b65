//! cgroup v1: one hierarchy per controller (memory with swap, pids, cpu
//! bandwidth, and the freezer for pausing).
//!
//! A box gets a directory under `<controller>/<engine's own cgroup>/crewlet-sandbox/<box>`
//! in each controller, with its limits; each command of the box runs in a
//! child directory of it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{
    CFS_PERIOD_US, PARENT, V1Mount, collect_pids, own_path, subdirs, unavailable, under_mount,
    write,
};
use crate::{Limits, Result, SandboxError};

/// The v1 controllers a box needs.
pub(super) const CONTROLLERS: [&str; 4] = ["memory", "pids", "cpu", "freezer"];

/// Where this host's cgroup v1 controllers are, with this process's place in
/// each.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    /// `(controller, <mount>/<own path>/crewlet-sandbox)`.
    bases: Vec<(String, PathBuf)>,
}

impl Host {
    /// Makes the sandbox's parent directory in each controller; `Err` says
    /// why limits cannot be enforced here.
    pub(super) fn detect(mounts: &[V1Mount], own: &str) -> Result<Self> {
        let mut bases = Vec::new();
        for controller in CONTROLLERS {
            let Some(mount) = mounts
                .iter()
                .find(|m| m.controllers.iter().any(|c| c == controller))
            else {
                return Err(unavailable(&format!(
                    "no cgroup v1 `{controller}` controller is mounted"
                )));
            };
            let path = own_path(own, controller).unwrap_or_else(|| "/".to_owned());
            let base = under_mount(&mount.dir, &mount.root, &path).join(PARENT);
            if let Err(e) = std::fs::create_dir_all(&base) {
                return Err(unavailable(&format!(
                    "cannot make {} ({e}); the local sandbox's limits need root or a delegated cgroup",
                    base.display()
                )));
            }
            bases.push((controller.to_owned(), base));
        }
        Ok(Self { bases })
    }

    /// Makes a box's cgroups with its limits.
    pub(super) fn make_box(&self, id: &str, limits: &Limits) -> Result<BoxCgroup> {
        let dirs: Vec<(String, PathBuf)> = self
            .bases
            .iter()
            .map(|(c, base)| (c.clone(), base.join(id)))
            .collect();
        for (_, dir) in &dirs {
            std::fs::create_dir_all(dir).map_err(|e| SandboxError::io(dir, e))?;
        }
        let cg = BoxCgroup { dirs };
        if let Some(mb) = limits.memory_mb {
            let bytes = (mb.max(8) * 1024 * 1024).to_string();
            let dir = cg.dir("memory");
            write(&dir.join("memory.limit_in_bytes"), &bytes)?;
            // With swap accounting, swap counts too; without it the file is absent.
            let memsw = dir.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                write(&memsw, &bytes)?;
            }
        }
        if let Some(pids) = limits.pids {
            write(&cg.dir("pids").join("pids.max"), &pids.max(1).to_string())?;
        }
        if let Some(cpus) = limits.cpus {
            let quota = ((cpus * CFS_PERIOD_US as f64) as u64).max(1000);
            let dir = cg.dir("cpu");
            write(&dir.join("cpu.cfs_period_us"), &CFS_PERIOD_US.to_string())?;
            write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
        }
        Ok(cg)
    }
}

/// One box's cgroup directories, one per controller.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BoxCgroup {
    dirs: Vec<(String, PathBuf)>,
}

impl BoxCgroup {
    fn dir(&self, controller: &str) -> PathBuf {
        self.dirs
            .iter()
            .find(|(c, _)| c == controller)
            .map(|(_, d)| d.clone())
            .unwrap_or_default()
    }

    /// Makes the child cgroup of one command in every controller.
    pub(super) fn make_child(&self, child: &str) -> Result<Vec<PathBuf>> {
        let mut procs = Vec::new();
        for (_, dir) in &self.dirs {
            let d = dir.join(child);
            std::fs::create_dir_all(&d).map_err(|e| SandboxError::io(&d, e))?;
            procs.push(d.join("cgroup.procs"));
        }
        Ok(procs)
    }

    pub(super) fn pids(&self, child: Option<&str>) -> Vec<i32> {
        let root = self.dir("pids");
        let start = match child {
            Some(c) => root.join(c),
            None => root,
        };
        let mut out = Vec::new();
        collect_pids(&start, &mut out);
        out
    }

    /// v1 has no `cgroup.kill`: SIGKILL to every member, round after round
    /// (a fork bomb forks between the listing and the signal), thawing the
    /// box since a frozen process dies only once thawed.
    pub(super) async fn kill(&self, child: Option<&str>) {
        for _ in 0..200 {
            let pids = self.pids(child);
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                crate::local::process::signal(pid, libc::SIGKILL);
            }
            if child.is_none() {
                let _ = write(&self.dir("freezer").join("freezer.state"), "THAWED");
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        tracing::warn!("sandbox cgroup still has processes after 200 kill rounds");
    }

    /// Freezing is asynchronous in cgroup v1 (`FREEZING` until every task
    /// has stopped): write the state until it reads back.
    pub(super) async fn freeze(&self, frozen: bool) -> Result<()> {
        let state = if frozen { "FROZEN" } else { "THAWED" };
        let file = self.dir("freezer").join("freezer.state");
        for _ in 0..500 {
            write(&file, state)?;
            let now = std::fs::read_to_string(&file).map_err(|e| SandboxError::io(&file, e))?;
            if now.trim() == state {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        Err(SandboxError::Api(format!(
            "the box did not become {state} within 5 s"
        )))
    }

    /// OOM kills in the box and its commands' cgroups (the kill is counted
    /// where the limit was hit, and under cgroup v1 that may be either).
    pub(super) fn oom_kills(&self) -> u64 {
        fn walk(dir: &Path) -> u64 {
            let own = std::fs::read_to_string(dir.join("memory.oom_control"))
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("oom_kill "))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            own + subdirs(dir).iter().map(|d| walk(d)).sum::<u64>()
        }
        walk(&self.dir("memory"))
    }

    pub(super) fn remove_child(&self, child: &str) {
        for (_, dir) in &self.dirs {
            let _ = std::fs::remove_dir(dir.join(child));
        }
    }

    pub(super) fn remove(&self) {
        for (_, dir) in &self.dirs {
            for c in subdirs(dir) {
                let _ = std::fs::remove_dir(c);
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}
