//! One turn per conversation burst, on the memory broker and on Pulsar:
//! ten comments on one issue that wait while the seat is busy become one
//! follow-up turn that sees all ten; another issue's comments are never
//! merged into it; an engine that stops in the middle of a merge loses
//! nothing, and the merged turn runs once on the next engine.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use crewlet_config::Company;
use crewlet_core::payload::{TaskRequest, TaskSeat};
use crewlet_core::{AgentId, Event, EventType, TraceContext};
use crewlet_engine::{Backends, EngineBuilder, EngineOptions};
use crewlet_queue::{EventQueue, MemoryBroker, PulsarOptions, PulsarQueue, topics};
use crewlet_store::Stores;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use crewlet_test_support::services::pulsar_admin_url;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(90);
const COMPANY: &str = "Burst Co";

fn company(base_url: &str, window: f64, max_concurrent: u32) -> Company {
    let yaml = format!(
        "name: {COMPANY}\nnotification_coalesce_window_seconds: {window}\nturn_engine:\n  max_concurrent_turns: {max_concurrent}\nproviders:\n  llm:\n    fake: {{type: openai-compatible, model: fake-model, base_url: \"{base_url}\"}}\nroles:\n  - {{name: Engineer, handle: eng}}\n  - {{name: Operator, handle: ops}}\n"
    );
    Company::from_yaml("burst", &yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// Quick turns, except a task that says "slow job".
fn script() -> Script {
    let slow = Duration::from_secs(3);
    Script::new()
        .on(
            When::tool_offered("submit_plan").and_system_contains("slow job"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "slow", "steps": [{"intent": "answer"}]}),
            )
            .delay(slow),
        )
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "simple", "steps": [{"intent": "answer"}]}),
            ),
        )
        .on(When::any(), Reply::text("done"))
}

fn options() -> EngineOptions {
    EngineOptions {
        drain_timeout: Duration::from_secs(30),
        stream_progress: false,
        ..EngineOptions::default()
    }
}

/// A comment on GitHub issue `number` of acme/api, as the router posts it.
fn comment(handle: &str, number: u32, sender: &str, text: &str) -> Event {
    let mut r = TaskRequest::new(handle, "github", text);
    r.channel = Some("acme/api".into());
    r.thread = Some(number.to_string());
    r.sender = Some(sender.into());
    let seat = TaskSeat {
        agent_id: AgentId::for_seat(COMPANY, handle),
        name: "Engineer",
        handle,
    };
    r.to_event(
        seat,
        &uuid::Uuid::now_v7().to_string(),
        "github",
        TraceContext::new_root(),
    )
}

async fn post(queue: &dyn EventQueue, e: &Event) {
    let inbox = topics::agent_inbox(e.agent_handle().unwrap_or("eng"));
    queue
        .publish(&inbox.topic, e)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
}

/// The user messages the model was sent for seat turns holding `text`.
fn prompts_with(llm: &FakeLlmServer, text: &str) -> Vec<String> {
    llm.requests()
        .into_iter()
        .map(|r| r.body.to_string())
        .filter(|b| b.contains(text))
        .collect()
}

/// Ten comments on #7 and three on #8 wait while the inbox is held (as
/// while a turn runs); then two turns run, one per issue.
async fn ten_comments_make_one_turn(queue: Arc<dyn EventQueue>, window: f64) {
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("fake llm: {e}"));
    let stores = Stores::memory();
    let backends = Backends::new(queue.clone(), stores.clone());
    let engine = EngineBuilder::new(company(&llm.openai_base_url(), window, 10), &backends)
        .options(options())
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let inbox = topics::agent_inbox("eng");
    queue
        .pause(&inbox.topic, &inbox.group)
        .unwrap_or_else(|e| panic!("{e}"));
    for i in 1..=10 {
        let sender = if i % 2 == 0 { "ann" } else { "bob" };
        post(
            &*queue,
            &comment("eng", 7, sender, &format!("comment number {i} on seven")),
        )
        .await;
        if i % 4 == 0 {
            post(
                &*queue,
                &comment("eng", 8, "cid", &format!("remark {i} on eight")),
            )
            .await;
        }
    }
    queue
        .resume(&inbox.topic, &inbox.group)
        .unwrap_or_else(|e| panic!("{e}"));

    wait_for("two turns to complete", WAIT, || async {
        (events_of(&stores, EventType::TaskCompleted).await.len() >= 2).then_some(())
    })
    .await;
    // Nothing else is coming: a third turn would have started by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = events_of(&stores, EventType::TaskStarted).await;
    assert_eq!(started.len(), 2, "one turn per issue: {started:#?}");
    let merges = events_of(&stores, EventType::NotificationsCoalesced).await;
    let mut counts: Vec<u64> = merges
        .iter()
        .filter_map(|e| e.payload["count"].as_u64())
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, vec![2, 10], "{merges:#?}");
    assert!(
        merges
            .iter()
            .any(|e| e.payload["conversation_key"] == "github:acme/api:7")
    );

    // Every comment's own task ended: the latest of each issue with its
    // turn, each earlier one with a task_completed naming the merged task.
    let done = events_of(&stores, EventType::TaskCompleted).await;
    assert_eq!(done.len(), 12, "{done:#?}");
    let merged_into: Vec<&Event> = done
        .iter()
        .filter(|e| e.payload.get("merged_into").is_some())
        .collect();
    assert_eq!(merged_into.len(), 10, "9 earlier comments on #7, 1 on #8");
    let mut ids: Vec<&str> = done.iter().filter_map(|e| e.task_id.as_deref()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 12, "one end per comment");

    // The #7 turn saw all ten; no #8 remark reached it, nor the reverse.
    let seven = prompts_with(&llm, "comment number 1 on seven");
    assert!(!seven.is_empty(), "the #7 turn reached the model");
    assert!(
        seven
            .iter()
            .any(|p| (1..=10).all(|i| p.contains(&format!("comment number {i} on seven")))),
        "the merged turn saw all ten"
    );
    for p in &seven {
        assert!(!p.contains("on eight"), "two conversations merged");
    }
    for p in prompts_with(&llm, "on eight") {
        assert!(!p.contains("on seven"), "two conversations merged");
    }
    engine.shutdown().await;
    queue.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_comments_during_a_turn_make_one_follow_up_turn_on_memory() {
    let broker = MemoryBroker::new();
    ten_comments_make_one_turn(Arc::new(broker.client()), 0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_comments_during_a_turn_make_one_follow_up_turn_on_pulsar() {
    let url = crewlet_test_support::require!(pulsar);
    let ns = Namespace::create(url, "e2e-burst").await;
    // On a broker the held backlog reaches the member over the network
    // after it re-attaches: a window lets the drain take all of it.
    ten_comments_make_one_turn(ns.connect("burst").await, 2.0).await;
    ns.drop_it().await;
}

/// A fresh Pulsar namespace for one test, deleted by [`Namespace::drop_it`].
struct Namespace {
    url: String,
    name: String,
}

impl Namespace {
    async fn create(url: String, prefix: &str) -> Self {
        let name = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
        let created = reqwest::Client::new()
            .put(format!(
                "{}/admin/v2/namespaces/public/{name}",
                pulsar_admin_url()
            ))
            .json(&json!({}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("pulsar admin: {e}"));
        assert!(created.status().is_success(), "{}", created.status());
        Self { url, name }
    }

    async fn connect(&self, client: &str) -> Arc<dyn EventQueue> {
        let mut options = PulsarOptions::new(&self.url).with_namespace("public", &self.name);
        options.client_name = client.into();
        Arc::new(
            PulsarQueue::connect(options)
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        )
    }

    async fn drop_it(self) {
        let _ = reqwest::Client::new()
            .delete(format!(
                "{}/admin/v2/namespaces/public/{}?force=true",
                pulsar_admin_url(),
                self.name
            ))
            .send()
            .await;
    }
}

/// The engine stops while the merged task waits for a turn slot (after
/// the merge, before the turn): nothing was acknowledged, so the next
/// engine merges the ten again and runs the turn once. `connect` gives
/// each engine its own connection to the same broker.
async fn stopping_mid_merge<F, Fut>(connect: F, window: f64) -> Arc<dyn EventQueue>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Arc<dyn EventQueue>>,
{
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("fake llm: {e}"));
    let stores = Stores::memory();
    // One turn slot, taken by a slow task of another seat.
    let c = company(&llm.openai_base_url(), window, 1);
    let a = Backends::new(connect().await, stores.clone());
    let first = EngineBuilder::new(c.clone(), &a)
        .options(options())
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    first
        .assign("ops", "test", "a slow job")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("the slow turn to start", WAIT, || async {
        (!events_of(&stores, EventType::TaskStarted).await.is_empty()).then_some(())
    })
    .await;
    let inbox = topics::agent_inbox("eng");
    a.queue
        .pause(&inbox.topic, &inbox.group)
        .unwrap_or_else(|e| panic!("{e}"));
    for i in 1..=10 {
        post(
            &*a.queue,
            &comment("eng", 7, "ann", &format!("comment number {i} on seven")),
        )
        .await;
    }
    a.queue
        .resume(&inbox.topic, &inbox.group)
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("the merge", WAIT, || async {
        (!events_of(&stores, EventType::NotificationsCoalesced)
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    // The merged task waits for the slot the slow turn holds: stop now.
    first.shutdown().await;
    a.queue.shutdown().await;
    let eng_started = |events: Vec<Event>| {
        events
            .into_iter()
            .filter(|e| e.agent_handle() == Some("eng"))
            .count()
    };
    assert_eq!(
        eng_started(events_of(&stores, EventType::TaskStarted).await),
        0,
        "the merged turn had not started"
    );

    let b = Backends::new(connect().await, stores.clone());
    let second = EngineBuilder::new(c, &b)
        .options(options())
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("the merged turn on the next engine", WAIT, || async {
        let done = events_of(&stores, EventType::TaskCompleted).await;
        (done
            .iter()
            .filter(|e| e.agent_handle() == Some("eng"))
            .count()
            >= 1)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The part failed together and comes back together: one merged turn.
    assert_eq!(
        eng_started(events_of(&stores, EventType::TaskStarted).await),
        1,
        "one merged turn, run once"
    );
    let seven = prompts_with(&llm, "comment number 1 on seven");
    assert!(!seven.is_empty());
    assert!(
        seven
            .iter()
            .any(|p| (1..=10).all(|i| p.contains(&format!("comment number {i} on seven")))),
        "a comment was lost"
    );
    second.shutdown().await;
    b.queue.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_engine_stopping_mid_merge_loses_nothing_and_runs_nothing_twice() {
    let broker = MemoryBroker::new();
    let queue = stopping_mid_merge(
        || async { Arc::new(broker.client()) as Arc<dyn EventQueue> },
        0.0,
    )
    .await;
    let inbox = topics::agent_inbox("eng");
    assert_eq!(
        broker.backlog(&inbox.topic, &inbox.group).unwrap_or(0),
        0,
        "nothing left in the inbox"
    );
    queue.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_engine_stopping_mid_merge_loses_nothing_and_runs_nothing_twice_on_pulsar() {
    let url = crewlet_test_support::require!(pulsar);
    let ns = Namespace::create(url, "e2e-midmerge").await;
    let queue = stopping_mid_merge(|| ns.connect("midmerge"), 2.0).await;
    queue.shutdown().await;
    ns.drop_it().await;
}
