//! The bubblewrap command line of one command in a box.
//!
//! Everything the box sees is listed here: the host's `/usr` read-only (the
//! toolchain), a few files of `/etc` that programs need to work, the box's
//! own home read-write, a private `/tmp`, `/proc` and `/dev`. The engine's
//! files, other boxes and the rest of the host are simply not in the box's
//! mount namespace. Every namespace is new (user, pid, ipc, uts, cgroup,
//! and network unless the policy is `host`); the command runs as uid 1000
//! with no capabilities, in a new session.

use std::path::Path;

use crate::{HOME, Network};

/// Host files of `/etc` a box gets read-only, when the host has them.
const ETC_RO: [&str; 8] = [
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/gitconfig",
    "/etc/mime.types",
];

/// Top-level directories that are links into `/usr` on a merged-/usr host
/// and real directories elsewhere.
const USR_LINKS: [&str; 6] = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// The bwrap arguments (after the program name) to run `argv` in the box
/// whose host directory is `root`.
pub(crate) fn args(
    root: &Path,
    network: Network,
    mounts: &[super::Mount],
    cwd: &str,
    argv: &[String],
) -> Vec<String> {
    let mut a: Vec<String> = Vec::with_capacity(64 + argv.len());
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| (*s).to_owned()));
    push(&["--unshare-all"]);
    if network == Network::Host {
        push(&["--share-net"]);
    }
    push(&[
        "--die-with-parent",
        "--new-session",
        "--uid",
        "1000",
        "--gid",
        "1000",
    ]);
    push(&["--hostname", "crewlet-box", "--cap-drop", "ALL"]);
    push(&["--ro-bind", "/usr", "/usr"]);
    for dir in USR_LINKS {
        let host = Path::new("/").join(dir);
        match std::fs::read_link(&host) {
            Ok(target) => {
                let target = target.to_string_lossy().into_owned();
                a.extend(["--symlink".to_owned(), target, format!("/{dir}")]);
            }
            Err(_) if host.is_dir() => {
                let p = host.to_string_lossy().into_owned();
                a.extend(["--ro-bind".to_owned(), p.clone(), p]);
            }
            Err(_) => {}
        }
    }
    for etc in ETC_RO {
        a.extend(["--ro-bind-try".to_owned(), etc.to_owned(), etc.to_owned()]);
    }
    if network == Network::Host {
        a.extend([
            "--ro-bind-try".into(),
            "/etc/resolv.conf".into(),
            "/etc/resolv.conf".into(),
        ]);
    }
    for own in ["passwd", "group", "hosts"] {
        let host = root.join("etc").join(own).to_string_lossy().into_owned();
        a.extend(["--ro-bind".to_owned(), host, format!("/etc/{own}")]);
    }
    let home = root.join("home").to_string_lossy().into_owned();
    a.extend([
        "--proc".into(),
        "/proc".into(),
        "--dev".into(),
        "/dev".into(),
    ]);
    a.extend(["--tmpfs".into(), "/tmp".into()]);
    a.extend(["--bind".into(), home, HOME.into()]);
    for m in mounts {
        let flag = if m.writable { "--bind" } else { "--ro-bind" };
        a.extend([
            flag.to_owned(),
            m.host.to_string_lossy().into_owned(),
            m.target.clone(),
        ]);
    }
    a.extend(["--chdir".into(), cwd.to_owned()]);
    a.push("--".into());
    a.extend(argv.iter().cloned());
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_is_shared_only_on_request_and_the_command_comes_last() {
        let argv = vec!["echo".to_owned(), "hi".to_owned()];
        let none = args(
            Path::new("/s/b1"),
            Network::None,
            &[],
            "/home/user/workspace",
            &argv,
        );
        assert!(none.contains(&"--unshare-all".to_owned()));
        assert!(!none.contains(&"--share-net".to_owned()));
        assert!(!none.iter().any(|a| a == "/etc/resolv.conf"));
        assert_eq!(&none[none.len() - 3..], ["--", "echo", "hi"]);
        let pos = none.iter().position(|a| a == "/s/b1/home").unwrap_or(0);
        assert_eq!(none[pos + 1], "/home/user");
        let host = args(Path::new("/s/b1"), Network::Host, &[], "/home/user", &argv);
        assert!(host.contains(&"--share-net".to_owned()));
        let m: super::super::Mount = "/opt/tool:/opt/tool"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let rw: super::super::Mount = "/srv/r.git:/srv/r.git:rw"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        let with = args(
            Path::new("/s/b1"),
            Network::None,
            &[m, rw],
            "/home/user",
            &argv,
        );
        let ro = with.iter().position(|a| a == "/opt/tool").unwrap_or(0);
        assert_eq!(with[ro - 1], "--ro-bind");
        let w = with.iter().position(|a| a == "/srv/r.git").unwrap_or(0);
        assert_eq!(with[w - 1], "--bind");
        for bad in ["relative:/x", "/x:/", "/x:/home/user", "/x:/y:maybe", "/x"] {
            assert!(bad.parse::<super::super::Mount>().is_err(), "{bad}");
        }
    }
}
