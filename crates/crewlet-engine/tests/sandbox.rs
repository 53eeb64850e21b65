//! `run_sandbox` end to end on the memory broker with a real local sandbox
//! (bubblewrap + cgroups): the engineer's turn starts a fake coding agent
//! in a box and parks; the agent edits a checkout of a local git remote,
//! pushes a work-in-progress branch and asks one question (`crewlet-ask
//! --to manager`); the turn goes on, asks its manager in chat (`a2a_ask`),
//! runs the agent again in the same box with the answer; the agent pushes
//! the branch and reports; the turn opens the merge request through the
//! fake tracker and completes. The box is gone afterwards.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::sandbox::*;
use common::*;
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_engine::{Backends, EngineBuilder, EngineOptions};
use crewlet_queue::{EventQueue, MemoryBroker};
use crewlet_store::Stores;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

fn company(llm: &str, root: &Path, mcp_log: &Path) -> Company {
    let yaml = format!(
        r#"name: Code Co
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{llm}"}}
{sandbox}turn_engine:
  max_concurrent_turns: 4
{tracker}roles:
  - {{name: CTO, handle: cto, manages: [eng]}}
  - name: Engineer
    handle: eng
    mcp_env:
      tracker: {{FAKE_MCP_IDENTITY: eng-bot}}
    sandbox:
      enabled: true
      mcp: {{servers: [tracker]}}
"#,
        sandbox = sandbox_provider_yaml(root),
        tracker = tracker_yaml(mcp_log),
    );
    Company::from_yaml("code", &yaml).unwrap_or_else(|e| panic!("{e}"))
}

const ENGINEER: &str = "# Your seat: Engineer";
const MR_TOOL: &str = "tracker__create_merge_request";

fn script() -> Script {
    let plan = json!({"decision": "plan", "reasoning": "code work", "steps": [{"intent": "have it coded", "tools": ["run_sandbox"]}],
                      "tools_needed": ["run_sandbox", "a2a_ask", MR_TOOL], "success_criteria": ["merge request open"]});
    Script::new()
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call("submit_review", json!({"decision": "done", "notes": "ok", "completed_work": "mr", "final_artifact": "Merge request opened."})),
        )
        .on(When::tool_offered("submit_plan").and_system_contains(ENGINEER), Reply::tool_call("submit_plan", plan))
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call("submit_plan", json!({"decision": "direct", "reasoning": "know it", "steps": [{"intent": "answer"}]})),
        )
        .on(When::tool_result_contains("opened merge request").and_system_contains(ENGINEER), Reply::text("Opened the merge request."))
        .on(
            When::tool_result_contains("Set the greeting to").and_system_contains(ENGINEER),
            Reply::tool_call(MR_TOOL, json!({"project": "app", "source_branch": "feature/greeting", "title": "Greeting"})),
        )
        .on(
            When::tool_result_contains("@cto answered").and_system_contains(ENGINEER),
            Reply::tool_call("run_sandbox", json!({"brief": format!("In /srv/remote.git, finish the greeting on feature/greeting. ANSWER: {ANSWER}")})),
        )
        .on(
            When::tool_result_contains("Question for manager").and_system_contains(ENGINEER),
            Reply::tool_call("a2a_ask", json!({"handle": "cto", "question": "Which greeting should the app show?", "wait_seconds": 60})),
        )
        .on(
            When::tool_offered("run_sandbox").and_after_tool_result(false).and_system_contains(ENGINEER),
            Reply::tool_call("run_sandbox", json!({"brief": "In /srv/remote.git, add greeting.txt on branch feature/greeting."})),
        )
        .on(When::any(), Reply::text(format!("Use {ANSWER}.")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coding_agent_asks_gets_its_answer_pushes_and_the_merge_request_opens() {
    if !sandbox_available().await {
        return;
    }
    let root = std::env::temp_dir().join(format!(
        "crewlet-sandbox-e2e-{}",
        uuid::Uuid::now_v7().simple()
    ));
    let (remote, _) = fixtures(&root, "manager");
    let mcp = root.join("tracker.jsonl");
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let queue: Arc<dyn EventQueue> = Arc::new(MemoryBroker::new().client());
    let stores = Stores::memory();
    let backends = Backends::new(queue.clone(), stores.clone());
    let engine = EngineBuilder::new(company(&llm.openai_base_url(), &root, &mcp), &backends)
        .options(EngineOptions {
            stream_progress: false,
            env: path_only(),
            ..EngineOptions::default()
        })
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    engine
        .assign(
            "eng",
            "api",
            "Add a greeting to the app and open a merge request.",
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("the engineer's task to complete", WAIT, || {
        completed_by(&stores, "eng")
    })
    .await;
    engine.shutdown().await;

    // Two runs in one box: the first asked, the second finished.
    let started = events_of(&stores, EventType::SandboxRunStarted).await;
    assert_eq!(started.len(), 2, "{started:?}");
    assert_eq!(
        started[0].payload["sandbox_id"], started[1].payload["sandbox_id"],
        "the box was not reused"
    );
    let mut completed = events_of(&stores, EventType::SandboxRunCompleted).await;
    completed.reverse();
    assert_eq!(completed.len(), 2, "{completed:?}");
    assert_eq!(completed[0].payload["asked"], true);
    assert_eq!(completed[1].payload["asked"], false);
    assert_eq!(completed[1].payload["exit_code"], 0);
    // What the agent reported spending is charged to the seat (the fake
    // model reports no usage of its own).
    assert_eq!(completed[1].payload["usage"]["input_tokens"], 120);
    let usage = stores.ledger.usage().await.unwrap_or_default();
    let eng = usage.iter().find(|u| u.agent_handle == "eng");
    assert_eq!(eng.map(|u| u.tokens_used), Some(150), "{usage:?}");
    // The seat's tracker server was rendered into the box for the agent,
    // with the seat's own credentials.
    let findings = completed[1].payload["findings"]
        .as_str()
        .unwrap_or_default();
    assert!(
        findings.contains(r#"MCP: {"mcpServers":{"tracker":{"#)
            && findings.contains("FAKE_MCP_IDENTITY"),
        "{findings}"
    );
    // The question reached the manager, one delegation deeper.
    let asked = events_of(&stores, EventType::ContributionRequested).await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].payload["target"], "cto");
    // The branch on the remote carries the answer.
    let greeting = git(
        &root,
        &[
            "--git-dir",
            remote.to_str().unwrap_or_default(),
            "show",
            "feature/greeting:greeting.txt",
        ],
    );
    assert_eq!(greeting, format!("greeting = \"{ANSWER}\"\n"));
    let author = git(
        &root,
        &[
            "--git-dir",
            remote.to_str().unwrap_or_default(),
            "log",
            "-1",
            "--format=%an",
            "feature/greeting",
        ],
    );
    assert_eq!(author.trim(), "eng", "commits are the seat's own");
    // The merge request was opened through the tracker, as the seat.
    let mrs: Vec<_> = mcp_log(&mcp)
        .into_iter()
        .filter(|l| l["tool"] == "create_merge_request")
        .collect();
    assert_eq!(mrs.len(), 1, "{mrs:?}");
    assert_eq!(mrs[0]["source_branch"], "feature/greeting");
    assert_eq!(mrs[0]["identity"], "eng-bot");
    // The turn's box is gone.
    let left: Vec<_> = std::fs::read_dir(root.join("boxes"))
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "boxes left: {left:?}");
    let _ = std::fs::remove_dir_all(&root);
}

/// A coding agent that logs each start and waits for the test's go.
const WAITING_AGENT: &str = r#"#!/bin/sh
echo started >> /gate/runs.log
while [ ! -f /gate/go ]; do sleep 0.05; done
echo "finished after the restart" > /home/user/.crewlet/findings.md
"#;

fn restart_company(llm: &str, root: &Path, gate: &Path) -> Company {
    let yaml = format!(
        r#"name: Restart Co
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{llm}"}}
  sandbox:
    type: local
    default_coding_agent: command
    command: ["/gate/agent"]
    poll_seconds: 0.05
    local:
      containment: bubblewrap
      state_dir: "{boxes}"
      network: none
      mounts: ["{gate}:/gate:rw"]
roles:
  - name: Engineer
    handle: eng
    sandbox: {{enabled: true}}
"#,
        boxes = root.join("boxes").display(),
        gate = gate.display(),
    );
    Company::from_yaml("restart", &yaml).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_engine_picks_up_the_running_coding_agent_instead_of_starting_another() {
    if !sandbox_available().await {
        return;
    }
    let root = std::env::temp_dir().join(format!(
        "crewlet-sandbox-restart-{}",
        uuid::Uuid::now_v7().simple()
    ));
    let gate = root.join("gate");
    std::fs::create_dir_all(&gate).unwrap_or_else(|e| panic!("{e}"));
    executable(&gate.join("agent"), WAITING_AGENT);
    let plan = json!({"decision": "plan", "reasoning": "code", "steps": [{"intent": "code", "tools": ["run_sandbox"]}],
                      "tools_needed": ["run_sandbox"], "success_criteria": ["done"]});
    let script = Script::new()
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call("submit_review", json!({"decision": "done", "notes": "ok", "completed_work": "x", "final_artifact": "Reported."})),
        )
        .on(When::tool_offered("submit_plan"), Reply::tool_call("submit_plan", plan))
        .on(When::tool_result_contains("finished after the restart"), Reply::text("Reported."))
        .on(
            When::tool_offered("run_sandbox").and_after_tool_result(false),
            Reply::tool_call("run_sandbox", json!({"brief": "Do the long job."})),
        )
        .on(When::any(), Reply::text("?"));
    let llm = FakeLlmServer::start(script)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let company = restart_company(&llm.openai_base_url(), &root, &gate);
    let backends = Backends::memory();
    let options = || EngineOptions {
        start_mcp: false,
        maintenance_interval: None,
        stream_progress: false,
        env: path_only(),
        ..EngineOptions::default()
    };
    let org = company.organization();
    let seat = org.seat("eng").unwrap_or_else(|| panic!("no seat"));
    let trigger = crewlet_core::payload::TaskRequest::new("eng", "test", "do the long job")
        .to_event(
            crewlet_core::payload::TaskSeat {
                agent_id: seat.agent_id,
                name: &seat.name,
                handle: &seat.handle,
            },
            "task-sandbox-restart",
            "test",
            crewlet_core::TraceContext::new_root(),
        );
    let inbox = crewlet_queue::topics::agent_inbox("eng");

    // The first engine starts the coding agent and stops while it works.
    let first = EngineBuilder::new(company.clone(), &backends)
        .options(options())
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = backends.queue.publish(&inbox.topic, &trigger).await;
    wait_for("the coding agent to start", WAIT, || async {
        std::fs::read_to_string(gate.join("runs.log"))
            .ok()
            .filter(|l| !l.is_empty())
            .map(|_| ())
    })
    .await;
    wait_for("the run to be recorded", WAIT, || async {
        (!events_of(&backends.stores, EventType::SandboxRunStarted)
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    first.shutdown().await;
    assert!(
        events_of(&backends.stores, EventType::TaskCompleted)
            .await
            .is_empty(),
        "finished before the restart"
    );

    // A new engine gets the trigger again (the broker's redelivery), walks
    // the journal to the same call, and waits for the same run.
    let second = EngineBuilder::new(company, &backends)
        .options(options())
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _ = backends.queue.publish(&inbox.topic, &trigger).await;
    std::fs::write(gate.join("go"), "").unwrap_or_else(|e| panic!("{e}"));
    wait_for("the task to complete after the restart", WAIT, || async {
        (!events_of(&backends.stores, EventType::TaskCompleted)
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    second.shutdown().await;

    let runs = std::fs::read_to_string(gate.join("runs.log")).unwrap_or_default();
    assert_eq!(
        runs.lines().count(),
        1,
        "the coding agent was started again: {runs:?}"
    );
    assert_eq!(
        events_of(&backends.stores, EventType::SandboxRunStarted)
            .await
            .len(),
        1
    );
    let completed = events_of(&backends.stores, EventType::SandboxRunCompleted).await;
    assert_eq!(completed.len(), 1, "{completed:?}");
    assert!(
        completed[0].payload["findings"]
            .as_str()
            .unwrap_or_default()
            .contains("finished after the restart")
    );
    assert_eq!(
        events_of(&backends.stores, EventType::TaskCompleted)
            .await
            .len(),
        1
    );
    let resumed = events_of(&backends.stores, EventType::TurnResumed).await;
    assert!(
        !resumed.is_empty(),
        "the second engine did not resume the turn from its journal"
    );
    let _ = std::fs::remove_dir_all(&root);
}
