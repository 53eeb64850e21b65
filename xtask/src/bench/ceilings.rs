//! `cargo xtask bench ceilings`: what the dev broker and the dev database
//! can do at most, measured with their own tools on this machine, so every
//! other figure can be read as a share of it.
//!
//! - **Pulsar**: Pulsar's own `pulsar-perf` (the `pulsar-testclient` jar
//!   from Maven Central, run on the broker's classpath). `produce` without
//!   batching (how our inboxes and commands publish), with batching (how
//!   events could), and `consume` on a Shared subscription while a
//!   producer runs (publish to handler, end to end). Messages of 370 bytes,
//!   the size of an event envelope.
//! - **PostgreSQL**: a raw binary `COPY` of event rows (the store bench's
//!   ceiling step alone).
//!
//! The figures are printed and written to `target/bench/ceilings.txt` (one
//! `name value` per line); `bench queue` prints its Pulsar figures as a
//! share of them when that file exists (`bench store` measures its own
//! `COPY` ceiling in the same run).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;

use crate::cmd;
use crate::services::config::{HOST, Layout, PULSAR_BROKER_PORT, PULSAR_WEB_PORT};

/// The `pulsar-testclient` release used: 4.0.7 (the broker's) is not served
/// on Maven Central, 4.0.8 is, and runs on the 4.0.7 client jars.
const TESTCLIENT_VERSION: &str = "4.0.8";
/// pulsar-perf's rate limit (it must be positive): far above what runs here.
const UNLIMITED: &str = "10000000";
/// Bytes per message: an event envelope.
const MESSAGE_BYTES: u32 = 370;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds per pulsar-perf run.
    #[arg(long, default_value_t = 15)]
    pub seconds: u32,
    /// Rows of the raw COPY.
    #[arg(long, default_value_t = 200_000)]
    pub rows: usize,
    /// Only the Pulsar ceilings.
    #[arg(long)]
    pub pulsar_only: bool,
}

/// Where the ceilings are written for the other benches.
pub fn ceilings_file() -> PathBuf {
    super::target_dir().join("bench").join("ceilings.txt")
}

/// The ceilings of an earlier `bench ceilings` run (empty without one).
pub fn load() -> BTreeMap<String, f64> {
    let text = std::fs::read_to_string(ceilings_file()).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_owned(), v.trim().parse().ok()?))
        })
        .collect()
}

fn perf_dir() -> PathBuf {
    Layout::from_env().root().join("pulsar-perf")
}

/// Downloads the `pulsar-testclient` jar (alone: its dependencies are the
/// broker's jars) unless it is there.
fn install() -> Result<PathBuf> {
    let dir = perf_dir();
    let jar = dir.join(format!("pulsar-testclient-{TESTCLIENT_VERSION}.jar"));
    if jar.is_file() {
        return Ok(jar);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mvn = cmd::which("mvn").context("Maven (`mvn`) is needed to download pulsar-perf")?;
    println!("ceilings: downloading org.apache.pulsar:pulsar-testclient:{TESTCLIENT_VERSION}");
    let mut copy = Command::new(mvn);
    copy.current_dir(&dir)
        .args(["-q", "-B", "--no-transfer-progress", "dependency:copy"])
        .arg(format!(
            "-Dartifact=org.apache.pulsar:pulsar-testclient:{TESTCLIENT_VERSION}"
        ))
        .arg(format!("-DoutputDirectory={}", dir.display()));
    cmd::run(&mut copy).context("Maven could not fetch pulsar-testclient")?;
    if !jar.is_file() {
        bail!("Maven did not write {}", jar.display());
    }
    Ok(jar)
}

fn perf(jar: &Path, args: &[String]) -> Command {
    let jars = Layout::from_env().pulsar_jars();
    let conf = perf_dir().join("client.conf");
    let mut c = Command::new("java");
    c.arg("-Xmx512m")
        .arg("-cp")
        .arg(format!("{}:{}/*", jar.display(), jars.display()))
        .arg("org.apache.pulsar.testclient.PulsarPerfTestTool")
        .arg(conf)
        .args(args)
        .stdin(Stdio::null());
    c
}

fn write_conf() -> Result<()> {
    let conf = perf_dir().join("client.conf");
    std::fs::write(
        &conf,
        format!(
            "webServiceUrl=http://{HOST}:{PULSAR_WEB_PORT}/\nbrokerServiceUrl=pulsar://{HOST}:{PULSAR_BROKER_PORT}/\n"
        ),
    )
    .with_context(|| format!("cannot write {}", conf.display()))
}

/// `msg/s` and latency percentiles (ms) from pulsar-perf's final
/// "Aggregated" lines.
#[derive(Debug, Default, Clone, PartialEq)]
struct PerfFigures {
    /// Records sent or received over the run.
    records: f64,
    per_sec: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

/// The number right after `label` in `line` (`--- 1234.5 msg/s`, `med: 1.2`).
fn number_after(line: &str, label: &str) -> Option<f64> {
    let at = line.find(label)? + label.len();
    let rest = line[at..].trim_start_matches([' ', ':', '-']);
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(rest.len());
    rest[..end].replace(',', "").parse().ok()
}

fn parse_perf(output: &str) -> Option<PerfFigures> {
    let mut out = PerfFigures::default();
    let mut found = false;
    for line in output.lines() {
        if line.contains("Aggregated throughput stats") {
            // `... --- 150,012 records sent --- 12,345.6 msg/s --- ...`
            let records = line.split("records").next()?;
            out.records = records.rsplit("---").next()?.trim().replace(',', "").parse().ok()?;
            let before = line.split("msg/s").next()?;
            let value = before.rsplit("---").next()?.trim().replace(',', "");
            out.per_sec = value.parse().ok()?;
            found = true;
        }
        if line.contains("Aggregated latency stats") {
            out.p50_ms = number_after(line, "med");
            out.p99_ms = number_after(line, "99pct");
        }
    }
    // A run that sent or received nothing failed (it logs why).
    (found && out.records > 0.0).then_some(out)
}

fn topic(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("persistent://public/default/ceiling-{name}-{nanos}")
}

fn produce(jar: &Path, seconds: u32, batched: bool) -> Result<PerfFigures> {
    let mut args: Vec<String> = [
        "produce",
        "-r",
        UNLIMITED,
        "-s",
        &MESSAGE_BYTES.to_string(),
        "-o",
        "1000",
        "-time",
        &seconds.to_string(),
        "-u",
        &format!("pulsar://{HOST}:{PULSAR_BROKER_PORT}"),
    ]
    .map(str::to_owned)
    .to_vec();
    if !batched {
        args.push("-db".into());
    }
    args.push(topic(if batched { "batched" } else { "unbatched" }));
    let out = cmd::output(&mut perf(jar, &args)).context("pulsar-perf produce failed")?;
    parse_perf(&out).context("pulsar-perf printed no aggregated throughput")
}

/// A producer and a Shared-subscription consumer on one topic; the
/// consumer's rate is the end-to-end ceiling.
fn produce_and_consume(jar: &Path, seconds: u32) -> Result<PerfFigures> {
    let t = topic("e2e");
    let url = format!("pulsar://{HOST}:{PULSAR_BROKER_PORT}");
    let consume_args: Vec<String> = [
        "consume", "-st", "Shared", "-ss", "ceiling", "-q", "1000", "-time",
    ]
    .map(str::to_owned)
    .into_iter()
    .chain([(seconds + 4).to_string(), "-u".into(), url.clone(), t.clone()])
    .collect();
    let consumer = perf(jar, &consume_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start pulsar-perf consume")?;
    // Let the subscription exist before the first message.
    std::thread::sleep(Duration::from_secs(3));
    let produce_args: Vec<String> = [
        "produce", "-r", UNLIMITED, "-db", "-o", "1000", "-s",
    ]
    .map(str::to_owned)
    .into_iter()
    .chain([
        MESSAGE_BYTES.to_string(),
        "-time".into(),
        seconds.to_string(),
        "-u".into(),
        url,
        t,
    ])
    .collect();
    cmd::output(&mut perf(jar, &produce_args)).context("pulsar-perf produce failed")?;
    let out = consumer
        .wait_with_output()
        .context("pulsar-perf consume did not end")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned()
        + &String::from_utf8_lossy(&out.stderr);
    let mut f =
        parse_perf(&text).context("pulsar-perf consume printed no aggregated throughput")?;
    // The consumer ran longer than the producer: its rate is what it
    // received over the producer's window.
    f.per_sec = f.records / f64::from(seconds.max(1));
    Ok(f)
}

fn copy_ceiling(rows: usize) -> Result<f64> {
    let mut cargo = super::release_example("crewlet-store", None, "store_bench");
    cargo.args(["--copy-only", "--buffered", &rows.to_string()]);
    let out = cmd::output(&mut cargo).context("the COPY ceiling run failed")?;
    out.lines()
        .find_map(|l| l.strip_prefix("copy_rows_per_sec "))
        .and_then(|v| v.trim().parse().ok())
        .context("store_bench printed no copy_rows_per_sec")
}

pub fn run(args: Args) -> Result<()> {
    let started = Instant::now();
    let jar = install()?;
    write_conf()?;
    println!("ceilings: pulsar-perf {TESTCLIENT_VERSION}, {MESSAGE_BYTES}-byte messages, {} s per run", args.seconds);
    let unbatched = produce(&jar, args.seconds, false)?;
    let batched = produce(&jar, args.seconds, true)?;
    let e2e = produce_and_consume(&jar, args.seconds)?;
    let copy = if args.pulsar_only {
        None
    } else {
        Some(copy_ceiling(args.rows)?)
    };
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2} ms"));
    println!("{:<58} {:>12} {:>10} {:>10}", "ceiling", "per second", "p50", "p99");
    for (name, f) in [
        ("pulsar-perf produce, unbatched, 1000 outstanding", &unbatched),
        ("pulsar-perf produce, batched, 1000 outstanding", &batched),
        ("pulsar-perf produce -> consume (Shared), unbatched", &e2e),
    ] {
        println!(
            "{name:<58} {:>12.0} {:>10} {:>10}",
            f.per_sec,
            ms(f.p50_ms),
            ms(f.p99_ms)
        );
    }
    if let Some(copy) = copy {
        println!("{:<58} {copy:>12.0}", "PostgreSQL raw binary COPY of event rows");
    }
    let file = ceilings_file();
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // A partial run (`--pulsar-only`) keeps the other figures of the last one.
    let mut all = load();
    all.insert("pulsar_produce_unbatched".into(), unbatched.per_sec);
    all.insert("pulsar_produce_batched".into(), batched.per_sec);
    all.insert("pulsar_end_to_end".into(), e2e.per_sec);
    if let Some(p99) = unbatched.p99_ms {
        all.insert("pulsar_produce_unbatched_p99_ms".into(), p99);
    }
    if let Some(copy) = copy {
        all.insert("postgres_copy_rows".into(), copy);
    }
    let lines: Vec<String> = all.iter().map(|(k, v)| format!("{k} {v}")).collect();
    std::fs::write(&file, lines.join("\n") + "\n")
        .with_context(|| format!("cannot write {}", file.display()))?;
    println!(
        "ceilings: written to {} ({:.0} s)",
        file.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The environment variable through which a bench example finds the
/// ceilings file.
pub const CEILINGS_ENV: &str = "CREWLET_BENCH_CEILINGS";

/// Points `cmd` (a bench example) at the ceilings file, when there is one.
pub fn pass_to(cmd: &mut Command) {
    let file = ceilings_file();
    if file.is_file() {
        cmd.env(CEILINGS_ENV, file);
    } else {
        println!("bench: no ceilings yet (`cargo xtask bench ceilings` measures them)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pulsar_perf_summaries() {
        let produce = "12:00:01.000 [main] INFO  org.apache.pulsar.testclient.PerformanceProducer - Aggregated throughput stats --- 150012 records sent --- 10000.8 msg/s --- 29.6 Mbit/s \n\
                       12:00:01.001 [main] INFO  org.apache.pulsar.testclient.PerformanceProducer - Aggregated latency stats --- Latency: mean:   3.551 ms - med:   3.012 - 95pct:   6.100 - 99pct:   9.870 - 99.9pct:  20.1 - 99.99pct:  30.2 - 99.999pct:  31.0 - Max:  31.4";
        let f = parse_perf(produce).unwrap_or_default();
        assert_eq!((f.records, f.per_sec), (150012.0, 10000.8));
        assert_eq!(f.p50_ms, Some(3.012));
        assert_eq!(f.p99_ms, Some(9.87));
        let consume = "Aggregated throughput stats --- 1,234,567 records received --- 20,345.5 msg/s --- 60.2 Mbit/s";
        assert_eq!(parse_perf(consume).map(|f| f.per_sec), Some(20345.5));
        assert!(parse_perf("nothing here").is_none());
    }
}
