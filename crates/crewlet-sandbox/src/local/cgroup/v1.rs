//! Resource limits through cgroup v1 controllers: memory (with swap), pids,
//! cpu bandwidth, and the freezer for pausing.
//!
//! A box gets a directory under `<controller>/<engine's own cgroup>/crewlet-sandbox/<box>`
//! in each controller, with its limits; each command of the box runs in a
//! child directory of it, so limits hold for the box as a whole while the
//! engine can still tell one command's processes from another's.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Limits, Result, SandboxError};

const CONTROLLERS: [&str; 4] = ["memory", "pids", "cpu", "freezer"];
const PARENT: &str = "crewlet-sandbox";
const CFS_PERIOD_US: u64 = 100_000;

/// Where this host's cgroup v1 controllers are, with this process's place in
/// each.
#[derive(Debug, Clone)]
pub(crate) struct CgroupHost {
    /// `(controller, <mount>/<own path>/crewlet-sandbox)`.
    bases: Vec<(String, PathBuf)>,
}

impl CgroupHost {
    /// Finds the writable cgroup v1 controllers; `Err` says why limits cannot
    /// be enforced here.
    pub(crate) fn detect() -> Result<Self> {
        let mounts = std::fs::read_to_string("/proc/self/mounts")
            .map_err(|e| SandboxError::io("/proc/self/mounts", e))?;
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| SandboxError::io("/proc/self/cgroup", e))?;
        let mut bases = Vec::new();
        for controller in CONTROLLERS {
            let Some(mount) = mount_of(&mounts, controller) else {
                return Err(unavailable(&format!(
                    "no cgroup v1 `{controller}` controller is mounted (a cgroup v2-only host is not supported yet)"
                )));
            };
            let path = own_path(&own, controller).unwrap_or_else(|| "/".to_owned());
            let base = mount.join(path.trim_start_matches('/')).join(PARENT);
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
    pub(crate) fn make_box(&self, id: &str, limits: &Limits) -> Result<BoxCgroup> {
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
            if !(cpus.is_finite() && cpus > 0.0) {
                return Err(SandboxError::Invalid(format!(
                    "cpus must be above 0, got {cpus}"
                )));
            }
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

    /// Makes the child cgroup of one command and returns the `cgroup.procs`
    /// files its launcher writes its pid into.
    pub(crate) fn make_child(&self, child: &str) -> Result<Vec<PathBuf>> {
        let mut procs = Vec::new();
        for (_, dir) in &self.dirs {
            let d = dir.join(child);
            std::fs::create_dir_all(&d).map_err(|e| SandboxError::io(&d, e))?;
            procs.push(d.join("cgroup.procs"));
        }
        Ok(procs)
    }

    /// Processes of one command (`Some`) or of the whole box (`None`).
    pub(crate) fn pids(&self, child: Option<&str>) -> Vec<i32> {
        let root = self.dir("pids");
        let start = match child {
            Some(c) => root.join(c),
            None => root,
        };
        let mut out = Vec::new();
        collect_pids(&start, &mut out);
        out
    }

    /// Kills every process of one command or of the whole box, and waits
    /// (boundedly) until the kernel has taken them out.
    pub(crate) async fn kill(&self, child: Option<&str>) {
        for _ in 0..200 {
            let pids = self.pids(child);
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                super::process::signal(pid, libc::SIGKILL);
            }
            // A frozen process dies only once thawed.
            if child.is_none() {
                let _ = write(&self.dir("freezer").join("freezer.state"), "THAWED");
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        tracing::warn!("sandbox cgroup still has processes after 200 kill rounds");
    }

    /// Freezes (pauses) or thaws the whole box, and waits (boundedly) until
    /// the kernel reports it done: freezing is asynchronous in cgroup v1
    /// (`FREEZING` until every task has stopped).
    pub(crate) async fn freeze(&self, frozen: bool) -> Result<()> {
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

    /// How many times the kernel's OOM killer has killed in this box and its
    /// commands' cgroups (the kill is counted where the limit was hit, and
    /// under cgroup v1 that may be either).
    pub(crate) fn oom_kills(&self) -> u64 {
        fn walk(dir: &Path) -> u64 {
            let own = std::fs::read_to_string(dir.join("memory.oom_control"))
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("oom_kill "))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            let children = std::fs::read_dir(dir)
                .map(|es| {
                    es.flatten()
                        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                        .map(|e| walk(&e.path()))
                        .sum()
                })
                .unwrap_or(0);
            own + children
        }
        walk(&self.dir("memory"))
    }

    /// Removes one command's cgroup (it must be empty).
    pub(crate) fn remove_child(&self, child: &str) {
        for (_, dir) in &self.dirs {
            let _ = std::fs::remove_dir(dir.join(child));
        }
    }

    /// Removes the box's cgroups (they must be empty).
    pub(crate) fn remove(&self) {
        for (_, dir) in &self.dirs {
            if let Ok(children) = std::fs::read_dir(dir) {
                for c in children.flatten() {
                    if c.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                        let _ = std::fs::remove_dir(c.path());
                    }
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn collect_pids(dir: &Path, out: &mut Vec<i32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(children) = std::fs::read_dir(dir) {
        for c in children.flatten() {
            if c.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                collect_pids(&c.path(), out);
            }
        }
    }
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|e| SandboxError::io(path, e))
}

fn unavailable(why: &str) -> SandboxError {
    SandboxError::Unavailable(format!("resource limits: {why}"))
}

/// The mount point of a v1 hierarchy carrying `controller`.
fn mount_of(mounts: &str, controller: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (_, dir, fstype, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
        (fstype == "cgroup" && opts.split(',').any(|o| o == controller)).then(|| PathBuf::from(dir))
    })
}

/// This process's path in the hierarchy carrying `controller`.
fn own_path(proc_cgroup: &str, controller: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_mounts_and_own_paths() {
        let mounts = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0\n\
                      cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n";
        assert_eq!(
            mount_of(mounts, "cpu"),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"))
        );
        assert_eq!(
            mount_of(mounts, "memory"),
            Some(PathBuf::from("/sys/fs/cgroup/memory"))
        );
        assert_eq!(mount_of(mounts, "pids"), None);
        let own = "4:memory:/process_api/ee39\n2:cpu,cpuacct:/\n0::/\n";
        assert_eq!(
            own_path(own, "memory").as_deref(),
            Some("/process_api/ee39")
        );
        assert_eq!(own_path(own, "cpuacct").as_deref(), Some("/"));
        assert_eq!(own_path(own, "pids"), None);
    }
}
