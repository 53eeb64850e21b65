//! `cargo xtask bench engine`: boot time and idle memory of `crewlet run`
//! (release build, embedded default: memory queue and stores) with 10, 100
//! and 1,000 agent seats.
//!
//! For each size a company file is generated (units of ten seats, one
//! unreachable OpenAI-compatible provider: nothing calls it while idle), then
//! `crewlet run config.yaml --import-company company.yaml --api-port P` is
//! started. Boot time is from spawning the process to the first `GET /ready`
//! answering 200 (every seat subscribed to its inbox). Idle RSS is `VmRSS`
//! of the process after it has sat idle for `--idle-ms`; the peak (`VmHWM`)
//! is shown too. The process is then stopped with SIGTERM. Prints a markdown
//! table of medians over `--runs` runs.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{cargo_build_release, release_binary};
use crate::engine_process::{EngineProcess, free_port};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Agent seat counts to measure.
    #[arg(long, value_delimiter = ',', default_values_t = vec![10, 100, 1000])]
    pub seats: Vec<usize>,
    /// Runs per size (medians are printed).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// How long the engine sits idle before its memory is read.
    #[arg(long, default_value_t = 2000)]
    pub idle_ms: u64,
    /// Give up on a boot after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout_s: u64,
}

/// One measured run.
#[derive(Debug, Clone, Copy)]
struct Sample {
    boot: Duration,
    rss_kib: u64,
    hwm_kib: u64,
}

pub fn run(args: Args) -> Result<()> {
    if args.runs == 0 || args.seats.is_empty() {
        bail!("--runs and --seats must not be empty");
    }
    cargo_build_release("crewlet")?;
    let binary = release_binary("crewlet");
    if !binary.is_file() {
        bail!("no binary at {} after the build", binary.display());
    }
    let dir = std::env::temp_dir().join(format!("crewlet-bench-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut rows = Vec::new();
    for &seats in &args.seats {
        let company = dir.join(format!("company-{seats}.yaml"));
        std::fs::write(&company, company_yaml(seats)).with_context(|| format!("cannot write {}", company.display()))?;
        let mut samples = Vec::new();
        for run in 1..=args.runs {
            let s = measure(&binary, &dir, &company, &args)
                .with_context(|| format!("{seats} seats, run {run}"))?;
            println!(
                "bench engine: {seats} seats run {run}: boot {:.0} ms, idle rss {:.1} MiB (peak {:.1} MiB)",
                s.boot.as_secs_f64() * 1000.0,
                mib(s.rss_kib),
                mib(s.hwm_kib)
            );
            samples.push(s);
        }
        rows.push((seats, median(&samples)));
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut table = String::from(
        "\n| agent seats | boot to /ready 200 (median) | idle RSS (median) | peak RSS (median) |\n|---:|---:|---:|---:|\n",
    );
    for (seats, s) in rows {
        let _ = writeln!(
            table,
            "| {seats} | {:.0} ms | {:.1} MiB | {:.1} MiB |",
            s.boot.as_secs_f64() * 1000.0,
            mib(s.rss_kib),
            mib(s.hwm_kib)
        );
    }
    println!("{table}");
    Ok(())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn median(samples: &[Sample]) -> Sample {
    let mid = |mut v: Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let mut boots: Vec<Duration> = samples.iter().map(|s| s.boot).collect();
    boots.sort_unstable();
    Sample {
        boot: boots[boots.len() / 2],
        rss_kib: mid(samples.iter().map(|s| s.rss_kib).collect()),
        hwm_kib: mid(samples.iter().map(|s| s.hwm_kib).collect()),
    }
}

/// A company with `seats` agent seats in units of ten.
fn company_yaml(seats: usize) -> String {
    let mut y = format!(
        "name: Bench {seats}\nproviders:\n  llm:\n    idle:\n      type: openai-compatible\n      model: none\n      base_url: http://127.0.0.1:9/v1\nroles:\n  - name: CEO\n    handle: ceo\nunits:\n"
    );
    let rest = seats.saturating_sub(1);
    let units = rest.div_ceil(10);
    for u in 0..units {
        let _ = writeln!(y, "  - name: Unit {u}\n    lead: s{u}-0\n    roles:");
        for i in 0..10.min(rest - u * 10) {
            let _ = writeln!(y, "      - {{name: Seat {u}-{i}, handle: s{u}-{i}, goal: keep unit {u} moving}}");
        }
    }
    y
}

/// `(VmRSS, VmHWM)` of `pid` in KiB.
fn memory(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("cannot read /proc/PID/status")?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    match (field("VmRSS:"), field("VmHWM:")) {
        (Some(rss), Some(hwm)) => Ok((rss, hwm)),
        _ => bail!("no VmRSS/VmHWM in /proc/{pid}/status"),
    }
}

fn measure(binary: &Path, dir: &Path, company: &Path, args: &Args) -> Result<Sample> {
    let port = free_port()?;
    let log: PathBuf = dir.join("engine.log");
    let started = Instant::now();
    let mut engine = Command::new(binary);
    engine
        .arg("run")
        .arg("--import-company")
        .arg(company)
        .args(["--api-port", &port.to_string()])
        .current_dir(dir)
        .env("RUST_LOG", "warn");
    let mut running = EngineProcess::spawn(engine, &log)?;
    // Polled every 5 ms: the boot time is the figure.
    running.wait_ready(port, &log, Duration::from_secs(args.timeout_s), Duration::from_millis(5))?;
    let boot = started.elapsed();
    std::thread::sleep(Duration::from_millis(args.idle_ms));
    let (rss_kib, hwm_kib) = memory(running.pid())?;
    drop(running);
    Ok(Sample { boot, rss_kib, hwm_kib })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_companies_have_the_asked_seat_count() {
        for n in [1, 10, 101] {
            let y = company_yaml(n);
            assert_eq!(y.matches("handle:").count(), n, "{y}");
        }
    }
}
