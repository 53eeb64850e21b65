//! The local sandbox's figures (run by `cargo xtask bench sandbox`):
//!
//! 1. start to first command: `create` + `exec true` on a fresh box, p50/p99;
//! 2. `concurrent` boxes at once, each running a small Python workload: wall
//!    time, failures, the boxes' memory (their cgroups' peak usage, summed)
//!    and this process's RSS.

use std::time::{Duration, Instant};

use crewlet_sandbox::local::{LocalOptions, LocalSandbox};
use crewlet_sandbox::{BoxSpec, Exec, Limits, Sandbox};

fn arg(name: &str, default: usize) -> usize {
    let mut args = std::env::args();
    while let Some(a) = args.next() {
        if a == name {
            return args.next().and_then(|v| v.parse().ok()).unwrap_or(default);
        }
    }
    default
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Peak memory of every box's cgroup, summed (cgroup v1).
fn boxes_peak_mib(ids: &[crewlet_sandbox::BoxId]) -> f64 {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let path = own
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_owned()))
        .unwrap_or_else(|| "/".into());
    let base = format!(
        "/sys/fs/cgroup/memory{}/crewlet-sandbox",
        path.trim_end_matches('/')
    );
    ids.iter()
        .filter_map(|id| {
            std::fs::read_to_string(format!("{base}/{id}/memory.max_usage_in_bytes")).ok()
        })
        .filter_map(|t| t.trim().parse::<f64>().ok())
        .sum::<f64>()
        / (1024.0 * 1024.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs = arg("--runs", 100);
    let concurrent = arg("--concurrent", 20);
    let state = std::env::temp_dir().join(format!("crewlet-sandbox-bench-{}", std::process::id()));
    let sb = std::sync::Arc::new(LocalSandbox::new(LocalOptions::new(&state)).await?);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "sandbox bench: local backend (bubblewrap), {cores} cores, limits enforced: {}",
        sb.enforces_limits()
    );

    // 1. start to first command.
    let spec = BoxSpec {
        limits: Limits::default(),
        ..BoxSpec::default()
    };
    let mut samples = Vec::with_capacity(runs);
    let mut create_only = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let id = sb.create(&spec).await?;
        create_only.push(t.elapsed());
        let out = sb.exec(&id, &Exec::new(["true"])).await?;
        samples.push(t.elapsed());
        if !out.success() {
            return Err(format!("`true` failed in a box: {out:?}").into());
        }
        sb.kill(&id).await?;
    }
    samples.sort();
    create_only.sort();
    println!(
        "start to first command ({runs} boxes, one at a time): p50 {} p99 {} (create alone p50 {} p99 {})",
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        ms(percentile(&create_only, 0.5)),
        ms(percentile(&create_only, 0.99)),
    );

    // 2. concurrent boxes, each doing a little real work.
    let work = "import hashlib\nh = b''\nfor i in range(20000): h = hashlib.sha256(h + b'x').digest()\nprint(h.hex()[:8])";
    let rss_before = rss_mib();
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrent {
        let sb = sb.clone();
        let spec = spec.clone();
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let id = sb.create(&spec).await?;
            sb.write_file(&id, "job.py", work.as_bytes()).await?;
            let out = sb
                .exec(
                    &id,
                    &Exec::new(["python3", "job.py"]).timeout(Duration::from_secs(300)),
                )
                .await?;
            Ok::<_, crewlet_sandbox::SandboxError>((id, out, start.elapsed()))
        }));
    }
    let mut ids = Vec::new();
    let mut failures = 0;
    let mut each = Vec::new();
    let mut rss_peak = rss_before;
    for task in tasks {
        rss_peak = rss_peak.max(rss_mib());
        match task.await {
            Ok(Ok((id, out, took))) => {
                if !out.success() || out.stdout.trim().len() != 8 {
                    failures += 1;
                }
                each.push(took);
                ids.push(id);
            }
            _ => failures += 1,
        }
    }
    let wall = t.elapsed();
    let peak = boxes_peak_mib(&ids);
    for id in &ids {
        sb.kill(id).await?;
    }
    each.sort();
    println!(
        "{concurrent} concurrent boxes on {cores} cores: wall {}, per box p50 {} p99 {}, failures {failures}, \
         boxes' peak memory {peak:.1} MiB total ({:.1} MiB each), engine RSS {rss_before:.1} -> {rss_peak:.1} MiB",
        ms(wall),
        ms(percentile(&each, 0.5)),
        ms(percentile(&each, 0.99)),
        peak / concurrent.max(1) as f64,
    );
    let _ = std::fs::remove_dir_all(&state);
    Ok(())
}
