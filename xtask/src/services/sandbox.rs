//! The code sandbox's host tools: Debian's `bubblewrap` (namespaces without
//! a container engine), plus `git` and `python3`, which the sandbox tests
//! run inside boxes. Files only: nothing runs until a box is made.

use std::process::Command;

use anyhow::{Context, Result};

use crate::cmd;

const PACKAGES: [(&str, &str); 3] = [
    ("bwrap", "bubblewrap"),
    ("git", "git"),
    ("python3", "python3"),
];

fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Installs what is missing with apt (as root).
pub fn up() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(bin, _)| !has(bin))
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        println!("sandbox: bubblewrap, git and python3 already installed");
        return Ok(());
    }
    println!("sandbox: installing {} (apt-get)", missing.join(", "));
    let install = || {
        cmd::run(
            Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    install()
        .or_else(|_| {
            // A fresh machine may have no package lists yet.
            cmd::run(Command::new("apt-get").arg("update"))?;
            install()
        })
        .context("sandbox: cannot install bubblewrap with apt-get (run as root)")
}

pub fn status() {
    for (bin, pkg) in PACKAGES {
        let state = if has(bin) { "installed" } else { "missing" };
        println!("sandbox: {pkg} {state}");
    }
}
