//! `cargo xtask bench memory` (embedder section): throughput and RSS of the
//! local embedder on diary-sized sentences. Run in release mode:
//! `cargo run --release -p crewlet-embed-local --example embed_bench`.
//!
//! Prints the load time, sentences/s for single-sentence calls and for
//! batches of 32 (through the async `Embedder::embed`, so the hop to the
//! blocking pool is included), and the process RSS before loading, after
//! loading and after a warm-up batch.

use std::path::PathBuf;
use std::time::Instant;

use crewlet_embed_local::{LocalEmbedder, LocalEmbedderOptions, default_model_dir};
use crewlet_llm::Embedder;

const USAGE: &str = "embed_bench [--dir MODEL_DIR] [--sentences N] [--threads N] [--quick]";

struct Args {
    dir: PathBuf,
    sentences: usize,
    threads: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        dir: std::env::var_os("CREWLET_EMBED_MODEL_DIR")
            .filter(|v| !v.is_empty())
            .map_or_else(default_model_dir, PathBuf::from),
        sentences: 512,
        threads: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{arg} needs a value; {USAGE}"))
        };
        match arg.as_str() {
            "--dir" => args.dir = PathBuf::from(value()?),
            "--sentences" => {
                args.sentences = value()?.parse().map_err(|e| format!("--sentences: {e}"))?;
            }
            "--threads" => {
                args.threads = value()?.parse().map_err(|e| format!("--threads: {e}"))?;
            }
            "--quick" => args.sentences = 64,
            _ => return Err(format!("unknown argument {arg}; {USAGE}")),
        }
    }
    args.sentences = args.sentences.max(32);
    Ok(args)
}

/// Diary-sized sentences (12 to 40 words), all different.
fn diary_sentences(n: usize) -> Vec<String> {
    const WHO: &[&str] = &[
        "The customer",
        "Our CTO",
        "The on-call engineer",
        "The finance lead",
        "A new contributor",
        "The support team",
    ];
    const DID: &[&str] = &[
        "asked why the nightly export to the data warehouse failed twice this week",
        "reported that invoices in euros were rounded differently from the ledger",
        "approved the migration of the billing service to the new cluster",
        "wants the onboarding checklist to mention the staging credentials",
        "found that the retry queue grew after the last deployment of the API",
        "requested a summary of open incidents before Friday's review",
    ];
    const DETAIL: &[&str] = &[
        "",
        " I replied with the runbook link and promised a follow-up tomorrow morning.",
        " We agreed to pair on it after the standup, and I opened ticket OPS-2291 to track it.",
        " Next time, check the cron logs first: the timeout was the cause last month too, and \
          the fix was to raise the statement timeout for the export role.",
    ];
    (0..n)
        .map(|i| {
            let who = WHO[i % WHO.len()];
            let did = DID[(i / WHO.len()) % DID.len()];
            let detail = DETAIL[(i / (WHO.len() * DID.len()) + i) % DETAIL.len()];
            format!("{who} {did} (note {i}).{detail}")
        })
        .collect()
}

/// User + system CPU time of this process, in seconds (from `/proc`, in
/// clock ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // fields after the `(comm)`, which may hold spaces
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = f.get(11)?.parse().ok()?;
            let stime: f64 = f.get(12)?.parse().ok()?;
            Some((utime + stime) / 100.0)
        })
        .unwrap_or(0.0)
}

/// The 1-minute load average, to read the figures by (other builds share
/// the cores).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

fn rss_mib() -> f64 {
    let kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(0.0);
    kib / 1024.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let sentences = diary_sentences(args.sentences);
    let words: usize = sentences.iter().map(|s| s.split_whitespace().count()).sum();

    let rss_before = rss_mib();
    let started = Instant::now();
    let options = LocalEmbedderOptions {
        threads: args.threads,
        ..LocalEmbedderOptions::default()
    };
    let embedder = LocalEmbedder::load(&args.dir, options)?;
    let load = started.elapsed();
    let rss_loaded = rss_mib();
    embedder.embed(&sentences[..32]).await?;
    let rss_warm = rss_mib();

    let (started, cpu) = (Instant::now(), cpu_seconds());
    for s in &sentences {
        embedder.embed(std::slice::from_ref(s)).await?;
    }
    let (single, single_cpu) = (started.elapsed(), cpu_seconds() - cpu);

    let (started, cpu) = (Instant::now(), cpu_seconds());
    for chunk in sentences.chunks(32) {
        embedder.embed(chunk).await?;
    }
    let (batched, batched_cpu) = (started.elapsed(), cpu_seconds() - cpu);
    let rss_end = rss_mib();

    let n = sentences.len() as f64;
    println!(
        "local embedder: all-MiniLM-L6-v2 (candle, F32) from {}",
        args.dir.display()
    );
    println!(
        "{} diary sentences, {:.1} words on average; {cores} cores, {} threads",
        sentences.len(),
        words as f64 / n,
        if args.threads == 0 {
            cores
        } else {
            args.threads
        }
    );
    println!();
    println!("| calls | sentences/s | ms per call | ms per sentence | CPU ms per sentence |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| one sentence each | {:.1} | {:.2} | {:.2} | {:.2} |",
        n / single.as_secs_f64(),
        single.as_secs_f64() * 1000.0 / n,
        single.as_secs_f64() * 1000.0 / n,
        single_cpu * 1000.0 / n
    );
    let calls = sentences.len().div_ceil(32) as f64;
    println!(
        "| batches of 32 | {:.1} | {:.2} | {:.2} | {:.2} |",
        n / batched.as_secs_f64(),
        batched.as_secs_f64() * 1000.0 / calls,
        batched.as_secs_f64() * 1000.0 / n,
        batched_cpu * 1000.0 / n
    );
    println!();
    println!("load: {:.0} ms", load.as_secs_f64() * 1000.0);
    println!("load average: {}", load_average());
    println!(
        "RSS: {rss_before:.1} MiB before load -> {rss_loaded:.1} MiB loaded (+{:.1}) -> {rss_warm:.1} MiB after a warm-up batch of 32 (+{:.1}) -> {rss_end:.1} MiB at the end",
        rss_loaded - rss_before,
        rss_warm - rss_before
    );
    Ok(())
}
