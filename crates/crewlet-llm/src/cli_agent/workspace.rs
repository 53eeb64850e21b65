//! Where a CLI runs: one home per seat, one scratch directory per call, an
//! environment built from an allowlist.
//!
//! ```text
//! <state_dir>/
//!   credentials/             the provider's login, one for every seat
//!   seats/<seat>/home/       HOME, XDG config/data/state, vendor dirs
//!   seats/<seat>/cache/      XDG_CACHE_HOME (no conversation in it)
//!   seats/<seat>/work/<id>/  cwd of one call, removed after it
//! ```
//!
//! A seat's conversation state (the profile's `volatile_paths`) is removed
//! when its first concurrent call starts and when its last one ends: calls
//! of one seat (a turn and its sub-agents) share a home, but nothing
//! survives into the next turn and nothing crosses seats. Those counts
//! belong to the directory, not to a provider value, so two entries sharing
//! a `state_dir` (or a reloaded provider) never prune each other's live run.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use indexmap::IndexMap;
use parking_lot::Mutex;

use super::CliAgentError;
use super::profile::{CliProfile, HOME_PLACEHOLDER};

/// Host variables every CLI gets: finding programs, locale, TLS trust and
/// proxies. An allowlist, so a secret added to the engine's environment
/// later is not handed to the CLI by default.
pub const BASE_ENV: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "LC_NUMERIC",
    "TERM",
    "TZ",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// Per-directory generation counts and the credential lock.
#[derive(Default)]
struct DirState {
    seats: Mutex<HashMap<String, Arc<Mutex<usize>>>>,
    credentials: Mutex<()>,
}

static DIRS: LazyLock<Mutex<HashMap<PathBuf, Arc<DirState>>>> = LazyLock::new(Default::default);

fn dir_state(state_dir: &Path) -> Arc<DirState> {
    // Lexical, not canonical: the directory may not exist yet on the first call.
    let key = std::path::absolute(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    DIRS.lock().entry(key).or_default().clone()
}

/// One provider's state directory.
#[derive(Clone)]
pub struct Workspace {
    profile: Arc<CliProfile>,
    state_dir: PathBuf,
    /// Credential variables then the operator's `cli.env`, applied last.
    extra_env: IndexMap<String, String>,
}

/// The place one call runs in; dropping it ends the call (its scratch
/// directory is removed, and the last call of a seat prunes the home).
pub struct SeatLease {
    pub seat: String,
    pub home: PathBuf,
    pub work: PathBuf,
    pub env: Vec<(String, String)>,
    counter: Arc<Mutex<usize>>,
    workspace: Workspace,
}

impl Workspace {
    pub fn new(
        profile: Arc<CliProfile>,
        state_dir: PathBuf,
        extra_env: IndexMap<String, String>,
    ) -> Self {
        Self {
            profile,
            state_dir,
            extra_env,
        }
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The shared login, laid out like a home (`.claude/.credentials.json`).
    pub fn credential_dir(&self) -> PathBuf {
        self.state_dir.join("credentials")
    }

    pub fn seat_root(&self, seat: &str) -> PathBuf {
        self.state_dir
            .join("seats")
            .join(super::scope::sanitize(seat))
    }

    /// The profile's credential files present in `credentials/`.
    pub fn credential_files(&self) -> Vec<String> {
        let dir = self.credential_dir();
        self.profile
            .credential_paths
            .iter()
            .filter(|rel| safe_join(&dir, rel).is_some_and(|p| p.is_file()))
            .cloned()
            .collect()
    }

    /// Prepares a call for `seat`.
    pub fn acquire(&self, seat: &str) -> Result<SeatLease, CliAgentError> {
        let seat = super::scope::sanitize(seat);
        let root = self.seat_root(&seat);
        let home = root.join("home");
        let counter = dir_state(&self.state_dir)
            .seats
            .lock()
            .entry(seat.clone())
            .or_default()
            .clone();
        {
            let mut in_flight = counter.lock();
            if *in_flight == 0 {
                make_dir(&self.credential_dir())?;
                make_dir(&home)?;
                make_dir(&root.join("cache"))?;
                self.prune(&home);
                self.seed_files(&home)?;
                self.seed_credentials(&home);
            }
            *in_flight += 1;
        }
        // From here the lease's Drop undoes the count, whatever fails next.
        static CALLS: AtomicU64 = AtomicU64::new(0);
        let id = format!(
            "{}-{}",
            std::process::id(),
            CALLS.fetch_add(1, Ordering::Relaxed)
        );
        let mut lease = SeatLease {
            seat,
            work: root.join("work").join(id),
            env: Vec::new(),
            home,
            counter,
            workspace: self.clone(),
        };
        make_dir(&lease.work.join(".tmp"))?;
        lease.env = self.env_for(&lease.home, &lease.work);
        Ok(lease)
    }

    /// The child's whole environment; the caller clears everything else.
    /// Later entries win: host allowlist, home and XDG, TMPDIR, the
    /// vendor's directory variables, the profile's fixed env, credentials,
    /// the operator's `cli.env`.
    pub fn env_for(&self, home: &Path, work: &Path) -> Vec<(String, String)> {
        let mut env: IndexMap<String, String> = IndexMap::new();
        for name in BASE_ENV
            .iter()
            .copied()
            .chain(self.profile.passthrough_env.iter().map(String::as_str))
        {
            if let Some(value) = std::env::var_os(name).and_then(|v| v.into_string().ok()) {
                env.insert(name.to_owned(), value);
            }
        }
        let home_s = home.display().to_string();
        for name in &self.profile.home_env {
            env.insert(name.clone(), home_s.clone());
        }
        if self.profile.xdg {
            env.insert("XDG_CONFIG_HOME".into(), path_str(&home.join(".config")));
            env.insert("XDG_DATA_HOME".into(), path_str(&home.join(".local/share")));
            env.insert(
                "XDG_STATE_HOME".into(),
                path_str(&home.join(".local/state")),
            );
            if let Some(root) = home.parent() {
                env.insert("XDG_CACHE_HOME".into(), path_str(&root.join("cache")));
            }
        }
        env.insert("TMPDIR".into(), path_str(&work.join(".tmp")));
        for (name, rel) in &self.profile.dir_env {
            env.insert(name.clone(), path_str(&home.join(rel)));
        }
        for (name, value) in &self.profile.env {
            env.insert(name.clone(), value.replace(HOME_PLACEHOLDER, &home_s));
        }
        for (name, value) in &self.extra_env {
            env.insert(name.clone(), value.replace(HOME_PLACEHOLDER, &home_s));
        }
        env.into_iter().collect()
    }

    /// Removes the profile's conversation state under `home`.
    pub fn prune(&self, home: &Path) {
        for rel in &self.profile.volatile_paths {
            if let Some(path) = safe_join(home, rel) {
                remove(&path);
            }
        }
    }

    fn seed_files(&self, home: &Path) -> Result<(), CliAgentError> {
        for (rel, content) in &self.profile.seed_files {
            let Some(path) = safe_join(home, rel) else {
                continue;
            };
            if let Some(parent) = path.parent() {
                make_dir(parent)?;
            }
            write_private(&path, content.as_bytes()).map_err(|source| {
                CliAgentError::Workspace {
                    path: path.clone(),
                    source,
                }
            })?;
        }
        Ok(())
    }

    /// Copies the shared login into `home`; a login file the shared store
    /// no longer has is removed (it is a stale login, e.g. after a logout).
    fn seed_credentials(&self, home: &Path) {
        let state = dir_state(&self.state_dir);
        let _guard = state.credentials.lock();
        let shared = self.credential_dir();
        for rel in &self.profile.credential_paths {
            let (Some(src), Some(dst)) = (safe_join(&shared, rel), safe_join(home, rel)) else {
                continue;
            };
            if src.is_file() {
                if let Err(e) = copy_private(&src, &dst) {
                    tracing::warn!(file = %rel, error = %e, "cli-agent: cannot seed a credential file");
                }
            } else {
                remove(&dst);
            }
        }
    }

    /// Writes a login the CLI refreshed during the generation back to the
    /// shared store (refresh tokens rotate: dropping the new one logs every
    /// seat out). Only files the store already has: a logout stays a logout.
    fn collect_credentials(&self, home: &Path) {
        let state = dir_state(&self.state_dir);
        let _guard = state.credentials.lock();
        let shared = self.credential_dir();
        for rel in &self.profile.credential_paths {
            let (Some(src), Some(dst)) = (safe_join(home, rel), safe_join(&shared, rel)) else {
                continue;
            };
            if !src.is_file() || !dst.is_file() {
                continue;
            }
            if fs::read(&src).ok() != fs::read(&dst).ok() {
                match copy_private(&src, &dst) {
                    Ok(()) => {
                        tracing::info!(file = %rel, "cli-agent: refreshed login written back")
                    }
                    Err(e) => {
                        tracing::warn!(file = %rel, error = %e, "cli-agent: cannot write back a refreshed login")
                    }
                }
            }
        }
    }
}

impl Drop for SeatLease {
    fn drop(&mut self) {
        remove(&self.work);
        let mut in_flight = self.counter.lock();
        *in_flight = in_flight.saturating_sub(1);
        if *in_flight == 0 {
            self.workspace.collect_credentials(&self.home);
            self.workspace.prune(&self.home);
        }
    }
}

fn path_str(path: &Path) -> String {
    path.display().to_string()
}

/// `base/rel` when `rel` is a plain relative path that stays under `base`.
pub fn safe_join(base: &Path, rel: &str) -> Option<PathBuf> {
    let rel = Path::new(rel);
    let plain = rel
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    (plain && rel.components().any(|c| matches!(c, Component::Normal(_)))).then(|| base.join(rel))
}

/// Creates `path` and its missing parents, each `0700` (credentials and
/// prompts live under them), and makes `path` itself `0700`.
pub(crate) fn make_dir(path: &Path) -> Result<(), CliAgentError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    let made = builder.create(path).and_then(|()| restrict(path, 0o700));
    made.map_err(|source| CliAgentError::Workspace {
        path: path.to_path_buf(),
        source,
    })
}

/// Removes a file, link or directory tree; a failure is only logged (a
/// straggler must not fail a finished call).
pub(crate) fn remove(path: &Path) {
    let result = match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(_) => return,
    };
    if let Err(e) = result {
        tracing::debug!(path = %path.display(), error = %e, "cli-agent: cannot remove");
    }
}

/// Writes through a temporary file and a rename, mode 0600, so a reader
/// never sees half a credential.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = fs::write(&tmp, bytes)
        .and_then(|()| restrict(&tmp, 0o600))
        .and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

pub(crate) fn copy_private(src: &Path, dst: &Path) -> io::Result<()> {
    if let Some(parent) = dst.parent() {
        fs::create_dir_all(parent)?;
    }
    write_private(dst, &fs::read(src)?)
}

#[cfg(unix)]
fn restrict(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn restrict(_: &Path, _: u32) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_paths_cannot_leave_the_home() {
        let base = Path::new("/h");
        assert_eq!(
            safe_join(base, ".claude/x"),
            Some(PathBuf::from("/h/.claude/x"))
        );
        assert_eq!(safe_join(base, "../etc/passwd"), None);
        assert_eq!(safe_join(base, "/etc/passwd"), None);
        assert_eq!(safe_join(base, "."), None);
        assert_eq!(safe_join(base, ""), None);
    }
}
