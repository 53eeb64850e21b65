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
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let _ppid = f.next()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, pgrp))
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
}
