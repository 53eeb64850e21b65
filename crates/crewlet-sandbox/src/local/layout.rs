//! A box on the host's disk: `<state_dir>/<box>/` holds `home/` (the box's
//! `/home/user`), `etc/` (its passwd, group and hosts), `box.json` (what it
//! is), `runs/` (the host side of its detached runs) and `alive` (the
//! keepalive deadline). Only `home/` is visible inside the box: the
//! engine's own files beside it are plain host files, and what is under
//! `home/` is opened only through [`HomeFs`].

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::cgroup::BoxCgroup;
use super::rootfs::HomeFs;
use crate::{HOME, Limits, Network, Result, SandboxError, WORKSPACE};

/// What is kept of a box on disk. No environment values: those are
/// credentials and live in memory only.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BoxMeta {
    pub id: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub network: Network,
    pub limits: Limits,
    pub labels: BTreeMap<String, String>,
    pub cgroup: Option<BoxCgroup>,
}

/// The host side of one detached run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunMeta {
    /// Process group of the run's launcher on the host.
    pub pgid: i32,
    /// The launcher's start time (`/proc/<pid>/stat`), which tells it from
    /// a later process with the same pid. Runs recorded before it was kept
    /// are recognised by their command line instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ticks: Option<u64>,
    pub started_at: chrono::DateTime<chrono::Utc>,
}

/// Paths of one box.
#[derive(Debug, Clone)]
pub(crate) struct BoxDir {
    pub root: PathBuf,
}

impl BoxDir {
    pub fn new(state_dir: &Path, id: &str) -> Self {
        Self {
            root: state_dir.join(id),
        }
    }

    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    pub fn meta_path(&self) -> PathBuf {
        self.root.join("box.json")
    }

    pub fn run_meta_path(&self, run: &str) -> PathBuf {
        self.root.join("runs").join(format!("{run}.json"))
    }

    /// The in-box directory where a detached run leaves its output.
    pub fn run_box_dir(run: &str) -> String {
        format!("{HOME}/.crewlet/runs/{run}")
    }

    pub fn alive_path(&self) -> PathBuf {
        self.root.join("alive")
    }

    pub fn exists(&self) -> bool {
        self.meta_path().is_file()
    }

    /// Lays a new box out.
    pub fn make(&self, meta: &BoxMeta) -> Result<()> {
        let mk = |p: PathBuf| std::fs::create_dir_all(&p).map_err(|e| SandboxError::io(p, e));
        mk(self.home().join("workspace"))?;
        mk(self.home().join(".crewlet").join("runs"))?;
        mk(self.root.join("etc"))?;
        mk(self.root.join("runs"))?;
        // The box's files are owned by the engine's user on the host (its
        // uid 1000 maps to it), set-uid bits included: no other host user
        // may reach them.
        std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| SandboxError::io(&self.root, e))?;
        let etc = self.root.join("etc");
        let files = [
            (
                "passwd",
                "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n",
            ),
            ("group", "root:x:0:\nuser:x:1000:\n"),
            ("hosts", "127.0.0.1 localhost crewlet-box\n::1 localhost\n"),
        ];
        for (name, text) in files {
            let p = etc.join(name);
            std::fs::write(&p, text).map_err(|e| SandboxError::io(p, e))?;
        }
        self.save_meta(meta)
    }

    pub fn save_meta(&self, meta: &BoxMeta) -> Result<()> {
        write_json(&self.meta_path(), meta)
    }

    pub fn load_meta(&self) -> Result<BoxMeta> {
        read_json(&self.meta_path())
    }

    pub fn save_run(&self, run: &str, meta: &RunMeta) -> Result<()> {
        write_json(&self.run_meta_path(run), meta)
    }

    pub fn load_run(&self, run: &str) -> Result<Option<RunMeta>> {
        if !plain_name(run) {
            return Ok(None);
        }
        let p = self.run_meta_path(run);
        if !p.is_file() {
            return Ok(None);
        }
        read_json(&p).map(Some)
    }

    pub fn run_ids(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.root.join("runs")) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".json")
                    .map(str::to_owned)
            })
            .collect()
    }

    /// The box's home, open for the engine's file operations: every path
    /// under it is resolved by the kernel beneath it, following no link.
    pub fn home_fs(&self) -> Result<HomeFs> {
        HomeFs::open(&self.home())
    }

    /// An in-box path as a path relative to the home, refusing anything
    /// outside it. Only the words are checked here; what is on disk (links
    /// the box made) is the business of [`HomeFs`], which opens without
    /// ever leaving the home.
    pub fn home_rel(in_box: &str) -> Result<PathBuf> {
        let outside = || SandboxError::PathOutside(in_box.to_owned());
        let full = if in_box.starts_with('/') {
            PathBuf::from(in_box)
        } else {
            Path::new(WORKSPACE).join(in_box)
        };
        let rel = full.strip_prefix(HOME).map_err(|_| outside())?;
        if rel.components().any(|c| !matches!(c, Component::Normal(_)))
            || rel.as_os_str().is_empty()
        {
            return Err(outside());
        }
        Ok(rel.to_path_buf())
    }

    /// Where a detached run leaves its output, relative to the home.
    pub fn run_home_rel(run: &str) -> PathBuf {
        Path::new(".crewlet/runs").join(run)
    }
}

/// True for a run id the backend could have made: one plain file name.
fn plain_name(run: &str) -> bool {
    !run.is_empty() && !run.starts_with('.') && !run.contains(['/', '\0'])
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(value)
        .map_err(|e| SandboxError::Invalid(format!("encode {}: {e}", path.display())))?;
    std::fs::write(&tmp, text).map_err(|e| SandboxError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| SandboxError::io(path, e))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T> {
    let text = std::fs::read(path).map_err(|e| SandboxError::io(path, e))?;
    serde_json::from_slice(&text)
        .map_err(|e| SandboxError::Invalid(format!("decode {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_box() -> (PathBuf, BoxDir) {
        let state = std::env::temp_dir().join(format!("crewlet-layout-{}", uuid::Uuid::new_v4()));
        let dir = BoxDir::new(&state, "b1");
        let meta = BoxMeta {
            id: "b1".into(),
            created_at: chrono::Utc::now(),
            network: Network::None,
            limits: Limits::none(),
            labels: BTreeMap::new(),
            cgroup: None,
        };
        dir.make(&meta)
            .map(|_| (state, dir))
            .unwrap_or_else(|e| panic!("make: {e}"))
    }

    #[test]
    fn paths_stay_in_the_home() {
        let (state, dir) = temp_box();
        assert!(dir.home_fs().is_ok());
        let mode = std::fs::metadata(&dir.root).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode.ok(), Some(0o700), "other host users reach the box");
        assert_eq!(
            BoxDir::home_rel("a/b.txt").ok(),
            Some(PathBuf::from("workspace/a/b.txt"))
        );
        assert_eq!(
            BoxDir::home_rel("/home/user/x").ok(),
            Some(PathBuf::from("x"))
        );
        for bad in [
            "/etc/passwd",
            "../x",
            "/home/user/../../etc",
            "/home/user",
            "/home/userx/a",
        ] {
            assert!(
                matches!(BoxDir::home_rel(bad), Err(SandboxError::PathOutside(_))),
                "{bad}"
            );
        }
        assert!(plain_name("run-0123"));
        for bad in ["", "..", "../x", "a/b", ".hidden"] {
            assert!(!plain_name(bad), "{bad}");
        }
        let _ = std::fs::remove_dir_all(state);
    }
}
