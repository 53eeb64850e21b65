//! The Slack working status against the fake Slack Web API: while a
//! Slack-triggered turn runs the seat's bot shows a phrase in the thread
//! (`assistant.threads.setStatus`) and clears it when the turn ends;
//! `off` shows nothing; `addressed` (the default) skips a plain channel
//! message but shows for a mention and a direct message.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{direct_turn, events_of, wait_for};
use crewlet_config::Company;
use crewlet_core::payload::{TaskRequest, TaskSeat};
use crewlet_core::{AgentId, Event, EventType, TraceContext};
use crewlet_engine::{Backends, Engine, EngineBuilder, EngineOptions};
use crewlet_queue::{EventQueue, MemoryBroker, topics};
use crewlet_store::Stores;
use crewlet_test_support::fake_llm::FakeLlmServer;
use crewlet_test_support::slack::{FakeSlack, StatusCall};

const WAIT: Duration = Duration::from_secs(60);
const COMPANY: &str = "Slack Status Co";
const TOKEN: &str = "xoxb-eng-bot";

struct World {
    slack: FakeSlack,
    _llm: FakeLlmServer,
    queue: Arc<dyn EventQueue>,
    stores: Stores,
    engine: Engine,
}

/// An engine whose `eng` seat has a Slack bot, `typing_status` as given
/// (`None`: the key left out).
async fn world(typing_status: Option<&str>) -> World {
    let slack = FakeSlack::start().await;
    slack.add_bot(TOKEN, "UENG");
    // Each model call takes a moment, so the turn is seen running.
    let llm = FakeLlmServer::start(direct_turn(Duration::from_millis(300)))
        .await
        .unwrap_or_else(|e| panic!("fake llm: {e}"));
    let mode = typing_status
        .map(|m| format!("    typing_status: {m}\n"))
        .unwrap_or_default();
    let yaml = format!(
        "name: {COMPANY}
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: \"{llm}\"}}
integrations:
  slack:
    api_url: \"{api}\"
{mode}roles:
  - name: Engineer
    handle: eng
    integrations:
      slack:
        signing_secret: not-used-here
        bot_token: {TOKEN}
        bot_user_id: UENG
",
        llm = llm.openai_base_url(),
        api = slack.api_url(),
    );
    let company = Company::from_yaml("slack-status", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let queue: Arc<dyn EventQueue> = Arc::new(MemoryBroker::new().client());
    let stores = Stores::memory();
    let engine = EngineBuilder::new(company, &Backends::new(queue.clone(), stores.clone()))
        .options(EngineOptions {
            drain_timeout: Duration::from_secs(30),
            stream_progress: false,
            ..EngineOptions::default()
        })
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    World {
        slack,
        _llm: llm,
        queue,
        stores,
        engine,
    }
}

/// A Slack message for `eng`, as the router posts it (the seat's app's
/// webhook: rule `url_handle`).
fn message(channel: &str, thread: &str, text: &str, direct: bool) -> Event {
    let mut r = TaskRequest::new("eng", "slack", text);
    r.channel = Some(channel.into());
    r.thread = Some(thread.into());
    r.sender = Some("U42".into());
    r.reason = Some("url_handle".into());
    r.direct = direct;
    let seat = TaskSeat {
        agent_id: AgentId::for_seat(COMPANY, "eng"),
        name: "Engineer",
        handle: "eng",
    };
    r.to_event(
        seat,
        &uuid::Uuid::now_v7().to_string(),
        "slack",
        TraceContext::new_root(),
    )
}

impl World {
    async fn say(&self, e: &Event) {
        self.queue
            .publish(&topics::agent_inbox("eng").topic, e)
            .await
            .unwrap_or_else(|err| panic!("{err}"));
    }

    async fn wait_turns(&self, n: usize) {
        wait_for("the turns to complete", WAIT, || async {
            (events_of(&self.stores, EventType::TaskCompleted)
                .await
                .len()
                >= n)
                .then_some(())
        })
        .await;
    }

    fn in_thread(&self, channel: &str, thread: &str) -> Vec<StatusCall> {
        self.slack
            .statuses()
            .into_iter()
            .filter(|s| s.channel == channel && s.thread_ts == thread)
            .collect()
    }

    /// Waits until the thread's status was shown and then cleared.
    async fn shown_then_cleared(&self, channel: &str, thread: &str) -> Vec<StatusCall> {
        self.slack
            .wait_for("the status to be cleared", WAIT, |s| {
                let calls: Vec<_> = s
                    .statuses()
                    .into_iter()
                    .filter(|c| c.channel == channel && c.thread_ts == thread)
                    .collect();
                calls.last().is_some_and(|c| c.status.is_empty())
            })
            .await;
        self.in_thread(channel, thread)
    }

    async fn stop(self) {
        self.engine.shutdown().await;
        self.queue.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_turn_shows_a_phrase_in_its_thread_and_clears_it_at_the_end() {
    let w = world(Some("always")).await;
    w.say(&message(
        "C1",
        "1700000000.000100",
        "how is the build?",
        false,
    ))
    .await;
    // The status is up while the turn is still running.
    w.slack
        .wait_for("a working status", WAIT, |s| {
            s.statuses().iter().any(|c| !c.status.is_empty())
        })
        .await;
    let calls = w.shown_then_cleared("C1", "1700000000.000100").await;
    let first = &calls[0];
    assert_eq!(first.token, TOKEN, "posted as the seat's own bot");
    assert!(first.status.starts_with("is "), "{calls:?}");
    assert!(
        calls[..calls.len() - 1]
            .iter()
            .all(|c| !c.status.is_empty())
    );
    w.wait_turns(1).await;
    assert!(w.slack.statuses().iter().all(|c| c.channel == "C1"));
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_shows_nothing() {
    let w = world(Some("off")).await;
    w.say(&message("D1", "1700000000.000200", "hello there", true))
        .await;
    w.wait_turns(1).await;
    assert!(w.slack.statuses().is_empty(), "{:?}", w.slack.statuses());
    assert_eq!(w.slack.calls("auth.test"), 0);
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn addressed_skips_a_plain_channel_message_but_shows_for_a_mention_and_a_dm() {
    let w = world(None).await;
    w.say(&message(
        "C1",
        "1700000000.000300",
        "the deploy went out",
        false,
    ))
    .await;
    w.say(&message(
        "C1",
        "1700000000.000400",
        "<@UENG> can you look?",
        false,
    ))
    .await;
    w.say(&message(
        "D1",
        "1700000000.000500",
        "a quick question",
        true,
    ))
    .await;
    // One turn at a time: by the time the last is cleared, the first
    // turn's status (had there been one) was long sent.
    let mention = w.shown_then_cleared("C1", "1700000000.000400").await;
    assert!(!mention[0].status.is_empty());
    let dm = w.shown_then_cleared("D1", "1700000000.000500").await;
    assert!(!dm[0].status.is_empty());
    w.wait_turns(3).await;
    assert!(
        w.in_thread("C1", "1700000000.000300").is_empty(),
        "{:?}",
        w.slack.statuses()
    );
    w.stop().await;
}
