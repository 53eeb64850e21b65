//! A coding agent's question answered by a person in chat, end to end: a
//! mention on Mattermost (the fake server, over its websocket) gives the
//! engineer a code task; its turn starts a fake coding agent in a real
//! local box; the agent pushes a work-in-progress branch and asks the
//! requester (`crewlet-ask --to requester`). The question is posted in the
//! thread by the seat's own bot, the run parks with its box paused and the
//! seat goes free (it answers another task meanwhile). The person's reply
//! in the thread resumes the same turn, which runs the agent again in the
//! same box with the answer; the agent pushes the branch, and the turn
//! opens the merge request through the fake tracker.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::sandbox::*;
use common::*;
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_engine::{Backends, EngineBuilder, EngineOptions};
use crewlet_integrations::mattermost::SocketOptions;
use crewlet_queue::{EventQueue, MemoryBroker};
use crewlet_store::{SandboxRunStatus, Stores};
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use crewlet_test_support::mattermost::{ChannelType, FakeMattermost};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);
const QUESTION: &str = "Which greeting should the app show?";
const MR_TOOL: &str = "tracker__create_merge_request";
const ENGINEER: &str = "# Your seat: Engineer";

fn company(llm: &str, mm: &FakeMattermost, token: &str, root: &Path, ttl: f64) -> Company {
    let yaml = format!(
        r#"name: Chat Code Co
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{llm}"}}
{sandbox}integrations:
  mattermost:
    enabled: true
    url: "{url}"
    team: acme
turn_engine:
  max_concurrent_turns: 2
{tracker}roles:
  - name: Founder
    kind: human
    manages: [eng]
    contact: {{mattermost_user_id: jane}}
  - name: Engineer
    handle: eng
    mcp_env:
      tracker: {{FAKE_MCP_IDENTITY: eng-bot}}
    integrations:
      mattermost:
        bot_token: "{token}"
        username: agent-eng
    sandbox:
      enabled: true
      pause_ttl_seconds: {ttl}
"#,
        sandbox = sandbox_provider_yaml(root),
        tracker = tracker_yaml(&root.join("tracker.jsonl")),
        url = mm.url(),
    );
    Company::from_yaml("chat-code", &yaml).unwrap_or_else(|e| panic!("{e}"))
}

fn script() -> Script {
    let plan = json!({"decision": "plan", "reasoning": "code work", "steps": [{"intent": "have it coded", "tools": ["run_sandbox"]}],
                      "tools_needed": ["run_sandbox", MR_TOOL], "success_criteria": ["merge request open"]});
    Script::new()
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call("submit_review", json!({"decision": "done", "notes": "ok", "completed_work": "done", "final_artifact": "Done."})),
        )
        // The side task the seat takes while its run waits for the answer.
        .on(
            When::tool_offered("submit_plan").and_system_contains("2+2"),
            Reply::tool_call("submit_plan", json!({"decision": "direct", "reasoning": "know it", "steps": [{"intent": "answer"}]})),
        )
        .on(When::system_contains("2+2"), Reply::text("4."))
        .on(When::tool_offered("submit_plan").and_system_contains(ENGINEER), Reply::tool_call("submit_plan", plan))
        .on(When::tool_result_contains("opened merge request").and_system_contains(ENGINEER), Reply::text("Opened the merge request."))
        .on(
            When::tool_result_contains("Set the greeting to").and_system_contains(ENGINEER),
            Reply::tool_call(MR_TOOL, json!({"project": "app", "source_branch": "feature/greeting", "title": "Greeting"})),
        )
        // The question could not be posted: the turn goes on without it.
        .on(
            When::tool_result_contains("Question for requester").and_system_contains(ENGINEER),
            Reply::text("The coding agent needs to know which greeting to show; I asked for it."),
        )
        .on(
            When::tool_result_contains("The answer came in the conversation").and_system_contains(ENGINEER),
            Reply::tool_call("run_sandbox", json!({"brief": format!("In /srv/remote.git, finish the greeting on feature/greeting. ANSWER: {ANSWER}")})),
        )
        .on(
            When::tool_offered("run_sandbox").and_after_tool_result(false).and_system_contains(ENGINEER),
            Reply::tool_call("run_sandbox", json!({"brief": "In /srv/remote.git, add greeting.txt on branch feature/greeting."})),
        )
        .on(When::any(), Reply::text("?"))
}

/// What one run of the scenario leaves for the assertions.
struct Scenario {
    root: std::path::PathBuf,
    stores: Stores,
    mm: FakeMattermost,
    bot: String,
    thread: String,
}

/// A Mattermost team with Jane and the engineer's bot in one channel, the
/// fake model, the git remote and the fake agent, and the company.
struct World {
    root: std::path::PathBuf,
    mm: FakeMattermost,
    channel: String,
    jane: String,
    bot: String,
    _llm: FakeLlmServer,
    stores: Stores,
    backends: Backends,
    company: Company,
}

impl World {
    async fn new(ttl: f64) -> Self {
        let root = std::env::temp_dir().join(format!(
            "crewlet-sandbox-chat-{}",
            uuid::Uuid::now_v7().simple()
        ));
        fixtures(&root, "requester");
        let mm = FakeMattermost::start().await;
        let team = mm.add_team("acme");
        let channel = mm.add_channel(&team, "engineering", ChannelType::Open);
        let jane = mm.add_user("jane");
        let bot = mm.add_bot("agent-eng", "Agent Eng");
        mm.join(&channel, &jane.id);
        mm.join(&channel, &bot.id);
        let llm = FakeLlmServer::start(script())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let queue: Arc<dyn EventQueue> = Arc::new(MemoryBroker::new().client());
        let stores = Stores::memory();
        let backends = Backends::new(queue, stores.clone());
        let company = company(&llm.openai_base_url(), &mm, &bot.token, &root, ttl);
        Self {
            root,
            mm,
            channel,
            jane: jane.id,
            bot: bot.id,
            _llm: llm,
            stores,
            backends,
            company,
        }
    }

    /// An engine on the world's queue and stores, its seat's socket live.
    async fn start(&self) -> crewlet_engine::Engine {
        let engine = EngineBuilder::new(self.company.clone(), &self.backends)
            .options(EngineOptions {
                stream_progress: false,
                maintenance_interval: None,
                mattermost: SocketOptions {
                    backoff: vec![Duration::from_millis(100), Duration::from_millis(200)],
                    ..SocketOptions::default()
                },
                env: path_only(),
                ..EngineOptions::default()
            })
            .start()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        wait_for("the seat's socket to be live", WAIT, || async {
            let sockets = engine.mattermost_sockets().await;
            sockets.get("eng").filter(|s| s.is_live()).map(|_| ())
        })
        .await;
        engine
    }

    /// Jane's mention of the engineer: the code task.
    fn mention(&self) -> String {
        self.mm
            .post_as(
                &self.jane,
                &self.channel,
                "@agent-eng add a greeting to the app and open a merge request",
                None,
            )
            .id
    }
}

/// Runs the scenario up to the question being posted, then (after
/// `while_parked`, and on a new engine if `restart`) answers it and waits
/// for the task to complete.
async fn run<F, Fut>(ttl: f64, restart: bool, while_parked: F) -> Scenario
where
    F: FnOnce(crewlet_engine::Engine, Stores) -> Fut,
    Fut: std::future::Future<Output = crewlet_engine::Engine>,
{
    let w = World::new(ttl).await;
    let (stores, mm, channel) = (w.stores.clone(), &w.mm, &w.channel);
    let engine = w.start().await;
    let ask = w.mention();
    let question = wait_for("the question in the thread", WAIT, || async {
        mm.posts_by(&w.bot)
            .into_iter()
            .find(|p| p.root_id == ask && p.message.contains(QUESTION))
    })
    .await;
    assert_eq!(&question.channel_id, channel);
    // Published last, once the box is paused or removed.
    wait_for("the run to park", WAIT, || async {
        let parked = events_of(&stores, EventType::SandboxClarificationRequested).await;
        (!parked.is_empty()).then_some(())
    })
    .await;
    let mut engine = while_parked(engine, stores.clone()).await;
    if restart {
        engine.shutdown().await;
        engine = w.start().await;
    }

    mm.post_as(&w.jane, channel, &format!("Use {ANSWER}."), Some(&ask));
    let code_task = events_of(&stores, EventType::SandboxClarificationRequested)
        .await
        .first()
        .and_then(|e| e.task_id.clone());
    assert!(code_task.is_some(), "no question was recorded");
    wait_for("the code task to complete", WAIT, || async {
        events_of(&stores, EventType::TaskCompleted)
            .await
            .iter()
            .any(|e| e.task_id == code_task)
            .then_some(())
    })
    .await;
    engine.shutdown().await;
    Scenario {
        root: w.root,
        stores,
        mm: w.mm,
        bot: w.bot,
        thread: ask,
    }
}

/// The branch, the merge request and the boxes after a scenario.
fn assert_shipped(s: &Scenario) {
    let remote = s.root.join("remote.git");
    let greeting = git(
        &s.root,
        &[
            "--git-dir",
            remote.to_str().unwrap_or_default(),
            "show",
            "feature/greeting:greeting.txt",
        ],
    );
    assert_eq!(greeting, format!("greeting = \"{ANSWER}\"\n"));
    let mrs: Vec<_> = mcp_log(&s.root.join("tracker.jsonl"))
        .into_iter()
        .filter(|l| l["tool"] == "create_merge_request")
        .collect();
    assert_eq!(mrs.len(), 1, "{mrs:?}");
    assert_eq!(mrs[0]["source_branch"], "feature/greeting");
    assert_eq!(mrs[0]["identity"], "eng-bot");
    let left: Vec<_> = std::fs::read_dir(s.root.join("boxes"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "boxes left: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answers_the_coding_agent_in_the_thread_and_the_parked_turn_ships_the_branch() {
    if !sandbox_available().await {
        return;
    }
    let s = run(1800.0, false, |engine, stores| async move {
        // Parked: the seat goes free and takes another task meanwhile.
        wait_for("the seat to go free", WAIT, || async {
            (engine.agent_state("eng") == Some(crewlet_engine::SeatState::Idle)).then_some(())
        })
        .await;
        engine
            .assign("eng", "api", "What is 2+2?")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        wait_for("the side task to complete", WAIT, || {
            completed_by(&stores, "eng")
        })
        .await;
        engine
    })
    .await;

    // One turn: two runs in one box; the first asked and parked.
    let started = events_of(&s.stores, EventType::SandboxRunStarted).await;
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(
        started[0].payload["sandbox_id"], started[1].payload["sandbox_id"],
        "the paused box was not reused"
    );
    assert_eq!(started[0].payload["turn_id"], started[1].payload["turn_id"]);
    let asked = events_of(&s.stores, EventType::SandboxClarificationRequested).await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].payload["question"], QUESTION);
    assert_eq!(asked[0].payload["audience"], "requester");
    assert_eq!(asked[0].payload["box_kept"], true);
    let completed = events_of(&s.stores, EventType::SandboxRunCompleted).await;
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert_eq!(completed[0].payload["exit_code"], 0);
    // The answer on the row is the person's reply.
    let runs = s
        .stores
        .sandbox_runs
        .with_status(
            Some("eng"),
            &[SandboxRunStatus::Completed, SandboxRunStatus::Failed],
        )
        .await
        .unwrap_or_default();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let answered: Vec<_> = runs.iter().filter(|r| r.answer.is_some()).collect();
    assert_eq!(answered.len(), 1);
    assert!(
        answered[0]
            .answer
            .as_deref()
            .unwrap_or_default()
            .contains(&format!("Use {ANSWER}.")),
        "{:?}",
        answered[0].answer
    );
    // The bot asked once, in the thread.
    let bot_posts: Vec<_> =
        s.mm.posts_by(&s.bot)
            .into_iter()
            .filter(|p| p.message.contains(QUESTION))
            .collect();
    assert_eq!(bot_posts.len(), 1);
    assert_eq!(bot_posts[0].root_id, s.thread);
    // The code task and the side task: two completed tasks.
    let done = events_of(&s.stores, EventType::TaskCompleted).await;
    assert_eq!(
        done.iter()
            .filter(|e| e.agent_handle() == Some("eng"))
            .count(),
        2,
        "{done:?}"
    );
    assert_shipped(&s);
    let _ = std::fs::remove_dir_all(&s.root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_pause_ttl_the_box_goes_at_once_and_the_answer_gets_a_fresh_one() {
    if !sandbox_available().await {
        return;
    }
    let s = run(0.0, false, |engine, stores| async move {
        let parked = stores
            .sandbox_runs
            .with_status(Some("eng"), &[SandboxRunStatus::AwaitingAnswer])
            .await
            .unwrap_or_default();
        assert_eq!(parked.len(), 1);
        assert!(parked[0].box_id.is_empty(), "the box was kept: {parked:?}");
        engine
    })
    .await;
    let started = events_of(&s.stores, EventType::SandboxRunStarted).await;
    assert_eq!(started.len(), 2, "{started:?}");
    assert_ne!(
        started[0].payload["sandbox_id"], started[1].payload["sandbox_id"],
        "the removed box came back"
    );
    let asked = events_of(&s.stores, EventType::SandboxClarificationRequested).await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].payload["box_kept"], false);
    // The fresh box went on from the pushed work-in-progress branch.
    let remote = s.root.join("remote.git");
    let log = git(
        &s.root,
        &[
            "--git-dir",
            remote.to_str().unwrap_or_default(),
            "log",
            "--format=%s",
            "feature/greeting",
        ],
    );
    assert!(
        log.starts_with(&format!("greeting: {ANSWER}\nwip: greeting\n")),
        "{log}"
    );
    assert_shipped(&s);
    let _ = std::fs::remove_dir_all(&s.root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_box_past_its_pause_ttl_is_removed_and_the_answer_still_resumes_the_turn() {
    if !sandbox_available().await {
        return;
    }
    let s = run(0.2, false, |engine, stores| async move {
        wait_for("the pause TTL to remove the box", WAIT, || async {
            let parked = stores
                .sandbox_runs
                .with_status(Some("eng"), &[SandboxRunStatus::AwaitingAnswer])
                .await
                .unwrap_or_default();
            parked
                .first()
                .filter(|r| r.box_id.is_empty() && r.paused_at.is_none())
                .map(|_| ())
        })
        .await;
        engine
    })
    .await;
    let asked = events_of(&s.stores, EventType::SandboxClarificationRequested).await;
    assert_eq!(asked[0].payload["box_kept"], true, "kept until the TTL");
    let started = events_of(&s.stores, EventType::SandboxRunStarted).await;
    assert_eq!(started.len(), 2, "{started:?}");
    assert_ne!(
        started[0].payload["sandbox_id"],
        started[1].payload["sandbox_id"]
    );
    assert_shipped(&s);
    let _ = std::fs::remove_dir_all(&s.root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_started_while_a_run_is_parked_resumes_the_turn_on_the_answer() {
    if !sandbox_available().await {
        return;
    }
    let s = run(1800.0, true, |engine, _| async move { engine }).await;
    let started = events_of(&s.stores, EventType::SandboxRunStarted).await;
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(
        started[0].payload["sandbox_id"], started[1].payload["sandbox_id"],
        "the paused box was not reused after the restart"
    );
    assert_eq!(started[0].payload["turn_id"], started[1].payload["turn_id"]);
    assert!(
        !events_of(&s.stores, EventType::TurnResumed)
            .await
            .is_empty(),
        "the new engine did not resume the turn from its journal"
    );
    assert_shipped(&s);
    let _ = std::fs::remove_dir_all(&s.root);
}

/// An agent that asks once the test says go (a file in its own folder).
const GATED_ASKER: &str = r#"#!/bin/sh
while [ ! -f /opt/fake-agent/go ]; do sleep 0.05; done
crewlet-ask "Which greeting should the app show?" --to requester
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_that_cannot_be_posted_goes_back_to_the_turn_instead_of_parking() {
    if !sandbox_available().await {
        return;
    }
    let w = World::new(1800.0).await;
    let agent = w.root.join("agent");
    executable(&agent.join("fake-coding-agent"), GATED_ASKER);
    let engine = w.start().await;
    w.mention();
    wait_for("the coding agent to start", WAIT, || async {
        (!events_of(&w.stores, EventType::SandboxRunStarted)
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    // The bot can no longer post in the channel: the question has nowhere to go.
    w.mm.leave(&w.channel, &w.bot);
    std::fs::write(agent.join("go"), "").unwrap_or_else(|e| panic!("{e}"));
    wait_for("the code task to complete", WAIT, || {
        completed_by(&w.stores, "eng")
    })
    .await;
    engine.shutdown().await;

    assert!(
        events_of(&w.stores, EventType::SandboxClarificationRequested)
            .await
            .is_empty(),
        "parked without posting the question"
    );
    let completed = events_of(&w.stores, EventType::SandboxRunCompleted).await;
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert_eq!(completed[0].payload["asked"], true);
    assert!(
        w.mm.posts_by(&w.bot)
            .iter()
            .all(|p| !p.message.contains(QUESTION)),
        "the question was posted"
    );
    let open = w
        .stores
        .sandbox_runs
        .with_status(
            Some("eng"),
            &[SandboxRunStatus::AwaitingAnswer, SandboxRunStatus::Answered],
        )
        .await
        .unwrap_or_default();
    assert!(open.is_empty(), "a run waits: {open:?}");
    let _ = std::fs::remove_dir_all(&w.root);
}
