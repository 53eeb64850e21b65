//! Process and port probes (Linux `/proc`, loopback TCP).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};

use super::config::HOST;
use crate::cmd;

/// Whether `pid` is a live (non-zombie) process.
pub fn is_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": comm may hold spaces and parentheses.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].trim_start().chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// Whether the command line of `pid` contains `needle` (guards against a
/// recycled pid in a stale pid file).
pub fn cmdline_contains(pid: u32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|raw| String::from_utf8_lossy(&raw).contains(needle))
}

/// The pid stored in `path`, if the file exists.
pub fn read_pidfile(path: &Path) -> Result<Option<u32>> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let pid = text
                .trim()
                .parse()
                .with_context(|| format!("bad pid file {}: {text:?}", path.display()))?;
            Ok(Some(pid))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Sends `signal` (`TERM`, `KILL`, ...) to `pid`.
pub fn signal(pid: u32, signal: &str) -> Result<()> {
    let mut kill = Command::new("kill");
    kill.args(["-s", signal, &pid.to_string()]);
    if !cmd::succeeds(&mut kill) && is_alive(pid) {
        bail!("cannot send SIG{signal} to pid {pid}");
    }
    Ok(())
}

/// Whether something accepts TCP connections on `127.0.0.1:port`.
pub fn port_open(port: u16) -> bool {
    let Ok(addr) = format!("{HOST}:{port}").parse::<SocketAddr>() else {
        return false;
    };
    TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
}

/// The last `lines` lines of a log file, for error messages.
pub fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(raw) => {
            let text = String::from_utf8_lossy(&raw);
            let all: Vec<&str> = text.lines().collect();
            let start = all.len().saturating_sub(lines);
            format!(
                "--- last lines of {} ---\n{}",
                path.display(),
                all[start..].join("\n")
            )
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// Creates `dir` (and parents) and makes it world-traversable (mode 755), as
/// the postgres user must enter the services root.
pub fn create_public_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "cannot create {} (set {} to a writable directory)",
            dir.display(),
            super::config::SERVICES_DIR_ENV
        )
    })?;
    let meta = dir
        .metadata()
        .with_context(|| format!("cannot stat {}", dir.display()))?;
    if meta.permissions().mode() & 0o005 != 0o005 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot chmod 755 {}", dir.display()))?;
    }
    Ok(())
}

/// An exclusive lock on the services directory, so that two `cargo xtask
/// services` runs never start or stop the same service at once. Released on
/// drop; a lock left by a dead process is taken over.
#[derive(Debug)]
pub struct DirLock {
    path: PathBuf,
}

impl DirLock {
    const WAIT: Duration = Duration::from_secs(600);
    /// A lock file without a pid yet is being written (or was left by a
    /// crash between create and write): stale after this long.
    const EMPTY_GRACE: Duration = Duration::from_secs(10);

    pub fn acquire(dir: &Path) -> Result<Self> {
        create_public_dir(dir)?;
        let path = dir.join(".xtask.lock");
        let deadline = Instant::now() + Self::WAIT;
        let mut announced = false;
        loop {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut file) => {
                    writeln!(file, "{}", std::process::id())
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    return Ok(Self { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot create {}", path.display()));
                }
            }
            let holder = read_pidfile(&path);
            let stale = match holder {
                Ok(Some(pid)) => !is_alive(pid),
                Ok(None) => false, // just released: retry at once
                Err(_) => path
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| SystemTime::now().duration_since(t).ok())
                    .is_some_and(|age| age > Self::EMPTY_GRACE),
            };
            if stale {
                match std::fs::remove_file(&path) {
                    Ok(()) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("cannot remove stale {}", path.display()));
                    }
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "{} is still held after {} s; is another `cargo xtask services` stuck?",
                    path.display(),
                    Self::WAIT.as_secs()
                );
            }
            if !announced {
                if let Ok(Some(pid)) = holder {
                    println!("services: waiting for another `cargo xtask services` (pid {pid})");
                }
                announced = true;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Best effort: a leftover file is detected as stale next time.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Removes a file, or a directory with its contents; one that is already
/// gone is not an error.
pub fn remove_if_exists(path: &Path) -> Result<()> {
    let removed = if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match removed {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
    }
}

/// `pip install --no-deps --target TARGET PACKAGE==VERSION` into a fresh
/// folder (a partial earlier install is removed first), then made readable
/// by every user whatever root's umask is. `what` names it in messages.
pub fn pip_install_target(
    what: &str,
    package: &str,
    version: &str,
    target: &Path,
    extra_args: &[&str],
) -> Result<()> {
    if target.exists() {
        // A previous install was interrupted or is another version: start over.
        std::fs::remove_dir_all(target)
            .with_context(|| format!("cannot remove partial install {}", target.display()))?;
    }
    let python = cmd::which("python3")
        .with_context(|| format!("python3 (with pip) is needed to install {what}"))?;
    println!(
        "{what}: installing {package}=={version} into {}",
        target.display()
    );
    let mut pip = Command::new(python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--root-user-action=ignore",
        "--no-deps",
    ])
    .args(extra_args)
    .arg("--target")
    .arg(target)
    .arg(format!("{package}=={version}"));
    cmd::run(&mut pip).with_context(|| format!("cannot install {package}=={version}"))?;
    cmd::run(Command::new("chmod").args(["-R", "a+rX"]).arg(target))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_recognised() {
        let me = std::process::id();
        assert!(is_alive(me));
        assert!(!cmdline_contains(me, "definitely-not-in-the-cmdline-4711"));
    }

    #[test]
    fn dir_lock_is_exclusive_and_released_on_drop() {
        let dir = std::env::temp_dir().join(format!("xtask-lock-test-{}", std::process::id()));
        let lock = DirLock::acquire(&dir).expect("first lock");
        let lock_file = dir.join(".xtask.lock");
        assert_eq!(
            read_pidfile(&lock_file).expect("readable"),
            Some(std::process::id())
        );
        drop(lock);
        assert!(!lock_file.exists());
        // A lock left by a dead process is taken over.
        std::fs::write(&lock_file, "4294967\n").expect("write stale lock");
        let lock = DirLock::acquire(&dir).expect("stale lock taken over");
        drop(lock);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn missing_pid_file_is_none() {
        let path = Path::new("/nonexistent/crewlet/xtask.pid");
        assert_eq!(read_pidfile(path).expect("missing is not an error"), None);
    }
}
