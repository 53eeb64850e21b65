//! Resource limits through cgroups, on either kind of host:
//!
//! - **cgroup v1** (`v1`): one hierarchy per controller (memory, pids, cpu,
//!   freezer), as legacy hosts and hybrid ones mount them;
//! - **cgroup v2** (`v2`): one unified hierarchy, of which the engine uses a
//!   delegated subtree (its own cgroup, or a configured directory).
//!
//! Which one is chosen at start from what the host mounts
//! (`/proc/self/mountinfo`): the v1 controllers where all four are mounted
//! (a legacy or hybrid host), else the cgroup v2 mount. Either way a box is
//! one cgroup with its limits, and each command of the box runs in a child
//! cgroup of it, so limits hold for the box as a whole while the engine can
//! still tell one command's processes from another's. The rest of the
//! backend sees only [`CgroupHost`] and [`BoxCgroup`].

mod v1;
mod v2;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Limits, Result, SandboxError};

/// The directory made under the engine's cgroup (or the configured root)
/// that holds the boxes' cgroups.
const PARENT: &str = "crewlet-sandbox";
/// CPU bandwidth period, in microseconds (both versions).
const CFS_PERIOD_US: u64 = 100_000;

/// The cgroups of this host that boxes are made in.
#[derive(Debug, Clone)]
pub(crate) enum CgroupHost {
    V1(v1::Host),
    V2(v2::Host),
}

impl CgroupHost {
    /// Finds where this host lets the engine make cgroups: `root` is the
    /// operator's delegated cgroup v2 directory, if any (ignored on a v1
    /// host). `Err` says why limits cannot be enforced here.
    pub(crate) fn detect(root: Option<&Path>) -> Result<Self> {
        let mountinfo = read_proc("/proc/self/mountinfo")?;
        let own = read_proc("/proc/self/cgroup")?;
        match Layout::of(&mountinfo) {
            Layout::Legacy(mounts) => {
                if let Some(r) = root {
                    tracing::warn!(cgroup_root = %r.display(), "the sandbox's cgroup_root is for cgroup v2 hosts; this host's v1 controllers are used instead");
                }
                v1::Host::detect(&mounts, &own).map(Self::V1)
            }
            Layout::Unified(mount) => {
                // The engine moves itself out of its own cgroup only.
                let (dir, ours) = match (root, v2::own_dir(&mount, &own)) {
                    (Some(r), own_dir) => (r.to_path_buf(), own_dir.is_ok_and(|o| o == r)),
                    (None, own_dir) => (own_dir?, true),
                };
                v2::Host::setup(&dir, ours, std::process::id()).map(Self::V2)
            }
            Layout::Missing => Err(unavailable(
                "no cgroup v1 controllers (memory, pids, cpu, freezer) nor a cgroup v2 hierarchy is mounted",
            )),
        }
    }

    /// `None` on a v1 host; the delegated directory on a v2 one.
    pub(crate) fn describe(&self) -> Option<PathBuf> {
        match self {
            Self::V1(_) => None,
            Self::V2(h) => Some(h.root().to_path_buf()),
        }
    }

    /// Makes a box's cgroup(s) with its limits.
    pub(crate) fn make_box(&self, id: &str, limits: &Limits) -> Result<BoxCgroup> {
        if let Some(cpus) = limits.cpus
            && !(cpus.is_finite() && cpus > 0.0)
        {
            return Err(SandboxError::Invalid(format!(
                "cpus must be above 0, got {cpus}"
            )));
        }
        match self {
            Self::V1(h) => h.make_box(id, limits).map(BoxCgroup::V1),
            Self::V2(h) => h.make_box(id, limits).map(BoxCgroup::V2),
        }
    }
}

/// One box's cgroup(s), as kept in its `box.json`.
///
/// Untagged: a v1 box is `{"dirs": [...]}` as it always was, a v2 box
/// `{"v2": "<dir>"}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum BoxCgroup {
    V1(v1::BoxCgroup),
    V2(v2::BoxCgroup),
}

impl BoxCgroup {
    /// Makes the child cgroup of one command and returns the `cgroup.procs`
    /// files its launcher writes its pid into (one per v1 controller; one
    /// on v2).
    pub(crate) fn make_child(&self, child: &str) -> Result<Vec<PathBuf>> {
        check_name(child)?;
        match self {
            Self::V1(c) => c.make_child(child),
            Self::V2(c) => c.make_child(child).map(|p| vec![p]),
        }
    }

    /// Processes of one command (`Some`) or of the whole box (`None`).
    pub(crate) fn pids(&self, child: Option<&str>) -> Vec<i32> {
        match self {
            Self::V1(c) => c.pids(child),
            Self::V2(c) => c.pids(child),
        }
    }

    /// Kills every process of one command or of the whole box, and waits
    /// (boundedly) until the kernel has taken them out.
    pub(crate) async fn kill(&self, child: Option<&str>) {
        match self {
            Self::V1(c) => c.kill(child).await,
            Self::V2(c) => c.kill(child).await,
        }
    }

    /// Freezes (pauses) or thaws the whole box and waits until the kernel
    /// says it is done.
    pub(crate) async fn freeze(&self, frozen: bool) -> Result<()> {
        match self {
            Self::V1(c) => c.freeze(frozen).await,
            Self::V2(c) => c.freeze(frozen).await,
        }
    }

    /// How many times the kernel's OOM killer has killed in this box.
    pub(crate) fn oom_kills(&self) -> u64 {
        match self {
            Self::V1(c) => c.oom_kills(),
            Self::V2(c) => c.oom_kills(),
        }
    }

    /// Removes one command's cgroup (it must be empty).
    pub(crate) fn remove_child(&self, child: &str) {
        if check_name(child).is_err() {
            return;
        }
        match self {
            Self::V1(c) => c.remove_child(child),
            Self::V2(c) => c.remove_child(child),
        }
    }

    /// Removes the box's cgroups (they must be empty).
    pub(crate) fn remove(&self) {
        match self {
            Self::V1(c) => c.remove(),
            Self::V2(c) => c.remove(),
        }
    }
}

/// What the host mounts, as far as the sandbox cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Every v1 controller the sandbox needs is mounted (a legacy host, or a
    /// hybrid one whose v2 hierarchy has no controllers): `(mount point,
    /// mount root, controllers)` per v1 hierarchy.
    Legacy(Vec<V1Mount>),
    /// The cgroup v2 hierarchy's mount point (`/sys/fs/cgroup` on a unified
    /// host).
    Unified(PathBuf),
    /// Neither.
    Missing,
}

/// One mounted v1 hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct V1Mount {
    pub dir: PathBuf,
    /// The cgroup this mount shows as its top (`/` unless the mount is of a
    /// sub-hierarchy, as in some containers).
    pub root: String,
    pub controllers: Vec<String>,
}

impl Layout {
    /// Reads `/proc/self/mountinfo` text (see proc(5): the fields after the
    /// ` - ` separator are the file system type, the source and the super
    /// options, which name a v1 hierarchy's controllers).
    pub(crate) fn of(mountinfo: &str) -> Self {
        let mut v1 = Vec::new();
        let mut v2 = None;
        for line in mountinfo.lines() {
            let Some((before, after)) = line.split_once(" - ") else {
                continue;
            };
            let pre: Vec<&str> = before.split(' ').collect();
            let post: Vec<&str> = after.split(' ').collect();
            let (Some(root), Some(dir), Some(fstype)) = (pre.get(3), pre.get(4), post.first())
            else {
                continue;
            };
            match *fstype {
                "cgroup" => {
                    let opts = post.get(2).copied().unwrap_or_default();
                    v1.push(V1Mount {
                        dir: PathBuf::from(unescape(dir)),
                        root: unescape(root),
                        controllers: opts.split(',').map(str::to_owned).collect(),
                    });
                }
                "cgroup2" if v2.is_none() => v2 = Some(PathBuf::from(unescape(dir))),
                _ => {}
            }
        }
        let all_v1 = v1::CONTROLLERS
            .iter()
            .all(|c| v1.iter().any(|m| m.controllers.iter().any(|o| o == c)));
        match (all_v1, v2) {
            (true, _) => Self::Legacy(v1),
            (false, Some(dir)) => Self::Unified(dir),
            (false, None) => Self::Missing,
        }
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space, and so on).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        if let Some(n) = octal
            .map(|d| d.iter().fold(0u32, |n, b| n * 8 + u32::from(b - b'0')))
            .and_then(|n| u8::try_from(n).ok())
        {
            out.push(n);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A box id or command name that is a single plain path component.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
        return Err(SandboxError::Invalid(format!("bad cgroup name `{name}`")));
    }
    Ok(())
}

fn read_proc(path: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| SandboxError::io(path, e))
}

/// Writes a cgroup control file, which must exist: the kernel makes them,
/// and creating one where it did not would hide a missing controller.
fn write(path: &Path, value: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .map_err(|e| SandboxError::io(path, e))?;
    f.write_all(value.as_bytes())
        .map_err(|e| SandboxError::io(path, e))
}

/// Pids in `dir/cgroup.procs` and every cgroup below it.
fn collect_pids(dir: &Path, out: &mut Vec<i32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    for sub in subdirs(dir) {
        collect_pids(&sub, out);
    }
}

/// The child cgroups of `dir`.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|es| {
            es.flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

fn unavailable(why: &str) -> SandboxError {
    SandboxError::Unavailable(format!("resource limits: {why}"))
}

/// This process's path in the hierarchy whose `/proc/self/cgroup` line
/// matches `wanted` (a v1 controller, or `""` for the v2 line `0::`).
fn own_path(proc_cgroup: &str, wanted: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        let hit = if wanted.is_empty() {
            controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == wanted)
        };
        hit.then(|| path.to_owned())
    })
}

/// The directory of cgroup `path` (as `/proc/self/cgroup` gives it) under a
/// mount that shows cgroup `mount_root` at its top.
fn under_mount(mount: &Path, mount_root: &str, path: &str) -> PathBuf {
    let rel = if mount_root == "/" {
        path
    } else {
        path.strip_prefix(mount_root).unwrap_or(path)
    };
    mount.join(rel.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A legacy (v1 only) host, as Debian 10 or this machine's container mount it.
    const LEGACY: &str = "\
22 1 0:21 / / rw,relatime - overlay overlay rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
";

    /// A hybrid host: v1 controllers plus an (empty) v2 hierarchy.
    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
41 31 0:38 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
";

    /// A unified host (Debian 11+, Ubuntu 21.10+, Fedora 31+).
    const UNIFIED: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
26 22 0:23 / /sys rw,nosuid shared:7 - sysfs sysfs rw
27 26 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:8 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

    #[test]
    fn the_layout_comes_from_what_is_mounted() {
        match Layout::of(LEGACY) {
            Layout::Legacy(m) => {
                assert_eq!(m.len(), 5);
                assert_eq!(m[0].dir, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
                assert_eq!(m[0].controllers, ["rw", "cpu", "cpuacct"]);
            }
            other => panic!("legacy: {other:?}"),
        }
        assert!(matches!(Layout::of(HYBRID), Layout::Legacy(_)));
        assert_eq!(
            Layout::of(UNIFIED),
            Layout::Unified(PathBuf::from("/sys/fs/cgroup"))
        );
        // A hybrid host missing a v1 controller the sandbox needs falls to
        // its v2 hierarchy (where making the box says what is missing).
        let no_freezer: String = HYBRID
            .lines()
            .filter(|l| !l.contains("freezer"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            Layout::of(&no_freezer),
            Layout::Unified(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            Layout::of("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"),
            Layout::Missing
        );
        // Mount points with escaped characters.
        let odd = "27 26 0:24 / /mnt/my\\040cgroups rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            Layout::of(odd),
            Layout::Unified(PathBuf::from("/mnt/my cgroups"))
        );
    }

    #[test]
    fn own_paths_come_from_proc_self_cgroup() {
        let own = "4:memory:/process_api/ee39\n2:cpu,cpuacct:/\n0::/user.slice/crewlet.service\n";
        assert_eq!(
            own_path(own, "memory").as_deref(),
            Some("/process_api/ee39")
        );
        assert_eq!(own_path(own, "cpuacct").as_deref(), Some("/"));
        assert_eq!(own_path(own, "pids"), None);
        assert_eq!(
            own_path(own, "").as_deref(),
            Some("/user.slice/crewlet.service")
        );
        assert_eq!(
            under_mount(Path::new("/sys/fs/cgroup"), "/", "/a/b"),
            PathBuf::from("/sys/fs/cgroup/a/b")
        );
        // A mount of a sub-hierarchy shows its root at the mount point.
        assert_eq!(
            under_mount(
                Path::new("/sys/fs/cgroup/memory"),
                "/docker/x",
                "/docker/x/y"
            ),
            PathBuf::from("/sys/fs/cgroup/memory/y")
        );
    }

    #[test]
    fn names_are_single_components() {
        for bad in ["", ".", "..", "a/b", "a\0"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name("exec-0123").is_ok());
    }
}
