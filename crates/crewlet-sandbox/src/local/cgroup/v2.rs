//! cgroup v2: one unified hierarchy, of which the engine uses a delegated
//! subtree (see the kernel's Documentation/admin-guide/cgroup-v2.rst).
//!
//! ```text
//! <root>/                     the engine's own cgroup, or the configured one
//!   crewlet-engine/           the engine's processes, moved here when <root>
//!                             is its own cgroup ("no internal processes")
//!   crewlet-sandbox/          memory, pids and cpu enabled for its children
//!     <box>/                  memory.max, memory.swap.max, pids.max, cpu.max
//!       <exec-…|run-…>/       one command's processes (cgroup.procs)
//! ```
//!
//! A box's limits sit on the box's cgroup, which holds no process itself:
//! every process is in a command's child, so the rule that only leaves hold
//! processes is kept, and the limits (hierarchical in v2) cover all of them.
//! `cgroup.freeze` pauses the box (done when `cgroup.events` says `frozen
//! 1`), `cgroup.kill` ends a command or the box, and `memory.events` counts
//! its OOM kills.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    CFS_PERIOD_US, PARENT, collect_pids, own_path, subdirs, unavailable, under_mount, write,
};
use crate::{Limits, Result, SandboxError};

/// The controllers a box needs.
const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];
/// The leaf the engine's own processes move to.
const ENGINE_LEAF: &str = "crewlet-engine";
/// How long the kernel may take to freeze, thaw or empty a cgroup before
/// the engine gives up. Far above what it takes, even on a loaded host.
const SETTLE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(10);

/// The engine's delegated cgroup v2 subtree.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    root: PathBuf,
    base: PathBuf,
}

/// The engine's own cgroup directory under the v2 mount, from
/// `/proc/self/cgroup` (its `0::<path>` line). When the engine already moved
/// itself to its leaf (a second backend in the same process), its parent.
pub(super) fn own_dir(mount: &Path, proc_cgroup: &str) -> Result<PathBuf> {
    let path = own_path(proc_cgroup, "")
        .ok_or_else(|| unavailable("/proc/self/cgroup has no cgroup v2 (`0::`) line"))?;
    let dir = under_mount(mount, "/", &path);
    Ok(match dir.file_name() {
        Some(name) if name == ENGINE_LEAF => dir.parent().map(Path::to_path_buf).unwrap_or(dir),
        _ => dir,
    })
}

impl Host {
    /// Readies `root` for boxes: checks the controllers are there, keeps
    /// the no-internal-processes rule (moving the engine, process `pid`,
    /// to a leaf when `root` is its own cgroup: `ours`), enables memory,
    /// pids and cpu for the children, and makes the sandbox's parent.
    pub(super) fn setup(root: &Path, ours: bool, pid: u32) -> Result<Self> {
        let how = "delegate a cgroup v2 subtree to the engine (a systemd unit with `Delegate=yes`, or a directory under /sys/fs/cgroup made writable for it) and name it in `providers.sandbox.local.cgroup_root` unless it is the engine's own cgroup";
        let listed = root.join("cgroup.controllers");
        let controllers = std::fs::read_to_string(&listed).map_err(|e| {
            unavailable(&format!(
                "{} is not a usable cgroup v2 directory ({e}); {how}",
                root.display()
            ))
        })?;
        let missing: Vec<&str> = CONTROLLERS
            .iter()
            .copied()
            .filter(|c| !controllers.split_whitespace().any(|have| have == *c))
            .collect();
        if !missing.is_empty() {
            return Err(unavailable(&format!(
                "the cgroup v2 controllers {} are not available in {} (its parent must enable them in cgroup.subtree_control); {how}",
                missing.join(", "),
                root.display()
            )));
        }
        // The hierarchy's own root is exempt from the rule; it has no
        // `cgroup.type`.
        let is_top = !root.join("cgroup.type").exists();
        if !is_top {
            let procs = pids_in(root);
            if !procs.is_empty() {
                if !ours {
                    return Err(unavailable(&format!(
                        "{} holds processes ({}), and cgroup v2 enables controllers only for a cgroup without processes of its own; give an empty directory, {how}",
                        root.display(),
                        list(&procs)
                    )));
                }
                let leaf = root.join(ENGINE_LEAF);
                mkdir(&leaf, how)?;
                write(&leaf.join("cgroup.procs"), &pid.to_string())?;
                let left: Vec<i32> = pids_in(root)
                    .into_iter()
                    .filter(|p| *p != pid as i32)
                    .collect();
                if !left.is_empty() {
                    return Err(unavailable(&format!(
                        "the engine's cgroup {} holds other processes too ({}), so it cannot enable controllers for boxes; run the engine in a cgroup of its own, {how}",
                        root.display(),
                        list(&left)
                    )));
                }
            }
        }
        let enable = CONTROLLERS.map(|c| format!("+{c}")).join(" ");
        write(&root.join("cgroup.subtree_control"), &enable).map_err(|e| {
            unavailable(&format!(
                "cannot enable {enable} in {}: {e}; {how}",
                root.display()
            ))
        })?;
        let base = root.join(PARENT);
        mkdir(&base, how)?;
        write(&base.join("cgroup.subtree_control"), &enable)?;
        Ok(Self {
            root: root.to_path_buf(),
            base,
        })
    }

    /// The delegated directory in use.
    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    /// Makes a box's cgroup with its limits.
    pub(super) fn make_box(&self, id: &str, limits: &Limits) -> Result<BoxCgroup> {
        let dir = self.base.join(id);
        std::fs::create_dir_all(&dir).map_err(|e| SandboxError::io(&dir, e))?;
        if let Some(mb) = limits.memory_mb {
            write(
                &dir.join("memory.max"),
                &(mb.max(8) * 1024 * 1024).to_string(),
            )?;
            // Memory and swap together stay under the limit, as with v1's
            // memsw: no swap at all. Without swap accounting the file is absent.
            let swap = dir.join("memory.swap.max");
            if swap.exists() {
                write(&swap, "0")?;
            }
        }
        if let Some(pids) = limits.pids {
            write(&dir.join("pids.max"), &pids.max(1).to_string())?;
        }
        if let Some(cpus) = limits.cpus {
            let quota = ((cpus * CFS_PERIOD_US as f64) as u64).max(1000);
            write(&dir.join("cpu.max"), &format!("{quota} {CFS_PERIOD_US}"))?;
        }
        Ok(BoxCgroup { dir })
    }
}

/// One box's cgroup.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BoxCgroup {
    #[serde(rename = "v2")]
    dir: PathBuf,
}

impl BoxCgroup {
    fn target(&self, child: Option<&str>) -> PathBuf {
        match child {
            Some(c) => self.dir.join(c),
            None => self.dir.clone(),
        }
    }

    /// Makes the child cgroup of one command; returns its `cgroup.procs`.
    pub(super) fn make_child(&self, child: &str) -> Result<PathBuf> {
        let d = self.dir.join(child);
        std::fs::create_dir_all(&d).map_err(|e| SandboxError::io(&d, e))?;
        Ok(d.join("cgroup.procs"))
    }

    pub(super) fn pids(&self, child: Option<&str>) -> Vec<i32> {
        let mut out = Vec::new();
        collect_pids(&self.target(child), &mut out);
        out
    }

    /// `cgroup.kill` (Linux 5.14+) kills every process of the cgroup and
    /// below at once, frozen ones included; then the kernel is waited for
    /// until the cgroup is empty. Without the file, SIGKILL round after
    /// round (v2 lets a fatal signal end a frozen process).
    pub(super) async fn kill(&self, child: Option<&str>) {
        let target = self.target(child);
        let kill_file = target.join("cgroup.kill");
        let has_kill = kill_file.exists();
        if has_kill && let Err(e) = write(&kill_file, "1") {
            tracing::warn!(error = %e, "sandbox: cgroup.kill failed");
        }
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let mut pids = Vec::new();
            collect_pids(&target, &mut pids);
            if pids.is_empty() {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(cgroup = %target.display(), left = pids.len(), "sandbox cgroup still has processes after being killed");
                return;
            }
            if !has_kill {
                for pid in pids {
                    crate::local::process::signal(pid, libc::SIGKILL);
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Writes `cgroup.freeze` and waits for `cgroup.events` to say `frozen
    /// 1` (or `0`): freezing finishes only once every task has stopped.
    pub(super) async fn freeze(&self, frozen: bool) -> Result<()> {
        let want = if frozen { "1" } else { "0" };
        write(&self.dir.join("cgroup.freeze"), want)?;
        let events = self.dir.join("cgroup.events");
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            let text =
                std::fs::read_to_string(&events).map_err(|e| SandboxError::io(&events, e))?;
            if key_value(&text, "frozen").as_deref() == Some(want) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(SandboxError::Api(format!(
                    "the box's cgroup did not report `frozen {want}` within {} s",
                    SETTLE.as_secs()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// `oom_kill` of the box's `memory.events`, which counts the whole
    /// subtree (the commands' cgroups have no memory controller of their
    /// own, so their processes are charged to the box).
    pub(super) fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("memory.events"))
            .ok()
            .and_then(|t| key_value(&t, "oom_kill"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }

    pub(super) fn remove_child(&self, child: &str) {
        let _ = std::fs::remove_dir(self.dir.join(child));
    }

    pub(super) fn remove(&self) {
        for c in subdirs(&self.dir) {
            let _ = std::fs::remove_dir(c);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The value of `key` in a flat-keyed cgroup file (`key value` lines).
fn key_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().to_owned())
    })
}

/// The pids directly in `dir` (not below it).
fn pids_in(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

fn list(pids: &[i32]) -> String {
    let shown: Vec<String> = pids.iter().take(8).map(i32::to_string).collect();
    let more = if pids.len() > 8 { ", …" } else { "" };
    format!("pids {}{more}", shown.join(", "))
}

fn mkdir(dir: &Path, how: &str) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| unavailable(&format!("cannot make {} ({e}); {how}", dir.display())))
}

#[cfg(test)]
#[path = "v2_tests.rs"]
mod tests;
