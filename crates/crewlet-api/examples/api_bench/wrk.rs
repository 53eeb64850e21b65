//! `--wrk BIN`: the same ingest measured with `wrk` against the real
//! `crewlet` binary, as operators run it: `crewlet run` (embedded, memory
//! broker and stores, the engine routing every delivery) and `crewlet run
//! api` (standalone on Pulsar + PostgreSQL).
//!
//! `wrk` cannot sign requests, so the deliveries are signed beforehand:
//! one line per request (`delivery id`, `signature`, `body`, tab separated)
//! in a file the Lua script loads and sends in order, each exactly once.
//! Each body differs, so neither the delivery id nor the content digest
//! dedupes. When wrk sends more requests than the file holds, the run is
//! refused (the extra requests would be duplicates and cheap).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The Lua script wrk runs: loads the prepared requests, sends each once.
const SCRIPT: &str = r#"
local requests = {}
local next_request = 0

function init(args)
  local file = assert(io.open(args[1], "r"))
  for line in file:lines() do
    local id, sig, body = line:match("^([^\t]*)\t([^\t]*)\t(.*)$")
    requests[#requests + 1] = wrk.format("POST", args[2], {
      ["Content-Type"] = "application/json",
      ["X-GitHub-Event"] = "issues",
      ["X-GitHub-Delivery"] = id,
      ["X-Hub-Signature-256"] = sig,
    }, body)
  end
  file:close()
end

function request()
  next_request = next_request + 1
  if next_request > #requests then
    next_request = 1
  end
  return requests[next_request]
end
"#;

/// What one wrk run printed.
pub struct WrkRun {
    pub requests: u64,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: u64,
}

/// Writes `count` signed deliveries for `run` to `path`.
pub fn write_requests(path: &Path, run: &str, count: usize) -> Result<()> {
    use std::io::Write as _;
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    for i in 0..count {
        let body = super::body(run, i);
        let sig = super::signature(&body)?;
        out.write_all(format!("{run}-{i}\t{sig}\t").as_bytes())?;
        out.write_all(&body)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// Runs wrk (one thread, `connections` connections, `seconds`) against
/// `base` with the requests in `file`, sent to `path`.
pub fn run_wrk(
    base: &str,
    path: &str,
    file: &Path,
    available: usize,
    connections: usize,
    seconds: u64,
) -> Result<WrkRun> {
    let dir = file.parent().context("the requests file has no folder")?;
    let script = dir.join("deliveries.lua");
    std::fs::write(&script, SCRIPT)?;
    let out = Command::new("wrk")
        .args([
            "-t1",
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "--latency",
            "--timeout",
            "10s",
            "-s",
        ])
        .arg(&script)
        .arg(base)
        .arg("--")
        .arg(file)
        .arg(path)
        .output()
        .context("cannot run wrk (Debian: `apt-get install wrk`)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "wrk failed: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let run = parse(&text).with_context(|| format!("cannot read wrk's report:\n{text}"))?;
    if run.requests > available as u64 {
        bail!(
            "wrk sent {} requests but only {available} distinct deliveries were prepared; raise --wrk-requests",
            run.requests
        );
    }
    Ok(run)
}

/// Reads wrk's text report.
fn parse(text: &str) -> Option<WrkRun> {
    let ms = |v: &str| -> Option<f64> {
        let v = v.trim();
        if let Some(x) = v.strip_suffix("us") {
            x.parse::<f64>().ok().map(|x| x / 1000.0)
        } else if let Some(x) = v.strip_suffix("ms") {
            x.parse().ok()
        } else if let Some(x) = v.strip_suffix('m') {
            x.parse::<f64>().ok().map(|x| x * 60_000.0)
        } else {
            v.strip_suffix('s')?.parse::<f64>().ok().map(|x| x * 1000.0)
        }
    };
    let mut run = WrkRun {
        requests: 0,
        per_second: 0.0,
        p50_ms: 0.0,
        p99_ms: 0.0,
        max_ms: 0.0,
        errors: 0,
    };
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Latency", _avg, _stdev, max, ..] => run.max_ms = ms(max)?,
            ["50%", v] => run.p50_ms = ms(v)?,
            ["99%", v] => run.p99_ms = ms(v)?,
            ["Requests/sec:", v] => run.per_second = v.parse().ok()?,
            [n, "requests", "in", ..] => run.requests = n.parse().ok()?,
            ["Non-2xx", "or", "3xx", "responses:", n] => run.errors += n.parse::<u64>().ok()?,
            ["Socket", "errors:", rest @ ..] => {
                run.errors += rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum::<u64>()
            }
            _ => {}
        }
    }
    (run.requests > 0).then_some(run)
}

/// A `crewlet` process, stopped with SIGTERM when dropped.
pub struct Process {
    child: Child,
    pub base: String,
    log: PathBuf,
}

impl Process {
    /// Starts `bin` with `args` (which must make it listen on `port`) and
    /// waits until `/ready` answers 200.
    pub async fn start(bin: &Path, args: &[String], port: u16, dir: &Path) -> Result<Self> {
        let log = dir.join(format!("crewlet-{port}.log"));
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .args(args)
            .env("RUST_LOG", "warn")
            .env("OPENAI_API_KEY", "unused")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut process = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
        };
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(r) = client.get(format!("{}/ready", process.base)).send().await
                && r.status() == 200
            {
                return Ok(process);
            }
            if let Ok(Some(status)) = process.child.try_wait() {
                bail!(
                    "{} exited with {status}: {}",
                    bin.display(),
                    process.log_tail()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} never became ready: {}",
                    bin.display(),
                    process.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Resident memory of the process, from `/proc`.
    pub fn rss_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        Some(kib / 1024.0)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// One wrk measurement of `process`, after an untimed warm-up.
async fn measure(
    label: &str,
    process: &Process,
    dir: &Path,
    args: &super::Args,
) -> Result<super::Report> {
    let url = format!("{}/webhooks/github", process.base);
    let run = uuid::Uuid::now_v7().simple().to_string();
    if args.warmup > 0 {
        super::load(&url, &format!("warm-{run}"), args.warmup, args.connections).await?;
    }
    let file = dir.join("deliveries.tsv");
    write_requests(&file, &run, args.wrk_requests)?;
    let wrk = run_wrk(
        &process.base,
        "/webhooks/github",
        &file,
        args.wrk_requests,
        args.connections,
        args.wrk_seconds,
    )?;
    let ms = |v: f64| Duration::from_secs_f64(v / 1000.0);
    let rss = process
        .rss_mib()
        .map(|m| format!(", RSS after {m:.1} MiB"))
        .unwrap_or_default();
    Ok(super::Report {
        target: format!("{label} (wrk{rss})"),
        requests: usize::try_from(wrk.requests).unwrap_or(usize::MAX),
        connections: args.connections,
        errors: usize::try_from(wrk.errors).unwrap_or(usize::MAX),
        elapsed: Duration::from_secs_f64(wrk.requests as f64 / wrk.per_second.max(1e-9)),
        p50: ms(wrk.p50_ms),
        p99: ms(wrk.p99_ms),
        max: ms(wrk.max_ms),
    })
}

/// Starts `bin` with the arguments `command` gives for a free port, in a
/// fresh folder `files` has filled, measures it, stops it and removes the
/// folder.
async fn run_target(
    label: &str,
    bin: &Path,
    args: &super::Args,
    files: impl FnOnce(&Path) -> Result<PathBuf>,
    command: impl FnOnce(&Path, u16) -> Vec<String>,
) -> Result<super::Report> {
    let dir = bench_dir(label)?;
    let file = files(&dir)?;
    let port = free_port()?;
    let report = match Process::start(bin, &command(&file, port), port, &dir).await {
        Ok(process) => measure(label, &process, &dir, args).await,
        Err(e) => Err(e),
    };
    let _ = std::fs::remove_dir_all(&dir);
    report
}

/// `crewlet run` on the embedded default (memory broker and stores), the
/// engine routing every delivery.
pub async fn embedded(bin: &Path, args: &super::Args) -> Result<super::Report> {
    run_target(
        "crewlet run, embedded",
        bin,
        args,
        |dir| {
            let company = dir.join("company.yaml");
            std::fs::write(&company, super::COMPANY)?;
            Ok(company)
        },
        |company, port| {
            vec![
                "run".into(),
                "--import-company".into(),
                company.display().to_string(),
                "--api-port".into(),
                port.to_string(),
            ]
        },
    )
    .await
}

/// `crewlet run api` on Pulsar + PostgreSQL (a fresh database and the
/// bench's own namespace), `None` when the services are not up.
pub async fn standalone(bin: &Path, args: &super::Args) -> Result<Option<super::Report>> {
    let Some((db, pulsar_url)) = super::bench_services().await? else {
        return Ok(None);
    };
    let report = run_target(
        "crewlet run api, Pulsar + PostgreSQL",
        bin,
        args,
        |dir| {
            let config = dir.join("config.yaml");
            std::fs::write(
                &config,
                format!(
                    "providers:\n  queue:\n    type: pulsar\n    url: \"{pulsar_url}\"\n    namespace: {}\n  database:\n    dsn: \"{}\"\n    max_connections: 16\n",
                    super::BENCH_NAMESPACE,
                    db.dsn
                ),
            )?;
            Ok(config)
        },
        |config, port| {
            vec![
                "run".into(),
                "api".into(),
                config.display().to_string(),
                "--port".into(),
                port.to_string(),
            ]
        },
    )
    .await;
    drop(db);
    report.map(Some)
}

/// A fresh folder for one target's files.
fn bench_dir(target: &str) -> Result<PathBuf> {
    let target: String = target
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let dir = std::env::temp_dir().join(format!(
        "crewlet-api-bench-{target}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
