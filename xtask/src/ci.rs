//! `cargo xtask ci`: the checks CI runs, in order, stopping at the first
//! failure. The test step ends with one summary line over the whole
//! workspace and the slowest test binaries (see [`crate::test_report`]);
//! the last step runs schemathesis against the served OpenAPI document
//! (see [`crate::schemathesis`]).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crewlet_test_support::services::SKIP_LOG_VAR;

use crate::test_report::Report;
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

/// How many of the slowest test binaries the summary lists.
const SLOWEST: usize = 10;

pub fn run() -> Result<()> {
    let root = workspace_root();
    let all = Instant::now();
    let total = STEPS.len() + 1;
    for (i, (name, args)) in STEPS.iter().enumerate() {
        let mut cargo = cmd::cargo();
        cargo.current_dir(&root).args(*args);
        println!("==> [{}/{total}] {name}: {}", i + 1, cmd::describe(&cargo));
        let started = Instant::now();
        let ok = if *name == "tests" {
            run_tests(cargo)?
        } else {
            cmd::status(&mut cargo)?.success()
        };
        let secs = started.elapsed().as_secs_f64();
        if !ok {
            bail!("ci: step `{name}` failed after {secs:.0} s");
        }
        println!("==> {name}: ok ({secs:.0} s)");
    }
    println!(
        "==> [{total}/{total}] schemathesis {}: the served /openapi.json against the embedded default",
        crate::schemathesis::VERSION
    );
    let started = Instant::now();
    let checked = crate::schemathesis::run();
    let secs = started.elapsed().as_secs_f64();
    if let Err(e) = checked {
        bail!("ci: step `schemathesis` failed after {secs:.0} s: {e:#}");
    }
    println!("==> schemathesis: ok ({secs:.0} s)");
    println!(
        "==> ci: all {total} steps passed in {:.0} s",
        all.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs `cargo test` with its output (cargo's stderr and the test binaries'
/// stdout, merged in order) passed through and read, then prints the
/// summary. Whether every test passed.
fn run_tests(cargo: Command) -> Result<bool> {
    let skip_log =
        std::env::temp_dir().join(format!("crewlet-ci-skips-{}.log", std::process::id()));
    crate::services::process::remove_if_exists(&skip_log)?;
    // `sh` merges the two streams so a `Running` line stays before its result.
    let mut merged = Command::new("sh");
    merged
        .arg("-c")
        .arg("exec \"$@\" 2>&1")
        .arg("sh")
        .arg(cargo.get_program())
        .args(cargo.get_args())
        .env(SKIP_LOG_VAR, &skip_log)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    if let Some(dir) = cargo.get_current_dir() {
        merged.current_dir(dir);
    }
    let mut child = merged
        .spawn()
        .with_context(|| format!("cannot run `{}`", cmd::describe(&cargo)))?;
    let mut report = Report::default();
    if let Some(out) = child.stdout.take() {
        let mut stdout = std::io::stdout().lock();
        for line in BufReader::new(out).split(b'\n') {
            let line =
                String::from_utf8_lossy(&line.context("reading cargo test's output")?).into_owned();
            // A closed stdout (say `| head`) must not stop the tests.
            let _ = writeln!(stdout, "{line}");
            report.line(&line);
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    let skips = count_lines(&skip_log);
    crate::services::process::remove_if_exists(&skip_log)?;
    let totals = report.totals(skips);
    println!("==> slowest test binaries:");
    for b in report.slowest(SLOWEST) {
        println!("    {:>8.1} s  {}", b.seconds, b.name);
    }
    println!("==> tests: {totals}");
    Ok(status.success() && totals.failed == 0)
}

fn count_lines(path: &Path) -> u64 {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count() as u64)
}
