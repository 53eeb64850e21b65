//! `cargo xtask bench validate-scale` (or `cargo run --release -p
//! crewlet-config --example validate_scale -- [--seats N,N] [--keys N]`):
//! wall time and peak memory of validating generated company files far
//! larger than any real one.
//!
//! Cases:
//! - `chain N`: N org-wide seats in one manager chain (seat i manages seat
//!   i+1, so seat i reports to seat i-1); valid.
//! - `unknown-keys N`: a small valid company plus N unknown top-level keys;
//!   every key is a problem.
//!
//! Each case runs in its own child process (this binary with `--case`) so
//! its peak RSS (`VmHWM` from `/proc/self/status`) is its own. The time is
//! `check_file` alone; generating the text is not timed, but its memory is
//! part of the peak (the `text` figure says how much).

use std::process::{Command, ExitCode};
use std::time::Instant;

use crewlet_config::{Tier, check_file};

const HEADER: &str = "name: Scale Co\nproviders:\n  llm:\n    main:\n      type: openai\n      model: gpt-4.1-mini\n      api_keys: [\"${OPENAI_API_KEY}\"]\n";

fn chain(seats: usize) -> String {
    let mut text = String::from(HEADER);
    text.push_str("roles:\n");
    for i in 0..seats {
        text.push_str(&format!("  - name: Seat {i}\n    handle: s{i}\n"));
        if i + 1 < seats {
            text.push_str(&format!("    manages: [s{}]\n", i + 1));
        }
    }
    text
}

fn unknown_keys(keys: usize) -> String {
    let mut text = String::from(HEADER);
    text.push_str("roles:\n  - name: CEO\n");
    for i in 0..keys {
        text.push_str(&format!("extra_key_{i}: {i}\n"));
    }
    text
}

/// Peak resident set size in KiB, when the kernel says (Linux).
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn mib(kib: Option<u64>) -> String {
    kib.map(|k| format!("{:.1} MiB", k as f64 / 1024.0))
        .unwrap_or_else(|| "?".into())
}

/// Runs one case in this process and prints its line.
fn run_case(case: &str, size: usize) -> Result<(), String> {
    let text = match case {
        "chain" => chain(size),
        "unknown-keys" => unknown_keys(size),
        other => return Err(format!("unknown case `{other}` (chain, unknown-keys)")),
    };
    let before = peak_rss_kib();
    let started = Instant::now();
    let checked = check_file("scale.yaml", &text, Some(Tier::Company));
    let elapsed = started.elapsed();
    let peak = peak_rss_kib();
    let problems = checked.problems();
    let outcome = if problems.is_empty() {
        "valid".to_owned()
    } else {
        let unlocated = problems.iter().filter(|p| p.line.is_none()).count();
        format!("{} problems, {unlocated} without a line", problems.len())
    };
    println!(
        "bench validate-scale {case} {size}: {:.3} s, peak RSS {} (text {:.1} MiB, peak before validating {}), {outcome}",
        elapsed.as_secs_f64(),
        mib(peak),
        text.len() as f64 / (1024.0 * 1024.0),
        mib(before),
    );
    Ok(())
}

fn sizes(arg: Option<&String>, default: &[usize]) -> Result<Vec<usize>, String> {
    match arg {
        None => Ok(default.to_vec()),
        Some(list) => list
            .split(',')
            .map(|n| n.trim().parse().map_err(|_| format!("not a size: `{n}`")))
            .collect(),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("validate_scale: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
    };
    if let Some(case) = value("--case") {
        let size = sizes(value("--size"), &[0])?;
        return run_case(case, size.first().copied().unwrap_or(0));
    }
    let mut cases: Vec<(&str, usize)> = Vec::new();
    for n in sizes(value("--seats"), &[4_000, 8_000, 10_000])? {
        cases.push(("chain", n));
    }
    for n in sizes(value("--keys"), &[100_000])? {
        cases.push(("unknown-keys", n));
    }
    let me = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    for (case, size) in cases {
        let status = Command::new(&me)
            .args(["--case", case, "--size", &size.to_string()])
            .status()
            .map_err(|e| format!("cannot run {}: {e}", me.display()))?;
        if !status.success() {
            println!("bench validate-scale {case} {size}: failed ({status})");
        }
    }
    Ok(())
}
