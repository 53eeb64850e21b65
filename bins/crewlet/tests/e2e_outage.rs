//! Nothing accepted is lost: the split deployment (engine and API as real
//! processes on real Pulsar and PostgreSQL) through PostgreSQL outages and
//! crashes of the API process.
//!
//! The processes reach PostgreSQL through an [`OutageProxy`]: an outage
//! closes every open connection and refuses new ones for its length, as a
//! restarting or unreachable server looks to them (the server itself keeps
//! serving the other tests). Deliveries are Slack mentions, each sent twice
//! (the sender's retry). Afterwards, read straight from the database, a
//! delivery tied to its tasks by the router's `external_notification`
//! (whichever copy was routed):
//! - **lost**: a delivery the API took that has no `task_completed`;
//! - **duplicated**: a delivery with more than one `task_completed`, or more
//!   posts through the fake MCP server than completed deliveries;
//! - **missing**: an accepted copy without its `raw_webhook`, a delivery
//!   without any stored `raw_webhook`, or a routed task without one of the
//!   events its turn must leave.
//!
//! All three must be 0. Each test prints its figures on one line.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::fake_llm::FakeLlmServer;
use crewlet_test_support::outage::OutageProxy;
use serde_json::Value;
use tokio::time::Instant;

const SLACK_SECRET: &str = "outage-slack-secret";

/// Events every routed delivery must have left once its turn is done (all
/// but `raw_webhook` carry its task id).
const TURN_EVENTS: [&str; 5] = [
    "raw_webhook",
    "task_created",
    "task_started",
    "agent_turn_completed",
    "task_completed",
];

/// What one run counted.
#[derive(Debug, Default)]
struct Figures {
    deliveries: usize,
    /// Copies the API answered `accepted: true`.
    accepted_copies: usize,
    /// Copies the API answered `duplicate: true` (nothing published).
    api_duplicates: usize,
    refused: usize,
    lost: usize,
    duplicated: usize,
    missing: usize,
    mcp_posts: usize,
}

/// One accepted copy: its delivery and the trace the API started for it.
struct Copy {
    delivery: String,
    trace_id: String,
    event_id: String,
}

/// `dsn` with its `host:port` replaced by `addr`.
fn through(dsn: &str, addr: std::net::SocketAddr) -> (String, std::net::SocketAddr) {
    let rest = dsn.split_once("://").map_or(dsn, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let target: std::net::SocketAddr = host_port
        .replace("localhost", "127.0.0.1")
        .parse()
        .unwrap_or_else(|e| panic!("test DSN host {host_port}: {e}"));
    (dsn.replacen(host_port, &addr.to_string(), 1), target)
}

async fn connect(dsn: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {dsn}: {e}"));
    tokio::spawn(conn);
    client
}

/// `event_type` of every stored event of `trace_id`.
async fn trace_types(db: &tokio_postgres::Client, trace_id: &str) -> Vec<String> {
    db.query(
        "SELECT event_type FROM crewlet_events WHERE trace_id = $1",
        &[&trace_id],
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"))
    .iter()
    .map(|r| r.get::<_, String>(0))
    .collect()
}

struct Run {
    name: &'static str,
    split: SplitDeployment,
    proxy: OutageProxy,
    db: FreshDatabase,
    /// A direct connection (not through the proxy) for counting.
    direct: tokio_postgres::Client,
    copies: Vec<Copy>,
    deliveries: Vec<String>,
    figures: Figures,
    _llm: FakeLlmServer,
}

impl Run {
    async fn start(name: &'static str) -> Option<Self> {
        let pulsar = crewlet_test_support::services::require_pulsar()?;
        let admin_dsn = crewlet_test_support::services::require_postgres()?;
        let db = FreshDatabase::create(&admin_dsn).await;
        let (_, target) = through(&db.dsn, "127.0.0.1:1".parse().ok()?);
        let proxy = OutageProxy::start(target)
            .await
            .unwrap_or_else(|e| panic!("proxy: {e}"));
        let (proxied, _) = through(&db.dsn, proxy.addr());
        let llm = FakeLlmServer::start(script())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let base_url = llm.openai_base_url();
        let logs = [("RUST_LOG", "info,crewlet_engine=debug")];
        let split = SplitDeployment::start(SplitOptions {
            name,
            pulsar_url: &pulsar,
            dsn: &proxied,
            llm_base_url: &base_url,
            slack_secret: SLACK_SECRET,
            engine_env: &logs,
            api_env: &logs,
            api_token: None,
        })
        .await;
        let direct = connect(&db.dsn).await;
        Some(Self {
            name,
            split,
            proxy,
            db,
            direct,
            copies: Vec::new(),
            deliveries: Vec::new(),
            figures: Figures::default(),
            _llm: llm,
        })
    }

    /// Sends delivery `i` once (a copy); records what the API answered.
    /// A connection error (the API process is down) counts as refused.
    async fn send(&mut self, i: usize) -> bool {
        let delivery = format!("Ev-{}-{i}", self.name);
        if !self.deliveries.contains(&delivery) {
            self.deliveries.push(delivery.clone());
        }
        let (body, headers) = slack_mention(SLACK_SECRET, &delivery);
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let mut request = client
            .post(format!("{}/webhooks/slack/eng", self.split.base))
            .body(body);
        for (k, v) in &headers {
            request = request.header(*k, v.as_str());
        }
        let Ok(response) = request.send().await else {
            self.figures.refused += 1;
            return false;
        };
        let status = response.status().as_u16();
        let answer: Value = response.json().await.unwrap_or_default();
        if status != 200 {
            self.figures.refused += 1;
            return false;
        }
        if answer["duplicate"] == true {
            self.figures.api_duplicates += 1;
        } else if answer["accepted"] == true {
            self.figures.accepted_copies += 1;
            self.copies.push(Copy {
                delivery,
                trace_id: answer["trace_id"].as_str().unwrap_or_default().to_owned(),
                event_id: answer["event_id"].as_str().unwrap_or_default().to_owned(),
            });
        }
        true
    }

    /// `task_completed` events of the tasks routed for `delivery`, and the
    /// task ids routed for it (a delivery is tied to its tasks by the
    /// router's `external_notification` record, whichever copy was routed).
    async fn completed(&self, delivery: &str) -> (usize, Vec<String>) {
        let rows = self
            .direct
            .query(
                "SELECT n.task_id,
                        (SELECT count(*) FROM crewlet_events c
                          WHERE c.task_id = n.task_id AND c.event_type = 'task_completed')
                   FROM crewlet_events n
                  WHERE n.event_type = 'external_notification'
                    AND n.payload->>'delivery_key' = $1",
                &[&delivery],
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let tasks: Vec<String> = rows
            .iter()
            .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default())
            .collect();
        let done = rows.iter().map(|r| r.get::<_, i64>(1)).sum::<i64>();
        (usize::try_from(done).unwrap_or(0), tasks)
    }

    /// Waits until every delivery the API took has a completed task and
    /// every accepted copy is settled (its trace holds a `task_completed`
    /// or the router's `notification_skipped` for a duplicate), then counts.
    async fn settle_and_count(&mut self) -> &Figures {
        let deadline = Instant::now() + Duration::from_secs(240);
        // A delivery the API answered only as a duplicate (its first copy's
        // answer was cut off by a crash) must still have its raw_webhook
        // stored: that is the audit trail.
        let answered: HashSet<String> = self.copies.iter().map(|c| c.delivery.clone()).collect();
        let taken: Vec<String> = self.deliveries.clone();
        loop {
            let mut open = 0;
            for c in &self.copies {
                let types = trace_types(&self.direct, &c.trace_id).await;
                if !types
                    .iter()
                    .any(|t| t == "task_completed" || t == "notification_skipped")
                {
                    open += 1;
                }
            }
            for d in &taken {
                if self.completed(d).await.0 == 0 {
                    open += 1;
                }
            }
            if open == 0 || Instant::now() > deadline {
                break;
            }
            assert!(
                self.split.engine.is_running(),
                "the engine exited\n{}",
                self.split.engine.log()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        for c in &self.copies {
            let stored = self
                .direct
                .query_one(
                    "SELECT count(*) FROM crewlet_events WHERE event_id::text = $1 AND event_type = 'raw_webhook'",
                    &[&c.event_id],
                )
                .await
                .map(|r| r.get::<_, i64>(0))
                .unwrap_or(0);
            if stored != 1 {
                self.figures.missing += 1;
            }
        }
        self.figures.deliveries = self.deliveries.len();
        let mut tasks_done = 0;
        for d in &taken {
            let (done, tasks) = self.completed(d).await;
            if done == 0 {
                self.figures.lost += 1;
            }
            tasks_done += done.min(1);
            self.figures.duplicated += done.saturating_sub(1);
            // The turn's record, by task id: a task merged into another
            // (inbox batching: these deliveries are one Slack thread) ends
            // with a `task_completed` naming it, whose turn holds the record.
            for task in tasks.iter().filter(|t| !t.is_empty()) {
                let merged_into: Option<String> = self
                    .direct
                    .query_opt(
                        "SELECT payload->>'merged_into' FROM crewlet_events WHERE task_id = $1 AND event_type = 'task_completed' AND payload ? 'merged_into' LIMIT 1",
                        &[task],
                    )
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
                    .and_then(|r| r.get::<_, Option<String>>(0));
                let task = merged_into.as_ref().unwrap_or(task);
                let types: Vec<String> = self
                    .direct
                    .query(
                        "SELECT DISTINCT event_type FROM crewlet_events WHERE task_id = $1",
                        &[task],
                    )
                    .await
                    .unwrap_or_else(|e| panic!("{e}"))
                    .iter()
                    .map(|r| r.get::<_, String>(0))
                    .collect();
                if types.iter().any(|t| t == "task_completed") {
                    for expected in TURN_EVENTS.iter().filter(|t| **t != "raw_webhook") {
                        if !types.iter().any(|t| t == expected) {
                            self.figures.missing += 1;
                        }
                    }
                }
            }
            let raw = self
                .direct
                .query_one(
                    "SELECT count(*) FROM crewlet_events WHERE event_type = 'raw_webhook' AND tags->>'delivery_key' = $1",
                    &[d],
                )
                .await
                .map(|r| r.get::<_, i64>(0))
                .unwrap_or(0);
            if raw == 0 {
                self.figures.missing += 1;
            }
            if !answered.contains(d) && raw == 0 {
                eprintln!("{d}: answered only as a duplicate and no raw_webhook stored");
            }
        }
        self.figures.mcp_posts = crewlet_fake_mcp::read_log(&self.split.mcp_log)
            .unwrap_or_default()
            .iter()
            .filter(|l| l["event"] == "tool_call")
            .count();
        if self.figures.mcp_posts > tasks_done {
            self.figures.duplicated += self.figures.mcp_posts - tasks_done;
        }
        &self.figures
    }

    fn report(&self, what: &str) {
        let f = &self.figures;
        println!(
            "outage figures [{what}]: deliveries {} | copies accepted {} | api duplicates {} | refused {} | lost {} | duplicated {} | events missing {} | mcp posts {} | connections refused by the outage {}",
            f.deliveries,
            f.accepted_copies,
            f.api_duplicates,
            f.refused,
            f.lost,
            f.duplicated,
            f.missing,
            f.mcp_posts,
            self.proxy.refused()
        );
        assert_eq!(
            (f.lost, f.duplicated, f.missing),
            (0, 0, 0),
            "{what}: {f:?}\n--- engine ---\n{}\n--- api ---\n{}",
            self.split.engine.log(),
            self.split.api.log()
        );
        assert!(f.accepted_copies > 0, "{what}: nothing was accepted: {f:?}");
    }

    async fn finish(mut self) {
        self.split.stop_cleanly().await;
        let Run { split, db, .. } = self;
        split.clean_up().await;
        drop(db);
    }
}

/// Deliveries sent while PostgreSQL is away for `outage`, each twice,
/// spread over the outage; then the database comes back.
async fn outage(name: &'static str, outage: Duration, deliveries: usize) {
    let Some(mut run) = Run::start(name).await else {
        return;
    };
    run.proxy.cut();
    let started = Instant::now();
    let gap = outage / u32::try_from(deliveries * 2).unwrap_or(1);
    for i in 0..deliveries {
        for _copy in 0..2 {
            run.send(i).await;
            if started.elapsed() + gap < outage {
                tokio::time::sleep(gap).await;
            }
        }
    }
    tokio::time::sleep_until(started + outage).await;
    run.proxy.restore();
    run.settle_and_count().await;
    run.report(&format!("{name}: postgresql away {:?}", outage));
    run.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quick_database_restart_loses_and_doubles_nothing() {
    outage("restart", Duration::from_millis(200), 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_30_second_database_outage_loses_and_doubles_nothing() {
    outage("outage30", Duration::from_secs(30), 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_3_minute_database_outage_loses_and_doubles_nothing() {
    outage("outage180", Duration::from_secs(180), 20).await;
}

/// A burst of deliveries with the API process killed (SIGKILL) five times
/// in the middle and started again; the sender retries what got no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_crashes_during_a_burst_lose_no_audit_event() {
    let Some(mut run) = Run::start("apikill").await else {
        return;
    };
    let port = run
        .split
        .base
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let deliveries = 40;
    let mut pending: Vec<usize> = (0..deliveries).collect();
    let mut kills = 0;
    while let Some(&i) = pending.first() {
        // Kill the API right after it answered a delivery in the middle of
        // the burst, while the next copies are in flight.
        if i > 0 && i % 7 == 0 && kills < 5 && i / 7 > kills {
            let burst: Vec<usize> = pending.iter().copied().take(3).collect();
            let base = run.split.base.clone();
            let sends = burst.iter().map(|i| {
                let delivery = format!("Ev-apikill-{i}");
                let base = base.clone();
                async move {
                    let (body, headers) = slack_mention(SLACK_SECRET, &delivery);
                    post(&base, "/webhooks/slack/eng", body, &headers).await
                }
            });
            let fired = futures_join(sends);
            tokio::pin!(fired);
            tokio::select! {
                _ = &mut fired => {}
                () = tokio::time::sleep(Duration::from_millis(5)) => {}
            }
            run.split.api.kill();
            kills += 1;
            let args = ["run", "api", "cfg.yaml", "--port", port.as_str()];
            let logs = [("RUST_LOG", "info,crewlet_engine=debug")];
            run.split.api = Proc::spawn_env("api", &run.split.dir, &args, &logs);
            let base = run.split.base.clone();
            wait_for(
                "the api to be ready again",
                &mut [&mut run.split.api],
                || async { (get(&base, "/ready").await.0 == 200).then_some(()) },
            )
            .await;
        }
        if run.send(i).await {
            pending.remove(0);
        }
    }
    // Copies fired just before a kill got no answer the test could read;
    // they are deliveries like the rest (the retry above answered them).
    run.settle_and_count().await;
    run.report(&format!(
        "api SIGKILL x{kills} during a burst of {deliveries}"
    ));
    run.finish().await;
}

/// Runs the futures together (no `futures` dependency here).
async fn futures_join<F: std::future::Future>(futures: impl Iterator<Item = F>) {
    let handles: Vec<_> = futures.map(|f| Box::pin(f)).collect();
    for h in handles {
        h.await;
    }
}
