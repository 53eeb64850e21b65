//! Signals and liveness of the host processes behind a box.

/// Sends `sig` to `pid` (negative: to the process group). Errors (the process
/// is gone) are not interesting to the caller.
pub(crate) fn signal(pid: i32, sig: libc::c_int) {
    if pid == 0 || pid == -1 {
        return; // never "every process we may signal"
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// True while any process of the group `pgid` exists and is not a zombie.
pub(crate) fn group_alive(pgid: i32) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: as above; signal 0 only checks for existence.
    let exists = unsafe { libc::kill(-pgid, 0) } == 0;
    if !exists {
        return false;
    }
    // The leader may be a zombie nobody reaped yet; then look for another
    // member of the group in /proc.
    if !is_zombie(pgid) {
        return true;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|e| {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            return false;
        };
        pid != pgid && stat_fields(pid).is_some_and(|(state, pg)| pg == pgid && state != 'Z')
    })
}

fn is_zombie(pid: i32) -> bool {
    stat_fields(pid).is_none_or(|(state, _)| state == 'Z' || state == 'X')
}

/// `(state, pgrp)` from `/proc/<pid>/stat`.
fn stat_fields(pid: i32) -> Option<(char, i32)> {
    stat(pid).map(|s| (s.state, s.pgrp))
}

/// True when `pid`'s command line has `path` as one of its arguments or in
/// one (a launcher names its box's directory in bwrap's arguments).
pub(crate) fn cmdline_mentions(pid: i32, path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let needle = path.as_os_str().as_bytes();
    !needle.is_empty() && cmdline.windows(needle.len()).any(|w| w == needle)
}

/// True when a SIGSTOP waits for `pid` (its own or its thread group's
/// pending set, `/proc/<pid>/status`): the process runs none of its own code
/// again before it stops. A process can hold one for as long as it stays in
/// the kernel, as a `vfork` parent does while its child, stopped before its
/// `exec`, keeps it waiting.
pub(crate) fn stop_pending(pid: i32) -> bool {
    const SIGSTOP_BIT: u64 = 1 << (libc::SIGSTOP - 1);
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status.lines().any(|line| {
        let mask = line
            .strip_prefix("SigPnd:")
            .or_else(|| line.strip_prefix("ShdPnd:"));
        mask.and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & SIGSTOP_BIT != 0)
    })
}

/// What the engine reads of a process's `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stat {
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    /// When the process started, in clock ticks after boot: with the pid,
    /// it names one process, never a later one that reuses the pid.
    pub start_ticks: u64,
}

pub(crate) fn stat(pid: i32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    // `starttime` is the 22nd field; `pgrp`, just read, was the 5th.
    let start_ticks = f.nth(16)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        pgrp,
        start_ticks,
    })
}

/// `roots` and every living process descended from them, with its state.
/// A box's processes all descend from their launcher: orphans in a box are
/// adopted by the box's own pid-namespace init, which is the launcher's
/// grandchild.
pub(crate) fn tree(roots: &[i32]) -> Vec<(i32, char)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let all: Vec<(i32, Stat)> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| stat(pid).map(|s| (pid, s)))
        .collect();
    let mut children: std::collections::HashMap<i32, Vec<(i32, char)>> =
        std::collections::HashMap::new();
    for (pid, s) in &all {
        children.entry(s.ppid).or_default().push((*pid, s.state));
    }
    let mut out: Vec<(i32, char)> = all
        .iter()
        .filter(|(pid, _)| roots.contains(pid))
        .map(|(pid, s)| (*pid, s.state))
        .collect();
    let mut seen: std::collections::HashSet<i32> = out.iter().map(|(p, _)| *p).collect();
    let mut i = 0;
    while i < out.len() {
        for &(pid, state) in children
            .get(&out[i].0)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            if seen.insert(pid) {
                out.push((pid, state));
            }
        }
        i += 1;
    }
    out.retain(|(_, state)| !matches!(state, 'Z' | 'X'));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_group_is_alive_and_a_made_up_one_is_not() {
        let own = std::process::id() as i32;
        let pgid = stat_fields(own).map(|(_, pg)| pg).unwrap_or(0);
        assert!(pgid > 0);
        assert!(group_alive(pgid));
        assert!(!group_alive(i32::MAX - 7));
        assert!(!group_alive(0));
    }

    #[test]
    fn a_start_time_names_one_process() {
        let own = stat(std::process::id() as i32).expect("own stat");
        let child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn");
        let pid = child.id() as i32;
        let theirs = stat(pid).expect("child stat");
        assert_eq!(theirs.ppid, std::process::id() as i32);
        // A child starts after its parent, and its start time stays put.
        assert!(theirs.start_ticks >= own.start_ticks, "{theirs:?} {own:?}");
        assert_eq!(stat(pid).map(|s| s.start_ticks), Some(theirs.start_ticks));
        let mut child = child;
        child.kill().expect("kill");
        child.wait().expect("wait");
        assert!(stat(pid).is_none());
    }

    #[test]
    fn a_stop_that_waits_is_seen() {
        assert!(!stop_pending(std::process::id() as i32));
        assert!(!stop_pending(i32::MAX - 7));
        // A stopped process does not take a second SIGSTOP off its queue:
        // it waits there, and a SIGCONT discards it.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn");
        let pid = child.id() as i32;
        signal(pid, libc::SIGSTOP);
        let stopped = (0..2000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            stat(pid).is_some_and(|s| s.state == 'T')
        });
        assert!(stopped, "the child did not stop");
        assert!(!stop_pending(pid), "the first SIGSTOP was taken");
        signal(pid, libc::SIGSTOP);
        assert!(stop_pending(pid), "the second SIGSTOP waits");
        signal(pid, libc::SIGCONT);
        assert!(!stop_pending(pid), "SIGCONT discards it");
        child.kill().expect("kill");
        child.wait().expect("wait");
    }
}
