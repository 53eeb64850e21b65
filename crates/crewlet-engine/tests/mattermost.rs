//! Mattermost end to end, against the fake Mattermost server (API v4 and
//! the websocket): a human's mention reaches the seat over its websocket,
//! the turn runs while the bot shows "is typing", the seat replies in the
//! thread as its own bot and then follows the thread; its own posts never
//! wake it; after the socket drops, what was posted in the gap is read
//! once and nothing is answered twice.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_engine::{Backends, Engine, EngineBuilder, EngineOptions};
use crewlet_integrations::mattermost::SocketOptions;
use crewlet_queue::{EventQueue, MemoryBroker, topics};
use crewlet_store::Stores;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use crewlet_test_support::mattermost::{ChannelType, FakeMattermost, User};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

struct World {
    mm: FakeMattermost,
    channel: String,
    jane: User,
    bot: User,
}

async fn world() -> World {
    let mm = FakeMattermost::start().await;
    let team = mm.add_team("acme");
    let channel = mm.add_channel(&team, "engineering", ChannelType::Open);
    let jane = mm.add_user("jane");
    let bot = mm.add_bot("agent-swe", "Agent SWE");
    mm.join(&channel, &jane.id);
    mm.join(&channel, &bot.id);
    World {
        mm,
        channel,
        jane,
        bot,
    }
}

fn company(llm: &str, w: &World) -> Company {
    let yaml = format!(
        r#"name: MM Co
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{llm}"}}
integrations:
  mattermost:
    enabled: true
    url: "{url}"
    team: acme
    typing_status: always
roles:
  - name: Founder
    kind: human
    manages: [swe]
    contact: {{mattermost_user_id: jane}}
  - name: Agent SWE
    handle: swe
    integrations:
      mattermost:
        bot_token: "{token}"
        username: agent-swe
"#,
        url = w.mm.url(),
        token = w.bot.token,
    );
    Company::from_yaml("mm", &yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// Plan to reply, reply (rules pushed per post), say so, review done.
fn script() -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "plan", "reasoning": "answer in the thread",
                       "steps": [{"intent": "reply", "tools": ["mattermost_reply"]}],
                       "tools_needed": ["mattermost_reply"], "success_criteria": ["replied"]}),
            )
            .delay(Duration::from_millis(300)),
        )
        .on(
            When::tool_offered("mattermost_reply").and_after_tool_result(true),
            Reply::text("Replied in the thread."),
        )
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call(
                "submit_review",
                json!({"decision": "done", "notes": "ok", "completed_work": "replied",
                       "final_artifact": "reply posted"}),
            ),
        )
        .on(When::any(), Reply::text("done"))
}

fn options(fast: bool) -> EngineOptions {
    let mut o = EngineOptions {
        drain_timeout: Duration::from_secs(30),
        stream_progress: false,
        ..EngineOptions::default()
    };
    if fast {
        o.mattermost = SocketOptions {
            backoff: vec![Duration::from_millis(100), Duration::from_millis(200)],
            ..SocketOptions::default()
        };
    }
    o
}

async fn start(
    w: &World,
    llm: &FakeLlmServer,
    fast: bool,
) -> (Engine, Stores, Arc<dyn EventQueue>) {
    let queue: Arc<dyn EventQueue> = Arc::new(MemoryBroker::new().client());
    let stores = Stores::memory();
    let backends = Backends::new(queue.clone(), stores.clone());
    let engine = EngineBuilder::new(company(&llm.openai_base_url(), w), &backends)
        .options(options(fast))
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("the seat's socket to be live", WAIT, || async {
        let sockets = engine.mattermost_sockets().await;
        sockets.get("swe").filter(|s| s.is_live()).map(|_| ())
    })
    .await;
    (engine, stores, queue)
}

/// Posts as jane while the seat's inbox is held, and scripts the seat's
/// reply to that post before the turn can start.
async fn say(
    w: &World,
    llm: &FakeLlmServer,
    queue: &dyn EventQueue,
    text: &str,
    root: Option<&str>,
    answer: &str,
) -> String {
    let inbox = topics::agent_inbox("swe");
    queue
        .pause(&inbox.topic, &inbox.group)
        .unwrap_or_else(|e| panic!("{e}"));
    let post = w.mm.post_as(&w.jane.id, &w.channel, text, root);
    llm.push_front_rule(
        When::tool_offered("mattermost_reply")
            .and_after_tool_result(false)
            .and_system_contains(text),
        Reply::tool_call(
            "mattermost_reply",
            json!({"post_id": post.id, "message": answer}),
        ),
    );
    queue
        .resume(&inbox.topic, &inbox.group)
        .unwrap_or_else(|e| panic!("{e}"));
    post.id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_over_the_websocket_becomes_a_turn_that_replies_as_the_seats_bot() {
    let w = world().await;
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (engine, stores, queue) = start(&w, &llm, false).await;

    let root = say(
        &w,
        &llm,
        &*queue,
        "@agent-swe is the build green?",
        None,
        "Yes: main is green.",
    )
    .await;
    let reply = wait_for("the seat's reply in the thread", WAIT, || async {
        w.mm.posts_by(&w.bot.id)
            .into_iter()
            .find(|p| p.root_id == root)
    })
    .await;
    assert_eq!(reply.message, "Yes: main is green.");
    assert_eq!(reply.channel_id, w.channel);
    // The working status was raised by the seat's bot in that channel.
    assert!(
        w.mm.typing()
            .iter()
            .any(|t| t.user_id == w.bot.id && t.channel_id == w.channel),
        "no typing status: {:?}",
        w.mm.typing()
    );
    // The Plan phase read a Mattermost prompt naming the post to answer.
    let plan = llm
        .requests()
        .into_iter()
        .map(|r| r.body.to_string())
        .find(|b| b.contains("is the build green"))
        .unwrap_or_else(|| panic!("the model never saw the post"));
    assert!(
        plan.contains("@jane mentioned you in ~engineering"),
        "{plan}"
    );
    assert!(plan.contains(&root), "the prompt does not name the post id");

    // A reply without a mention in the thread the seat answered in wakes it
    // (it follows the thread); its own replies never do.
    let follow_up = say(
        &w,
        &llm,
        &*queue,
        "thanks, and the nightly job?",
        Some(&root),
        "Nightly passed too.",
    )
    .await;
    wait_for("the second reply", WAIT, || async {
        w.mm.posts_by(&w.bot.id)
            .into_iter()
            .find(|p| p.message == "Nightly passed too." && p.root_id == root)
    })
    .await;
    wait_for("two turns to complete", WAIT, || async {
        (events_of(&stores, EventType::TaskCompleted).await.len() >= 2).then_some(())
    })
    .await;
    let routed = events_of(&stores, EventType::ExternalNotification).await;
    let reasons: Vec<String> = routed
        .iter()
        .filter_map(|e| e.payload.get("task_id").and(e.tags.get("rule")).cloned())
        .collect();
    assert_eq!(
        routed.len(),
        2,
        "the seat's own replies woke it: {reasons:?}"
    );
    let created = events_of(&stores, EventType::TaskCreated).await;
    assert_eq!(created.len(), 2);
    let reasons: BTreeSet<String> = created
        .iter()
        .filter_map(|e| {
            e.payload
                .get("reason")
                .and_then(|r| r.as_str())
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["mention".to_owned(), "thread_follow".to_owned()])
    );
    assert!(!follow_up.is_empty());
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reconnect_the_gap_is_read_once_and_nothing_is_answered_twice() {
    let w = world().await;
    let llm = FakeLlmServer::start(direct_turn(Duration::ZERO))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (engine, stores, _queue) = start(&w, &llm, true).await;

    let first =
        w.mm.post_as(&w.jane.id, &w.channel, "@agent-swe first, live", None);
    wait_for("the live post to be routed", WAIT, || async {
        (events_of(&stores, EventType::ExternalNotification)
            .await
            .len()
            == 1)
            .then_some(())
    })
    .await;

    // The server drops every socket and refuses new ones for a while.
    w.mm.refuse_sockets(true);
    w.mm.drop_sockets();
    wait_for("the socket to notice", WAIT, || async {
        let sockets = engine.mattermost_sockets().await;
        sockets.get("swe").filter(|s| !s.is_live()).map(|_| ())
    })
    .await;
    let dm = w.mm.direct_channel(&w.jane.id, &w.bot.id);
    let gap_dm =
        w.mm.post_as(&w.jane.id, &dm, "while you were away: ping", None);
    let gap_mention = w.mm.post_as(
        &w.jane.id,
        &w.channel,
        "@agent-swe second, in the gap",
        None,
    );
    // Touches the first post (update-based `since`), which is not new.
    w.mm.react_as(&w.jane.id, &first.id, "thumbsup");
    let own = w.mm.post_as(&w.bot.id, &w.channel, "my own post", None);
    w.mm.refuse_sockets(false);

    wait_for("both gap posts to be routed", WAIT, || async {
        (events_of(&stores, EventType::ExternalNotification)
            .await
            .len()
            >= 3)
            .then_some(())
    })
    .await;
    wait_for("three turns", WAIT, || async {
        (events_of(&stores, EventType::TaskCompleted).await.len() >= 3).then_some(())
    })
    .await;
    let status = engine
        .mattermost_sockets()
        .await
        .get("swe")
        .cloned()
        .unwrap_or_else(|| panic!("no socket"));
    assert!(status.connects() >= 2, "never reconnected");
    assert_eq!(
        status.backfilled(),
        3,
        "the gap holds two posts to others and the seat's own"
    );
    let raw = events_of(&stores, EventType::RawWebhook).await;
    let keys: Vec<String> = raw
        .iter()
        .filter_map(|e| e.tags.get("delivery_key").cloned())
        .collect();
    let unique: BTreeSet<&String> = keys.iter().collect();
    assert_eq!(keys.len(), 3, "published: {keys:?}");
    assert_eq!(unique.len(), 3);
    for id in [&first.id, &gap_dm.id, &gap_mention.id] {
        assert!(
            keys.contains(&format!("swe:{id}")),
            "{id} missing from {keys:?}"
        );
    }
    assert!(!keys.contains(&format!("swe:{}", own.id)));
    assert!(
        w.mm.requests()
            .iter()
            .any(|(m, p)| m == "GET" && p.contains("/posts") && p.contains(&w.channel)),
        "no backfill read"
    );
    // Nothing more comes: a fourth turn would be a duplicate.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(events_of(&stores, EventType::TaskCreated).await.len(), 3);
    engine.shutdown().await;
}
