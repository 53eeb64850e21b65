//! Process and port probes (Linux `/proc`, loopback TCP).

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

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
    fn missing_pid_file_is_none() {
        let path = Path::new("/nonexistent/crewlet/xtask.pid");
        assert_eq!(read_pidfile(path).expect("missing is not an error"), None);
    }
}
