//! `cargo xtask ci`: the checks CI runs, in order, stopping at the first failure.

use std::time::Instant;

use anyhow::{Result, bail};

use crate::{cmd, workspace_root};

/// The steps: a name and the cargo arguments.
pub const STEPS: &[(&str, &[&str])] = &[
    ("rustfmt", &["fmt", "--all", "--", "--check"]),
    (
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ],
    ),
    ("tests", &["test", "--workspace", "--all-features"]),
];

pub fn run() -> Result<()> {
    let root = workspace_root();
    let all = Instant::now();
    for (i, (name, args)) in STEPS.iter().enumerate() {
        let mut cargo = cmd::cargo();
        cargo.current_dir(&root).args(*args);
        println!(
            "==> [{}/{}] {name}: {}",
            i + 1,
            STEPS.len(),
            cmd::describe(&cargo)
        );
        let started = Instant::now();
        let status = cmd::status(&mut cargo)?;
        let secs = started.elapsed().as_secs_f64();
        if !status.success() {
            bail!("ci: step `{name}` failed ({status}) after {secs:.0} s");
        }
        println!("==> {name}: ok ({secs:.0} s)");
    }
    println!(
        "==> ci: all {} steps passed in {:.0} s",
        STEPS.len(),
        all.elapsed().as_secs_f64()
    );
    Ok(())
}
