//! `cargo xtask bench fleet`: a fleet of `crewlet run` processes (release
//! build) on Pulsar + PostgreSQL (`cargo xtask services up`).
//!
//! 1. **Placement**: `--seats` agent seats, `--nodes` nodes started at
//!    once; time from the spawn to every seat's lease held by a live node
//!    and its inbox attached there (`GET /fleet`), then `VmRSS` per node.
//! 2. **Throughput**: `--turns` tasks spread over the seats, posted at once
//!    through the nodes' APIs, against the fake model (`--model-ms` per
//!    call); turns/s until the completion ledger holds them all. Then the
//!    same with one node (the others drained and stopped).
//! 3. **Failover**: `--failovers` times, SIGKILL the node holding the most
//!    seats and time until every seat is held and attached again by the
//!    survivors; the node is started again (same id) before the next
//!    round. Lease TTL and heartbeat are `--ttl`/`--heartbeat` seconds.
//!
//! Prints each figure and a markdown summary.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::e2e::{free_port, get};
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use crewlet_test_support::services;
use serde_json::{Value, json};

const TOKEN: &str = "fleet-bench-token";

#[derive(Debug)]
struct Args {
    binary: PathBuf,
    seats: usize,
    nodes: usize,
    turns: usize,
    failovers: usize,
    ttl: u32,
    heartbeat: u32,
    model_ms: u64,
    timeout_s: u64,
}

fn args() -> Result<Args> {
    let mut a = Args {
        binary: PathBuf::new(),
        seats: 10_000,
        nodes: 3,
        turns: 300,
        failovers: 10,
        ttl: 6,
        heartbeat: 1,
        model_ms: 100,
        timeout_s: 900,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--binary" => a.binary = PathBuf::from(v),
            "--seats" => a.seats = v.parse()?,
            "--nodes" => a.nodes = v.parse()?,
            "--turns" => a.turns = v.parse()?,
            "--failovers" => a.failovers = v.parse()?,
            "--ttl" => a.ttl = v.parse()?,
            "--heartbeat" => a.heartbeat = v.parse()?,
            "--model-ms" => a.model_ms = v.parse()?,
            "--timeout-s" => a.timeout_s = v.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    if !a.binary.is_file() {
        bail!("--binary must name the crewlet release binary");
    }
    if a.nodes < 2 || a.seats == 0 {
        bail!("--nodes must be at least 2 and --seats at least 1");
    }
    Ok(a)
}

struct Node {
    id: String,
    port: u16,
    child: Option<Child>,
}

impl Node {
    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn rss_mib(&self) -> f64 {
        let Some(c) = &self.child else { return 0.0 };
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", c.id())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(binary: &Path, dir: &Path, id: &str, port: u16) -> Result<Node> {
    let log = std::fs::File::create(dir.join(format!("{id}.log")))?;
    let child = Command::new(binary)
        .args(["run", "cfg.yaml", "--api-port", &port.to_string()])
        .current_dir(dir)
        .env("CREWLET_NODE_ID", id)
        .env("RUST_LOG", "warn,crewlet_engine::fleet=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start node {id}"))?;
    Ok(Node {
        id: id.to_owned(),
        port,
        child: Some(child),
    })
}

/// `(live nodes, live seats, seats attached on live nodes)`.
async fn census(base: &str) -> Option<(usize, usize, u64, Value)> {
    let (status, fleet) = get(base, "/fleet").await;
    if status != 200 {
        return None;
    }
    let live_nodes: Vec<&Value> = fleet["nodes"]
        .as_array()?
        .iter()
        .filter(|n| n["live"] == true)
        .collect();
    let attached = live_nodes
        .iter()
        .map(|n| n["seats_attached"].as_u64().unwrap_or(0))
        .sum();
    let seats = fleet["seats"]
        .as_array()?
        .iter()
        .filter(|s| s["live"] == true)
        .count();
    Some((live_nodes.len(), seats, attached, fleet))
}

/// Waits until `nodes` live nodes hold and attach every seat.
async fn settled(bases: &[String], nodes: usize, seats: usize, timeout: Duration) -> Result<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        for base in bases {
            if let Some((n, held, attached, fleet)) = census(base).await
                && n == nodes
                && held == seats
                && attached == seats as u64
            {
                return Ok(fleet);
            }
        }
        if Instant::now() > deadline {
            let last = census(&bases[0]).await.map(|(n, h, a, _)| (n, h, a));
            bail!(
                "the fleet did not settle within {} s (live nodes, held, attached: {last:?})",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the fleet is [`settled`] and no node holds more than its
/// share (`ceil(seats / nodes)`): a restarted node has its seats back.
async fn balanced(
    bases: &[String],
    nodes: usize,
    seats: usize,
    timeout: Duration,
) -> Result<Value> {
    let deadline = Instant::now() + timeout;
    let share = seats.div_ceil(nodes.max(1));
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let fleet = settled(bases, nodes, seats, left).await?;
        let most = fleet["nodes"]
            .as_array()
            .map(|n| {
                n.iter()
                    .filter(|n| n["live"] == true)
                    .map(|n| n["seats"].as_array().map_or(0, Vec::len))
                    .max()
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        if most <= share {
            return Ok(fleet);
        }
        if Instant::now() > deadline {
            bail!(
                "the fleet did not balance within {} s (a node holds {most} seats, share {share})",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes the bench's namespace. Its topics go first, a few at a time: a
/// broker refuses to delete a namespace of 20,000 topics in one call (its
/// internal admin queue holds 10,000).
async fn drop_namespace(admin: &str, namespace: &str) {
    let http = reqwest::Client::new();
    let base = format!("{admin}/admin/v2/persistent/public/{namespace}");
    let topics: Vec<String> = match http.get(&base).send().await {
        Ok(r) => r.json().await.unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let deletes = topics.iter().map(|t| {
        let name = t.rsplit('/').next().unwrap_or(t).to_owned();
        let (http, base) = (http.clone(), base.clone());
        async move {
            http.delete(format!("{base}/{name}?force=true"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        }
    });
    let deleted: Vec<bool> = futures::StreamExt::collect(futures::StreamExt::buffer_unordered(
        futures::stream::iter(deletes),
        8,
    ))
    .await;
    let gone = http
        .delete(format!(
            "{admin}/admin/v2/namespaces/public/{namespace}?force=true"
        ))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success());
    if !gone {
        eprintln!(
            "bench fleet: cannot delete the Pulsar namespace public/{namespace} ({} of {} topics deleted); delete it by hand",
            deleted.iter().filter(|d| **d).count(),
            topics.len()
        );
    }
}

fn company(seats: usize, llm: &str) -> String {
    let mut y = format!(
        "name: Fleet Bench\nproviders:\n  llm:\n    fake: {{type: openai-compatible, model: fake-model, base_url: \"{llm}\", timeout_seconds: 60}}\nturn_engine:\n  max_concurrent_turns: 16\nroles:\n  - name: CEO\n    handle: ceo\nunits:\n"
    );
    let rest = seats.saturating_sub(1);
    for u in 0..rest.div_ceil(10) {
        let _ = writeln!(y, "  - name: Unit {u}\n    lead: s{u}-0\n    roles:");
        for i in 0..10.min(rest - u * 10) {
            let _ = writeln!(y, "      - {{name: Seat {u}-{i}, handle: s{u}-{i}}}");
        }
    }
    y
}

fn script(delay: Duration) -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "simple", "steps": [{"intent": "answer"}]}),
            )
            .usage(10, 5)
            .delay(delay),
        )
        .on(When::any(), Reply::text("done").usage(10, 5).delay(delay))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The effect journal's cost per tool call: `tool_started` then
/// `tool_result`, each fenced by a seat lease, `calls` times in a row.
async fn journal_cost(
    leases: &dyn crewlet_store::LeaseStore,
    journal: &dyn crewlet_store::EffectJournal,
    calls: usize,
) -> Result<Vec<Duration>> {
    let won = leases
        .acquire(
            &[crewlet_store::LeaseClaim::new("seat:bench", "bench")],
            "bench:1",
            Duration::from_secs(600),
        )
        .await?;
    let fence = won.first().context("no lease")?.fence();
    let mut out = Vec::with_capacity(calls);
    for i in 0..calls {
        let started = Instant::now();
        for (kind, payload) in [
            (
                "tool_started",
                json!({"call_id": "c", "name": "chat__post_message", "arguments": {"text": "x"}}),
            ),
            (
                "tool_result",
                json!({"call_id": "c", "name": "chat__post_message", "content": "ok", "is_error": false}),
            ),
        ] {
            let entry = crewlet_store::NewJournalEntry {
                task_key: format!("bench-{}", i / 20),
                task_id: "bench".into(),
                step: i32::try_from(i % 20).unwrap_or(0),
                kind: kind.into(),
                seat: "bench".into(),
                turn_id: uuid::Uuid::nil(),
                node: "bench:1".into(),
                payload,
            };
            journal.append(&entry, Some(&fence)).await?;
        }
        out.push(started.elapsed());
    }
    out.sort_unstable();
    Ok(out)
}

async fn completions(db: &tokio_postgres::Client) -> Result<i64> {
    Ok(db
        .query_one("SELECT count(*) FROM turn_completions", &[])
        .await?
        .get(0))
}

/// Posts `turns` tasks over the seats (32 at a time) through `bases`, then
/// waits for the ledger to hold them; turns/s.
async fn throughput(
    bases: &[String],
    db: &tokio_postgres::Client,
    seats: usize,
    turns: usize,
    timeout: Duration,
) -> Result<f64> {
    let before = completions(db).await?;
    let http = reqwest::Client::new();
    let started = Instant::now();
    let posts = (0..turns).map(|i| {
        let base = bases[i % bases.len()].clone();
        let handle = if i % seats == 0 {
            "ceo".to_owned()
        } else {
            let k = (i % seats) - 1;
            format!("s{}-{}", k / 10, k % 10)
        };
        let http = http.clone();
        async move {
            http.post(format!("{base}/agents/{handle}/tasks"))
                .bearer_auth(TOKEN)
                .json(&json!({"text": format!("task {i}")}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        }
    });
    let statuses: Vec<_> = futures::StreamExt::collect(futures::StreamExt::buffer_unordered(
        futures::stream::iter(posts),
        32,
    ))
    .await;
    let refused = statuses.iter().filter(|s| !matches!(s, Ok(202))).count();
    if refused > 0 {
        bail!("{refused} task posts failed");
    }
    let deadline = Instant::now() + timeout;
    while completions(db).await? - before < turns as i64 {
        if Instant::now() > deadline {
            bail!("turns did not finish within {} s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(turns as f64 / started.elapsed().as_secs_f64())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let a = args()?;
    let (Some(admin_dsn), Some(pulsar)) =
        (services::require_postgres(), services::require_pulsar())
    else {
        bail!("bench fleet needs PostgreSQL and Pulsar: `cargo xtask services up`");
    };
    let timeout = Duration::from_secs(a.timeout_s);
    let db = FreshDatabase::create(&admin_dsn).await;
    let (pg, conn) = tokio_postgres::connect(&db.dsn, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let namespace = format!("bench-fleet-{}", uuid::Uuid::new_v4().simple());
    let admin = services::pulsar_admin_url();
    let created = reqwest::Client::new()
        .put(format!("{admin}/admin/v2/namespaces/public/{namespace}"))
        .json(&json!({}))
        .send()
        .await?;
    if !created.status().is_success() {
        bail!("cannot create the Pulsar namespace: {}", created.status());
    }
    let llm = FakeLlmServer::start(script(Duration::from_millis(a.model_ms)))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    llm.set_recording(false);
    let dir = std::env::temp_dir().join(format!("crewlet-bench-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("cfg.yaml"),
        format!(
            "providers:\n  queue:\n    type: pulsar\n    url: \"{pulsar}\"\n    tenant: public\n    namespace: \"{namespace}\"\n  database:\n    dsn: \"{}\"\napi:\n  host: 127.0.0.1\n  port: 0\n  auth:\n    tokens:\n      - {{id: bench, token: \"{TOKEN}\", scopes: [read, operate, admin]}}\nnode:\n  lease_ttl_seconds: {}\n  heartbeat_seconds: {}\n",
            db.dsn, a.ttl, a.heartbeat
        ),
    )?;
    std::fs::write(
        dir.join("company.yaml"),
        company(a.seats, &llm.openai_base_url()),
    )?;
    let import = Command::new(&a.binary)
        .args(["config", "import", "company.yaml", "--config", "cfg.yaml"])
        .current_dir(&dir)
        .output()?;
    if !import.status.success() {
        bail!(
            "config import failed: {}",
            String::from_utf8_lossy(&import.stderr)
        );
    }

    // 0. The journal's cost per tool call (PostgreSQL, then memory).
    let store = crewlet_store::Database::connect(&db.dsn).await?;
    crewlet_store::Migrator::new(store.clone(), crewlet_store::MigrationOptions::default())
        .run()
        .await?;
    let pg_cost = journal_cost(
        &crewlet_store::PostgresLeases::new(store.clone()),
        &crewlet_store::PostgresEffectJournal::new(store.clone()),
        1000,
    )
    .await?;
    let mem_leases = std::sync::Arc::new(crewlet_store::MemoryLeases::new());
    let mem_cost = journal_cost(
        mem_leases.as_ref(),
        &crewlet_store::MemoryEffectJournal::new(mem_leases.clone()),
        1000,
    )
    .await?;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "bench fleet: journal per tool call (started + result, fenced): PostgreSQL p50 {:.0} us p99 {:.0} us; memory p50 {:.1} us p99 {:.1} us",
        us(percentile(&pg_cost, 50.0)),
        us(percentile(&pg_cost, 99.0)),
        us(percentile(&mem_cost, 50.0)),
        us(percentile(&mem_cost, 99.0))
    );
    pg.execute("DELETE FROM turn_journal", &[]).await?;
    pg.execute("DELETE FROM leases", &[]).await?;

    // 1. Placement.
    let started = Instant::now();
    let mut nodes: Vec<Node> = Vec::new();
    for i in 1..=a.nodes {
        nodes.push(spawn(&a.binary, &dir, &format!("n{i}"), free_port())?);
    }
    let bases: Vec<String> = nodes.iter().map(Node::base).collect();
    let fleet = settled(&bases, a.nodes, a.seats, timeout).await?;
    let boot = started.elapsed();
    let spread: Vec<usize> = fleet["nodes"]
        .as_array()
        .map(|n| {
            n.iter()
                .map(|n| n["seats"].as_array().map_or(0, Vec::len))
                .collect()
        })
        .unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss: Vec<f64> = nodes.iter().map(Node::rss_mib).collect();
    println!(
        "bench fleet: {} seats on {} nodes placed and attached in {:.2} s (seats per node {spread:?}); RSS per node {:?} MiB",
        a.seats,
        a.nodes,
        boot.as_secs_f64(),
        rss.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>()
    );

    // 2. Throughput, the fleet then one node.
    let fleet_tps = throughput(&bases, &pg, a.seats, a.turns, timeout).await?;
    println!(
        "bench fleet: {} turns on {} nodes: {fleet_tps:.1} turns/s",
        a.turns, a.nodes
    );

    // 3. Failover.
    let mut failovers = Vec::new();
    let mut rebalances = Vec::new();
    for round in 0..a.failovers {
        // Each kill finds the seats spread evenly (the node restarted in the
        // previous round has its share back), so every run moves one share.
        let back = Instant::now();
        let fleet = balanced(&bases, a.nodes, a.seats, timeout).await?;
        if round > 0 {
            let took = back.elapsed();
            println!(
                "bench fleet: the restarted node had its share back in {:.2} s",
                took.as_secs_f64()
            );
            rebalances.push(took);
        }
        let victim = fleet["nodes"]
            .as_array()
            .and_then(|n| {
                n.iter()
                    .max_by_key(|n| n["seats"].as_array().map_or(0, Vec::len))
                    .and_then(|n| n["id"].as_str().map(str::to_owned))
            })
            .context("no node holds seats")?;
        let held = fleet["nodes"]
            .as_array()
            .and_then(|n| n.iter().find(|n| n["id"] == victim.as_str()))
            .and_then(|n| n["seats"].as_array().map(Vec::len))
            .unwrap_or(0);
        let idx = nodes
            .iter()
            .position(|n| n.id == victim)
            .context("unknown victim")?;
        nodes[idx].kill();
        let killed = Instant::now();
        let survivors: Vec<String> = nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(Node::base)
            .collect();
        settled(&survivors, a.nodes - 1, a.seats, timeout).await?;
        let took = killed.elapsed();
        println!(
            "bench fleet: failover {}: {victim} (holding {held} seats) SIGKILLed, every seat held and attached again in {:.2} s",
            round + 1,
            took.as_secs_f64()
        );
        failovers.push(took);
        let port = nodes[idx].port;
        nodes[idx] = spawn(&a.binary, &dir, &victim, port)?;
    }
    settled(&bases, a.nodes, a.seats, timeout).await?;

    for n in nodes.iter_mut().skip(1) {
        let out = Command::new(&a.binary)
            .args(["node", "drain", &n.id, "--wait", "--config", "cfg.yaml"])
            .current_dir(&dir)
            .output()?;
        if !out.status.success() {
            bail!("drain {}: {}", n.id, String::from_utf8_lossy(&out.stderr));
        }
        n.stop();
    }
    settled(&bases[..1], 1, a.seats, timeout).await?;
    let one_tps = throughput(&bases[..1], &pg, a.seats, a.turns, timeout).await?;
    println!(
        "bench fleet: {} turns on 1 node: {one_tps:.1} turns/s",
        a.turns
    );

    failovers.sort_unstable();
    rebalances.sort_unstable();
    let mut table = String::from("\n| measure | figure |\n|---|---:|\n");
    let _ = writeln!(table, "| seats / nodes | {} / {} |", a.seats, a.nodes);
    let _ = writeln!(
        table,
        "| boot to every seat placed and attached | {:.2} s |",
        boot.as_secs_f64()
    );
    let _ = writeln!(
        table,
        "| RSS per node | {} MiB |",
        rss.iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(" / ")
    );
    if !failovers.is_empty() {
        let _ = writeln!(
            table,
            "| failover after SIGKILL of a node holding its share (lease TTL {} s, heartbeat {} s), {} runs | p50 {:.2} s, p99 {:.2} s |",
            a.ttl,
            a.heartbeat,
            failovers.len(),
            percentile(&failovers, 50.0).as_secs_f64(),
            percentile(&failovers, 99.0).as_secs_f64()
        );
    }
    if !rebalances.is_empty() {
        let _ = writeln!(
            table,
            "| restarted node has its share back, {} runs | p50 {:.2} s, p99 {:.2} s |",
            rebalances.len(),
            percentile(&rebalances, 50.0).as_secs_f64(),
            percentile(&rebalances, 99.0).as_secs_f64()
        );
    }
    let _ = writeln!(
        table,
        "| effect journal per tool call (PostgreSQL, fenced) | p50 {:.0} us, p99 {:.0} us |",
        us(percentile(&pg_cost, 50.0)),
        us(percentile(&pg_cost, 99.0))
    );
    let _ = writeln!(
        table,
        "| turns/s, fake model {} ms per call | {fleet_tps:.1} on {} nodes, {one_tps:.1} on 1 |",
        a.model_ms, a.nodes
    );
    println!("{table}");
    drop(nodes);
    drop_namespace(&admin, &namespace).await;
    let _ = std::fs::remove_dir_all(&dir);
    drop(db);
    Ok(())
}
