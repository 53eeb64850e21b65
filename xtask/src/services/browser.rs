//! The dashboard's browser checks: Debian's `chromium` (apt) and the
//! `tests/browser` packages (`npm ci`: `playwright-core` only, which drives
//! the system Chromium and downloads no browser). Files only: nothing runs
//! until a test starts Chromium itself.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::cmd;

/// Where Debian's package puts Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";

fn browser_dir() -> PathBuf {
    crate::workspace_root().join("tests/browser")
}

fn packages_installed(dir: &Path) -> bool {
    dir.join("node_modules/playwright-core/package.json")
        .is_file()
}

fn has(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Installs what is missing: Chromium with apt (as root), then the npm
/// packages from the lock file.
pub fn up() -> Result<()> {
    let started = Instant::now();
    if !has("node") || !has("npm") {
        bail!(
            "browser: node and npm are needed for the dashboard's browser checks (Node 20 or later)"
        );
    }
    if Path::new(CHROMIUM).is_file() {
        println!("browser: chromium already installed");
    } else {
        println!("browser: installing Debian's chromium (apt-get; a few minutes once)");
        cmd::run(
            Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends", "chromium"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
        .or_else(|_| {
            // A fresh machine may have no package lists yet.
            cmd::run(Command::new("apt-get").arg("update"))?;
            cmd::run(
                Command::new("apt-get")
                    .args(["install", "-y", "--no-install-recommends", "chromium"])
                    .env("DEBIAN_FRONTEND", "noninteractive"),
            )
        })
        .context("browser: cannot install chromium with apt-get (run as root)")?;
    }
    let dir = browser_dir();
    if packages_installed(&dir) {
        println!("browser: tests/browser packages already installed");
    } else {
        cmd::run(
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&dir),
        )
        .context("browser: npm ci in tests/browser failed")?;
    }
    println!(
        "browser: ready in {:.1} s ({CHROMIUM}, {})",
        started.elapsed().as_secs_f64(),
        dir.join("node_modules").display()
    );
    Ok(())
}

/// Prints one line about the browser tooling.
pub fn status() {
    let chromium = Path::new(CHROMIUM).is_file();
    let packages = packages_installed(&browser_dir());
    println!(
        "browser: chromium {}, tests/browser packages {}",
        if chromium { "installed" } else { "missing" },
        if packages { "installed" } else { "missing" }
    );
}
