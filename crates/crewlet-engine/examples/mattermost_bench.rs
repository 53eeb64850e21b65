//! Mattermost inbound at fleet scale (`cargo xtask bench mattermost`):
//! `--seats` seat bots (default 100) each hold a websocket to the fake
//! Mattermost server (in this process). Prints the time for every socket to
//! come up, the memory the fleet adds, the time for a DM to each seat to be
//! published, and a reconnect storm: the server stops, one DM per seat is
//! posted while it is down, the server restarts on the same port; the time
//! until every socket is back, until every gap post is published, how many
//! were published twice (must be 0) and the REST calls the backfill made.
//!
//! The engine runs on the memory broker and stores; each published post
//! also runs a (trivial) turn against the fake model over loopback.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use crewlet_config::Company;
use crewlet_engine::{Backends, Engine, EngineBuilder, EngineOptions};
use crewlet_queue::{EventQueue, MemoryBroker, topics};
use crewlet_store::Stores;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use crewlet_test_support::mattermost::{ChannelType, FakeMattermost, User};
use serde_json::json;
use tokio::sync::Mutex;

const LIMIT: Duration = Duration::from_secs(600);

fn seats() -> Result<usize> {
    let mut it = std::env::args().skip(1);
    let mut seats = 100;
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--seats" => seats = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    if seats == 0 {
        bail!("--seats must be at least 1");
    }
    Ok(seats)
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn company(llm: &str, mm: &str, bots: &[User]) -> Result<Company> {
    let mut yaml = format!(
        "name: MM Bench Co\nturn_engine: {{max_concurrent_turns: 20}}\nproviders:\n  llm:\n    fake: {{type: openai-compatible, model: fake-model, base_url: \"{llm}\"}}\nintegrations:\n  mattermost: {{enabled: true, url: \"{mm}\", team: acme}}\nroles:\n"
    );
    for (i, bot) in bots.iter().enumerate() {
        yaml.push_str(&format!(
            "  - name: Agent {i}\n    handle: a{i}\n    integrations:\n      mattermost: {{bot_token: \"{}\", username: \"{}\"}}\n",
            bot.token, bot.username
        ));
    }
    Ok(Company::from_yaml("mm-bench", &yaml)?)
}

/// Published posts by delivery key, counted from the live stream.
type Seen = Arc<Mutex<HashMap<String, usize>>>;

async fn count_published(queue: &Arc<dyn EventQueue>) -> Result<Seen> {
    let seen: Seen = Arc::default();
    let mut stream = queue
        .subscribe_stream(topics::NOTIFICATIONS_INBOUND)
        .await?;
    let s = seen.clone();
    tokio::spawn(async move {
        while let Some(e) = stream.recv().await {
            if let Some(k) = e.event.tags.get("delivery_key") {
                *s.lock().await.entry(k.clone()).or_default() += 1;
            }
        }
    });
    Ok(seen)
}

async fn until<F, Fut>(what: &str, mut check: F) -> Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        if start.elapsed() > LIMIT {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(start.elapsed())
}

async fn live(engine: &Engine) -> usize {
    engine
        .mattermost_sockets()
        .await
        .values()
        .filter(|s| s.is_live())
        .count()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let n = seats()?;
    let llm = FakeLlmServer::start(
        Script::new()
            .on(
                When::tool_offered("submit_plan"),
                Reply::tool_call(
                    "submit_plan",
                    json!({"decision": "direct", "reasoning": "ack", "steps": [{"intent": "ack"}]}),
                ),
            )
            .on(When::any(), Reply::text("ack")),
    )
    .await?;
    let mm = FakeMattermost::start().await;
    let team = mm.add_team("acme");
    let town = mm.add_channel(&team, "town-square", ChannelType::Open);
    let jane = mm.add_user("jane");
    mm.join(&town, &jane.id);
    let bots: Vec<User> = (0..n)
        .map(|i| mm.add_bot(&format!("agent-{i}"), &format!("Agent {i}")))
        .collect();
    let dms: Vec<String> = bots
        .iter()
        .map(|b| {
            mm.join(&town, &b.id);
            mm.direct_channel(&jane.id, &b.id)
        })
        .collect();

    let queue: Arc<dyn EventQueue> = Arc::new(MemoryBroker::new().client());
    let seen = count_published(&queue).await?;
    let backends = Backends::new(queue.clone(), Stores::memory());
    let rss_before = status_kib("VmRSS:");
    let started = Instant::now();
    let engine = EngineBuilder::new(
        company(&llm.openai_base_url(), &mm.url(), &bots)?,
        &backends,
    )
    .options(EngineOptions {
        stream_progress: false,
        ..EngineOptions::default()
    })
    .start()
    .await?;
    until("every socket to come up", || async {
        live(&engine).await == n
    })
    .await?;
    let connect = started.elapsed();
    let rss_connected = status_kib("VmRSS:");

    // One DM to each seat, live.
    let sent = Instant::now();
    for dm in &dms {
        mm.post_as(&jane.id, dm, "ping (live)", None);
    }
    until("every live DM to be published", || async {
        seen.lock().await.len() >= n
    })
    .await?;
    let live_publish = sent.elapsed();

    // The reconnect storm.
    let requests_before = mm.requests().len();
    mm.stop().await;
    until("every socket to notice", || async {
        live(&engine).await == 0
    })
    .await?;
    for dm in &dms {
        mm.post_as(&jane.id, dm, "ping (while you were away)", None);
    }
    let restarted = Instant::now();
    mm.restart().await?;
    let reconnect = until("every socket to come back", || async {
        live(&engine).await == n
    })
    .await?;
    until("every gap post to be published", || async {
        seen.lock().await.len() >= 2 * n
    })
    .await?;
    let backfill = restarted.elapsed();
    let rest_calls = mm.requests().len().saturating_sub(requests_before);
    let twice = seen.lock().await.values().filter(|c| **c > 1).count();
    let extra = seen.lock().await.len().saturating_sub(2 * n);
    let rss_after = status_kib("VmRSS:");
    let hwm = status_kib("VmHWM:");
    engine.shutdown().await;

    println!("mattermost fleet: {n} seat sockets (fake server in this process)");
    println!(
        "  connect: all {n} live after {:.0} ms (engine boot included)",
        connect.as_secs_f64() * 1e3
    );
    println!(
        "  memory: RSS {:.1} MiB before the engine, {:.1} MiB with {n} sockets live ({:.1} KiB per seat, the engine's own boot included), {:.1} MiB at the end, peak {:.1} MiB",
        mib(rss_before),
        mib(rss_connected),
        (rss_connected.saturating_sub(rss_before)) as f64 / n as f64,
        mib(rss_after),
        mib(hwm)
    );
    println!(
        "  live: {n} DMs published {:.0} ms after the first was posted",
        live_publish.as_secs_f64() * 1e3
    );
    println!(
        "  reconnect storm: all {n} sockets back {:.2} s after the restart; all {n} gap posts published {:.2} s after the restart; published twice: {twice}; unexpected extra: {extra}; REST calls during the storm: {rest_calls}",
        reconnect.as_secs_f64(),
        backfill.as_secs_f64()
    );
    Ok(())
}
