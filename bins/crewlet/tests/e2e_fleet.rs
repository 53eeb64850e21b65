//! A fleet of three `crewlet run` processes on real Pulsar and PostgreSQL.
//!
//! - A node is SIGKILLed in the middle of a turn that has already posted a
//!   comment through a tool: the seat moves to another node, the turn
//!   resumes there from its journal, the comment is posted once (counted
//!   on the fake MCP server), the model is not asked again for the steps
//!   the journal holds (counted on the fake model server) and the task
//!   completes once; `crewlet replay` then walks the recorded turn with no
//!   model call.
//! - Every node is drained, stopped and started again in turn under a
//!   steady load: no task is lost and none runs twice.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use serde_json::{Value, json};

const TOKEN: &str = "fleet-admin-token-4Tq9";
const NODES: [&str; 3] = ["n1", "n2", "n3"];

struct Node {
    id: &'static str,
    port: u16,
    proc: Proc,
}

impl Node {
    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

struct Fleet {
    dir: PathBuf,
    mcp_log: PathBuf,
    namespace: PulsarNamespace,
    nodes: Vec<Node>,
    seats: Vec<&'static str>,
}

fn spawn_node(dir: &std::path::Path, id: &'static str, port: u16) -> Node {
    let port_arg = port.to_string();
    let proc = Proc::spawn_env(
        id,
        dir,
        &["run", "cfg.yaml", "--api-port", &port_arg],
        &[
            ("CREWLET_NODE_ID", id),
            ("RUST_LOG", "info,crewlet_engine=debug"),
        ],
    );
    Node { id, port, proc }
}

impl Fleet {
    async fn start(name: &str, pulsar: &str, dsn: &str, llm: &str, seats: &[&'static str]) -> Self {
        let namespace = PulsarNamespace::create(&format!("e2e-{name}")).await;
        let dir = temp_dir(name);
        let mcp_log = dir.join("mcp.jsonl");
        let fake_mcp = crewlet_fake_mcp::binary_path().unwrap_or_else(|e| panic!("{e}"));
        let config = format!(
            "providers:\n  queue:\n    type: pulsar\n    url: \"{pulsar}\"\n    tenant: {tenant}\n    namespace: \"{ns}\"\n  database:\n    dsn: \"{dsn}\"\napi:\n  host: 127.0.0.1\n  port: 0\n  auth:\n    tokens:\n      - {{id: e2e-admin, token: \"{TOKEN}\", scopes: [read, operate, admin]}}\nnode:\n  lease_ttl_seconds: 6\n  heartbeat_seconds: 1\nsecurity:\n  mcp_commands: [\"{mcp}\"]\n",
            tenant = namespace.tenant,
            ns = namespace.name,
            mcp = fake_mcp.display(),
        );
        std::fs::write(dir.join("cfg.yaml"), config).unwrap_or_else(|e| panic!("{e}"));
        let roles: String = seats
            .iter()
            .map(|h| {
                format!(
                    "  - name: Seat {h}\n    handle: {h}\n    mcp_env: {{chat: {{FAKE_MCP_IDENTITY: {h}-bot}}}}\n"
                )
            })
            .collect();
        let company = format!(
            r#"name: "{name} Co {ns}"
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{llm}", timeout_seconds: 600}}
mcp_servers:
  - name: chat
    shared: false
    command: "{bin}"
    env: {{FAKE_MCP_LOG: "{log}"}}
roles:
{roles}"#,
            ns = namespace.name,
            bin = fake_mcp.display(),
            log = mcp_log.display(),
        );
        std::fs::write(dir.join("company.yaml"), company).unwrap_or_else(|e| panic!("{e}"));
        import_company(&dir);
        let nodes: Vec<Node> = NODES
            .iter()
            .map(|id| spawn_node(&dir, id, free_port()))
            .collect();
        let mut fleet = Self {
            dir,
            mcp_log,
            namespace,
            nodes,
            seats: seats.to_vec(),
        };
        fleet.settled(3).await;
        fleet
    }

    fn node(&mut self, id: &str) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// Waits until `live` nodes are up and every seat is held by one of
    /// them; returns `GET /fleet`.
    async fn settled(&mut self, live: usize) -> Value {
        let seats = self.seats.len();
        let bases: Vec<String> = self.nodes.iter().map(Node::base).collect();
        let mut procs: Vec<&mut Proc> = self.nodes.iter_mut().map(|n| &mut n.proc).collect();
        wait_for("the fleet to settle", &mut procs, || {
            let bases = bases.clone();
            async move {
                for base in &bases {
                    if get(base, "/ready").await.0 != 200 {
                        return None;
                    }
                }
                let (_, fleet) = get(&bases[0], "/fleet").await;
                let nodes = fleet["nodes"]
                    .as_array()?
                    .iter()
                    .filter(|n| n["live"] == true)
                    .count();
                let held = fleet["seats"]
                    .as_array()?
                    .iter()
                    .filter(|s| s["live"] == true)
                    .count();
                let unheld = fleet["unheld"].as_array()?.len();
                (nodes == live && held == seats && unheld == 0).then_some(fleet)
            }
        })
        .await
    }

    async fn clean_up(mut self) {
        for n in &mut self.nodes {
            n.proc.stop().await;
        }
        drop(self.nodes);
        self.namespace.delete().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn post_task(base: &str, handle: &str, text: &str) -> String {
    let resp = reqwest::Client::new()
        .post(format!("{base}/agents/{handle}/tasks"))
        .bearer_auth(TOKEN)
        .json(&json!({"text": text}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("posting a task: {e}"));
    assert_eq!(resp.status().as_u16(), 202, "posting a task");
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    body["task_id"].as_str().unwrap_or_default().to_owned()
}

/// The task's events of `event_type`, read with the token: their content
/// (`final_artifact`) needs `read:content`.
async fn events_of(base: &str, event_type: &str, task_id: &str) -> Vec<Value> {
    let body: Value = match reqwest::Client::new()
        .get(format!(
            "{base}/events?type={event_type}&task_id={task_id}&limit=500"
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
    {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    };
    body["events"].as_array().cloned().unwrap_or_default()
}

fn posts(log: &std::path::Path) -> Vec<Value> {
    crewlet_fake_mcp::read_log(log)
        .unwrap_or_default()
        .into_iter()
        .filter(|l| l["tool"] == "post_message")
        .collect()
}

/// Whether a request to the model carries a tool's result.
fn asks_after_a_tool(body: &Value) -> bool {
    body["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
}

/// Holds back the first answer after the tool (the node is killed while it
/// waits); a resumed turn that asks again, on whichever node holds the seat
/// by then, is answered at once by the happy turn's rules.
fn hold_the_answer_after_the_tool(llm: &FakeLlmServer) {
    llm.push_front_rule(
        When::tool_offered("chat__post_message").and_after_tool_result(true),
        Reply::text("posted")
            .usage(50, 10)
            .delay(Duration::from_secs(600))
            .times(1),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_killed_mid_turn_loses_nothing_and_repeats_no_effect() {
    let pulsar = crewlet_test_support::require!(pulsar);
    let admin_dsn = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin_dsn).await;
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    hold_the_answer_after_the_tool(&llm);
    let mut fleet = Fleet::start(
        "fleet-kill",
        &pulsar,
        &db.dsn,
        &llm.openai_base_url(),
        &["eng", "ops", "qa"],
    )
    .await;
    fleet.settled(3).await;
    let task_id = post_task(&fleet.nodes[0].base(), "eng", "post the one comment").await;

    // The comment is out and journaled, and the held question after it has
    // reached the model (else the resumed turn would be the one held). The
    // victim is the node that journaled the comment, under its epoch.
    let journal = crewlet_store::PostgresEffectJournal::new(
        crewlet_store::Database::connect(&db.dsn)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let mcp_log = fleet.mcp_log.clone();
    let (victim, epoch) = {
        let mut procs: Vec<&mut Proc> = fleet.nodes.iter_mut().map(|n| &mut n.proc).collect();
        wait_for("the comment to be posted and journaled", &mut procs, || {
            let (journal, mcp_log, task_id, llm) = (&journal, &mcp_log, &task_id, &llm);
            async move {
                let held = llm.requests().iter().any(|r| asks_after_a_tool(&r.body));
                if !held {
                    return None;
                }
                use crewlet_store::EffectJournal;
                let keys = journal.keys_for_task(task_id).await.ok()?;
                let entries = journal.load(keys.first()?).await.ok()?;
                let result = entries.iter().find(|e| e.kind == "tool_result")?;
                let node = result.node.split(':').next()?.to_owned();
                (posts(mcp_log).len() == 1).then_some((node, result.epoch))
            }
        })
        .await
    };
    let victim: &'static str = NODES
        .iter()
        .find(|n| **n == victim)
        .copied()
        .unwrap_or_else(|| panic!("unknown node {victim}"));
    let asked_before = llm.request_count();
    fleet.node(victim).proc.kill();
    let killed = Instant::now();

    // The seat moves to a survivor, with a greater epoch.
    let survivors: Vec<String> = fleet
        .nodes
        .iter()
        .filter(|n| n.id != victim)
        .map(Node::base)
        .collect();
    let mut live: Vec<&mut Proc> = fleet
        .nodes
        .iter_mut()
        .filter(|n| n.id != victim)
        .map(|n| &mut n.proc)
        .collect();
    let (new_owner, new_epoch) = wait_for("the seat to move", &mut live, || {
        let base = survivors[0].clone();
        async move {
            let (_, view) = get(&base, "/fleet").await;
            let seat = view["seats"]
                .as_array()?
                .iter()
                .find(|s| s["handle"] == "eng" && s["live"] == true)?
                .clone();
            let node = seat["node"].as_str()?.to_owned();
            (node != victim).then(|| (node, seat["epoch"].as_i64().unwrap_or_default()))
        }
    })
    .await;
    let failover = killed.elapsed();
    eprintln!("failover after SIGKILL: {} ms", failover.as_millis());
    assert!(new_epoch > epoch, "epoch {new_epoch} after {epoch}");

    let completed = wait_for("the task to complete on the new owner", &mut live, || {
        let (base, task_id) = (survivors[0].clone(), task_id.clone());
        async move {
            let done = events_of(&base, "task_completed", &task_id).await;
            (!done.is_empty()).then_some(done)
        }
    })
    .await;
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert_eq!(completed[0]["payload"]["final_artifact"], "posted");
    let resumed = events_of(&survivors[0], "turn_resumed", &task_id).await;
    assert_eq!(resumed.len(), 1, "the turn resumed from its journal once");
    let entries = resumed[0]["payload"]["journal_entries"]
        .as_u64()
        .unwrap_or_default();
    assert!(entries >= 4, "the resume read {entries} journal entries");

    // One comment, and no journaled step asked again: the plan and the call
    // that posted were asked once each (before the kill).
    assert_eq!(
        posts(&fleet.mcp_log).len(),
        1,
        "the comment was posted once"
    );
    let requests: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    let offers = |b: &Value, tool: &str| {
        b["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == tool))
    };
    let plans = requests.iter().filter(|b| offers(b, "submit_plan")).count();
    let first_calls = requests
        .iter()
        .filter(|b| {
            offers(b, "chat__post_message") && !offers(b, "submit_plan") && !asks_after_a_tool(b)
        })
        .count();
    assert_eq!(plans, 1, "the plan was asked again after the resume");
    assert_eq!(first_calls, 1, "the call that posted was asked again");
    assert!(
        llm.request_count() > asked_before,
        "the rest of the turn ran"
    );
    assert_ne!(new_owner, victim);

    // The completion ledger holds the trigger once; replay walks the turn
    // with no model call.
    let asked = llm.request_count();
    let out = output({
        let mut c = crewlet();
        c.args(["replay", &task_id, "--config", "cfg.yaml"])
            .current_dir(&fleet.dir);
        c
    })
    .await;
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    assert_eq!(llm.request_count(), asked, "replay asked the model");
    assert!(
        printed.contains("[journal] chat__post_message"),
        "{printed}"
    );
    assert!(printed.contains(": done"), "{printed}");
    assert!(
        printed.contains("the recorded turn ended: done"),
        "{printed}"
    );
    assert!(printed.contains("final artifact:\nposted"), "{printed}");
    assert!(
        !printed.contains("[live]"),
        "a replay step ran live: {printed}"
    );
    assert_eq!(posts(&fleet.mcp_log).len(), 1, "replay posted again");
    eprintln!("{printed}");

    fleet.clean_up().await;
    drop(db);
}

/// Answers every turn directly (no tools), quickly.
fn direct() -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "simple", "steps": [{"intent": "answer"}]}),
            )
            .usage(10, 5)
            .delay(Duration::from_millis(150)),
        )
        .on(
            When::any(),
            Reply::text("done")
                .usage(10, 5)
                .delay(Duration::from_millis(150)),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_drain_of_every_node_loses_and_repeats_no_task() {
    let pulsar = crewlet_test_support::require!(pulsar);
    let admin_dsn = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin_dsn).await;
    let llm = FakeLlmServer::start(direct())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let seats = ["s1", "s2", "s3", "s4", "s5", "s6"];
    let mut fleet = Fleet::start(
        "fleet-drain",
        &pulsar,
        &db.dsn,
        &llm.openai_base_url(),
        &seats,
    )
    .await;

    // A steady load: a task every 150 ms, round robin over the seats,
    // posted through whichever node is not being restarted.
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let (target_tx, target_rx) = tokio::sync::watch::channel(fleet.nodes[0].base());
    let producer = tokio::spawn(async move {
        let mut posted: Vec<String> = Vec::new();
        let mut i = 0usize;
        loop {
            let base = target_rx.borrow().clone();
            let handle = seats[i % seats.len()];
            posted.push(post_task(&base, handle, &format!("task {i}")).await);
            i += 1;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(150)) => {}
                _ = stop_rx.changed() => break,
            }
        }
        posted
    });

    for round in 0..NODES.len() {
        let id = NODES[round];
        let next = NODES[(round + 1) % NODES.len()];
        let next_base = fleet.node(next).base();
        target_tx.send_replace(next_base);
        let drained = Instant::now();
        let out = output({
            let mut c = crewlet();
            c.args([
                "node",
                "drain",
                id,
                "--wait",
                "--timeout",
                "90",
                "--config",
                "cfg.yaml",
            ])
            .current_dir(&fleet.dir);
            c
        })
        .await;
        assert!(out.status.success(), "drain {id}: {}", text(&out));
        eprintln!("{id} drained in {} ms", drained.elapsed().as_millis());
        let node = fleet.node(id);
        assert_eq!(
            node.proc.stop().await,
            Some(0),
            "{id} exit:\n{}",
            node.proc.log()
        );
        let port = node.port;
        let dir = fleet.dir.clone();
        *fleet.node(id) = spawn_node(&dir, id, port);
        fleet.settled(3).await;
    }
    stop_tx.send_replace(true);
    let posted = producer.await.unwrap_or_default();
    assert!(posted.len() >= 10, "only {} tasks posted", posted.len());

    // Every task completed exactly once.
    let base = fleet.nodes[0].base();
    let mut procs: Vec<&mut Proc> = fleet.nodes.iter_mut().map(|n| &mut n.proc).collect();
    let counts: BTreeMap<String, usize> = wait_for("every task to complete", &mut procs, || {
        let (base, posted) = (base.clone(), posted.clone());
        async move {
            let mut counts = BTreeMap::new();
            let mut next: Option<String> = None;
            loop {
                let path = match &next {
                    Some(c) => format!("/events?type=task_completed&limit=500&cursor={c}"),
                    None => "/events?type=task_completed&limit=500".to_owned(),
                };
                let (_, page) = get(&base, &path).await;
                for e in page["events"].as_array()? {
                    if let Some(t) = e["task_id"].as_str() {
                        *counts.entry(t.to_owned()).or_insert(0) += 1;
                    }
                }
                match page["next"].as_str() {
                    Some(c) if !c.is_empty() => next = Some(c.to_owned()),
                    _ => break,
                }
            }
            posted
                .iter()
                .all(|t| counts.contains_key(t))
                .then_some(counts)
        }
    })
    .await;
    let twice: Vec<(&String, &usize)> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "tasks completed more than once: {twice:?}"
    );
    assert_eq!(
        posted.iter().filter(|t| counts.get(*t) == Some(&1)).count(),
        posted.len()
    );
    eprintln!(
        "{} tasks across a rolling drain of 3 nodes: each completed once",
        posted.len()
    );
    fleet.clean_up().await;
    drop(db);
}
