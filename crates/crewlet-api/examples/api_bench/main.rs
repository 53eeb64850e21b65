//! Webhook ingest benchmark (`cargo xtask bench api`): signed GitHub
//! deliveries per second and latency percentiles, from a bounded load
//! generator with N concurrent keep-alive connections on loopback.
//!
//! Targets:
//! - `memory`: the API embedded on the memory broker with memory stores, a
//!   store writer as publish listener and a consumer draining the inbound
//!   topic (what the engine process does);
//! - `standalone`: the standalone API (`crewlet run api`) on Apache Pulsar +
//!   PostgreSQL (buffered event store), in its own Pulsar namespace
//!   `public/crewlet-bench` and a fresh database. Skipped when the services
//!   are not up (`cargo xtask services up`).
//!
//! `memory` runs twice: without a `tracing` subscriber, then with the
//! `crewlet-telemetry` one installed (spans with OpenTelemetry ids, log lines
//! to a sink, no exporter), which `standalone` keeps.
//!
//! With `--wrk BIN`, the same two targets are measured with `wrk` against
//! the real `crewlet` binary instead (see `wrk.rs`).
//!
//! Every request is a unique delivery with its own body (no dedupe hits,
//! neither on the delivery id nor on the content digest). Bounded: it sends
//! exactly `--requests` requests (plus `--warmup`) and stops.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use crewlet_api::ApiBuilder;
use crewlet_config::{
    ApiConfig, Bootstrap, BootstrapProviders, DatabaseConfig, QueueConfig, QueueKind, check_company,
};
use crewlet_core::Event;
use crewlet_queue::{EventQueue, HandlerError, MemoryQueue, PublishListener, handler_fn, topics};
use crewlet_store::{MigrationOptions, NewRevision, Stores};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

mod wrk;

const SECRET: &str = "bench-secret";
/// Deliveries are assigned to the human founder: the engine's router routes
/// each (dedupe, routing record) and wakes no turn.
const COMPANY: &str = r#"
name: Bench Co
providers:
  llm:
    main: {type: openai, model: m, api_keys: ["${OPENAI_API_KEY}"], base_url: "http://127.0.0.1:9/v1"}
integrations:
  github:
    webhook_secret: bench-secret
roles:
  - name: Founder
    kind: human
    handle: founder
    manages: [Engineer]
    contact:
      github_login: ada-bench
  - name: Engineer
    handle: eng
"#;
const BENCH_NAMESPACE: &str = "crewlet-bench";

struct Args {
    requests: usize,
    connections: usize,
    warmup: usize,
    target: String,
    /// The `crewlet` binary to measure with wrk.
    wrk: Option<std::path::PathBuf>,
    wrk_seconds: u64,
    wrk_requests: usize,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        requests: 50_000,
        connections: 32,
        warmup: 2_000,
        target: "all".into(),
        wrk: None,
        wrk_seconds: 10,
        wrk_requests: 300_000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--requests" => args.requests = value()?.parse()?,
            "--connections" => args.connections = value()?.parse()?,
            "--warmup" => args.warmup = value()?.parse()?,
            "--target" => args.target = value()?,
            "--wrk" => args.wrk = Some(value()?.into()),
            "--wrk-seconds" => args.wrk_seconds = value()?.parse()?,
            "--wrk-requests" => args.wrk_requests = value()?.parse()?,
            other => bail!(
                "unknown argument {other}; use --requests N --connections C --warmup N --target memory|standalone|all [--wrk CREWLET_BIN --wrk-seconds S --wrk-requests N]"
            ),
        }
    }
    if args.requests == 0 || args.connections == 0 {
        bail!("--requests and --connections must be at least 1");
    }
    Ok(args)
}

struct Report {
    target: String,
    requests: usize,
    connections: usize,
    errors: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

impl Report {
    fn row(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        format!(
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} |",
            self.target,
            self.requests,
            self.connections,
            self.requests as f64 / self.elapsed.as_secs_f64(),
            ms(self.p50),
            ms(self.p99),
            ms(self.max),
            self.errors
        )
    }
}

/// Delivery `i`'s body: every body differs, so the content-digest dedupe
/// (the replay key) sees new deliveries, not resends.
fn body(run: &str, i: usize) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "action": "opened",
        "issue": {"number": i, "title": format!("Crash on start #{i} ({run})"), "body": "Steps: run it, then look at the log.",
                  "html_url": "https://github.com/acme/app/issues/42", "assignees": [{"login": "ada-bench"}]},
        "repository": {"full_name": "acme/app"},
        "sender": {"login": "octocat", "type": "User"}
    }))
    .unwrap_or_default()
}

fn signature(body: &[u8]) -> Result<String> {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes())?;
    mac.update(body);
    Ok(format!(
        "sha256={}",
        hex::encode(mac.finalize().into_bytes())
    ))
}

/// Sends `count` deliveries over `connections` keep-alive connections.
async fn load(
    url: &str,
    prefix: &str,
    count: usize,
    connections: usize,
) -> Result<(Vec<Duration>, usize, Duration)> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .tcp_nodelay(true)
        .build()?;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (client, next, url, prefix) = (
            client.clone(),
            next.clone(),
            url.to_owned(),
            prefix.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                let body = axum::body::Bytes::from(body(&prefix, i));
                let Ok(sig) = signature(&body) else {
                    errors += 1;
                    continue;
                };
                let t = Instant::now();
                let r = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("x-github-event", "issues")
                    .header("x-github-delivery", format!("{prefix}-{i}"))
                    .header("x-hub-signature-256", &sig)
                    .body(body)
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 202 => {
                        let _ = r.bytes().await;
                    }
                    _ => errors += 1,
                }
                lat.push(t.elapsed());
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::with_capacity(count);
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await?;
        all.extend(lat);
        errors += e;
    }
    Ok((all, errors, started.elapsed()))
}

async fn measure(target: &str, url: &str, args: &Args) -> Result<Report> {
    let run = uuid::Uuid::now_v7().simple().to_string();
    if args.warmup > 0 {
        load(url, &format!("warm-{run}"), args.warmup, args.connections).await?;
    }
    let (mut lat, errors, elapsed) = load(url, &run, args.requests, args.connections).await?;
    lat.sort_unstable();
    let pick = |q: f64| {
        let i = ((lat.len() as f64 * q).ceil() as usize).saturating_sub(1);
        lat.get(i.min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Ok(Report {
        target: target.into(),
        requests: args.requests,
        connections: args.connections,
        errors,
        elapsed,
        p50: pick(0.50),
        p99: pick(0.99),
        max: lat.last().copied().unwrap_or_default(),
    })
}

struct StoreWriter(Stores);

#[async_trait]
impl PublishListener for StoreWriter {
    async fn on_publish(&self, _topic: &str, event: &Event) -> Result<(), HandlerError> {
        self.0
            .events
            .append(std::slice::from_ref(event))
            .await
            .map_err(HandlerError::from)
    }
}

async fn import(stores: &Stores) -> Result<()> {
    let (company, _) = check_company("bench", COMPANY).map_err(|p| anyhow::anyhow!("{p:?}"))?;
    let active = stores.config.active().await?.map(|r| r.revision_id);
    stores
        .config
        .create(NewRevision {
            parent_revision_id: active,
            created_by: "bench".into(),
            source: "bench".into(),
            summary: "bench".into(),
            payload: serde_json::to_value(&company)?,
            activate: true,
        })
        .await?;
    Ok(())
}

async fn embedded_memory(args: &Args, label: &str) -> Result<Report> {
    let stores = Stores::memory();
    import(&stores).await?;
    let queue = MemoryQueue::standalone();
    queue.add_publish_listener(Arc::new(StoreWriter(stores.clone())));
    // The engine's router drains the inbound topic.
    let _drain = queue
        .subscribe(
            topics::NOTIFICATIONS_INBOUND,
            topics::NOTIFICATIONS_INBOUND_GROUP,
            handler_fn(|_| async { Ok(()) }),
        )
        .await?;
    let api = ApiBuilder::new(ApiConfig::default(), Arc::new(queue.clone()), &stores)
        .build()
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/webhooks/github", listener.local_addr()?);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        api.serve(listener, async {
            let _ = rx.await;
        })
        .await
    });
    let report = measure(label, &url, args).await;
    let _ = tx.send(());
    let _ = server.await;
    report
}

/// A fresh database holding the bench company and the bench's own Pulsar
/// namespace (so no other subscription sees its deliveries); `None` when
/// the services are not up.
async fn bench_services() -> Result<Option<(crewlet_test_support::database::FreshDatabase, String)>>
{
    use crewlet_test_support::services;
    let (Some(admin_dsn), Some(pulsar_url)) =
        (services::require_postgres(), services::require_pulsar())
    else {
        println!(
            "bench api: standalone on Pulsar + PostgreSQL skipped: services not up (`cargo xtask services up`)"
        );
        return Ok(None);
    };
    let admin = services::pulsar_admin_url();
    let r = reqwest::Client::new()
        .put(format!(
            "{admin}/admin/v2/namespaces/public/{BENCH_NAMESPACE}"
        ))
        .send()
        .await
        .with_context(|| format!("cannot reach the pulsar admin api at {admin}"))?;
    if !(r.status().is_success() || r.status() == 409) {
        bail!(
            "cannot create namespace public/{BENCH_NAMESPACE}: {}",
            r.status()
        );
    }
    let db = crewlet_test_support::database::FreshDatabase::create(&admin_dsn).await;
    let (stores, _) = Stores::open(&db.dsn, MigrationOptions::default()).await?;
    import(&stores).await?;
    Ok(Some((db, pulsar_url)))
}

async fn standalone_pulsar_postgres(args: &Args) -> Result<Option<Report>> {
    let Some((db, pulsar_url)) = bench_services().await? else {
        return Ok(None);
    };
    let bootstrap = Bootstrap {
        providers: BootstrapProviders {
            queue: Some(QueueConfig {
                kind: QueueKind::Pulsar,
                url: Some(pulsar_url),
                namespace: BENCH_NAMESPACE.into(),
                ..QueueConfig::default()
            }),
            database: Some(DatabaseConfig {
                dsn: db.dsn.clone(),
                embedding_dim: 1536,
                max_connections: 16,
            }),
            knowledge: None,
        },
        ..Bootstrap::default()
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crewlet_api::standalone::serve(bootstrap, listener, async {
        let _ = rx.await;
    }));
    // Wait until it serves and has loaded the company.
    let ready = format!("http://{addr}/ready");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = client.get(&ready).send().await
            && r.status() == 200
        {
            break;
        }
        if server.is_finished() || Instant::now() > deadline {
            let _ = tx.send(());
            let out = server.await?;
            bail!("the standalone api did not become ready: {out:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = measure(
        "standalone, Pulsar + PostgreSQL, telemetry on",
        &format!("http://{addr}/webhooks/github"),
        args,
    )
    .await;
    let _ = tx.send(());
    server.await??;
    drop(db);
    report.map(Some)
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let mut rows = Vec::new();
    if let Some(bin) = args.wrk.clone() {
        if matches!(args.target.as_str(), "memory" | "all") {
            rows.push(wrk::embedded(&bin, &args).await?);
        }
        if matches!(args.target.as_str(), "standalone" | "all")
            && let Some(r) = wrk::standalone(&bin, &args).await?
        {
            rows.push(r);
        }
        return print(&rows);
    }
    if matches!(args.target.as_str(), "memory" | "all") {
        rows.push(embedded_memory(&args, "embedded, memory broker").await?);
    }
    // From here on, what a process runs with: the crewlet-telemetry
    // subscriber (a `webhook` span per delivery, JSON lines at INFO to a
    // sink), trace export off.
    let _telemetry = crewlet_telemetry::try_init(
        crewlet_telemetry::TelemetryOptions::new("crewlet-api-bench")
            .ignore_env()
            .with_writer(std::io::sink),
    )?;
    if matches!(args.target.as_str(), "memory" | "all") {
        rows.push(
            embedded_memory(
                &args,
                "embedded, memory broker, telemetry on (spans, no export)",
            )
            .await?,
        );
    }
    if matches!(args.target.as_str(), "standalone" | "all")
        && let Some(r) = standalone_pulsar_postgres(&args).await?
    {
        rows.push(r);
    }
    print(&rows)
}

fn print(rows: &[Report]) -> Result<()> {
    println!();
    println!(
        "| target | requests | connections | webhooks/s | p50 ms | p99 ms | max ms | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!("{}", r.row());
    }
    if rows.iter().any(|r| r.errors > 0) {
        bail!("some requests failed");
    }
    Ok(())
}
