//! Colleague asks end to end on the memory broker: `a2a_ask` posts the
//! question to the colleague's inbox one delegation deeper, the asking turn
//! waits and reads the answer; a colleague who does not answer in time has
//! the question sent to their manager, whose answer reaches the asker.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_engine::{Backends, EngineBuilder, EngineOptions};
use crewlet_queue::{EventQueue, MemoryBroker};
use crewlet_store::Stores;
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn company(llm: &str) -> Company {
    let yaml = format!(
        r#"name: Ask Co
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{llm}"}}
roles:
  - {{name: CEO, handle: ceo, manages: [cto]}}
  - {{name: CTO, handle: cto, manages: [eng]}}
  - {{name: Engineer, handle: eng}}
"#
    );
    Company::from_yaml("ask", &yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// The CEO's turn (trigger `ASKER <target>`) asks `target`; a turn whose
/// trigger holds the question answers directly (slowly for `eng`).
fn script(target: &str, slow_eng: Duration) -> Script {
    let question = format!("Which database do we run? QID-{target}");
    Script::new()
        .on(
            When::tool_offered("submit_plan").and_system_contains("ASKER"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "plan", "reasoning": "ask", "steps": [{"intent": "ask", "tools": ["a2a_ask"]}],
                       "tools_needed": ["a2a_ask"], "success_criteria": ["answered"]}),
            ),
        )
        .on(
            When::tool_offered("a2a_ask")
                .and_after_tool_result(false)
                .and_system_contains("ASKER"),
            Reply::tool_call("a2a_ask", json!({"handle": target, "question": question, "wait_seconds": 30})),
        )
        .on(
            When::tool_offered("a2a_ask").and_after_tool_result(true).and_system_contains("ASKER"),
            Reply::text("Thanks, noted."),
        )
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call(
                "submit_review",
                json!({"decision": "done", "notes": "ok", "completed_work": "asked", "final_artifact": "asked"}),
            ),
        )
        .on(
            When::tool_offered("submit_plan").and_system_contains("# Your seat: Engineer"),
            Reply::tool_call("submit_plan", json!({"decision": "direct", "reasoning": "know it", "steps": [{"intent": "answer"}]}))
                .delay(slow_eng),
        )
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call("submit_plan", json!({"decision": "direct", "reasoning": "know it", "steps": [{"intent": "answer"}]})),
        )
        .on(When::any(), Reply::text("We run PostgreSQL 18."))
}

/// The tool results the CEO's turns were sent.
fn tool_results(llm: &FakeLlmServer) -> Vec<String> {
    llm.requests()
        .into_iter()
        .map(|r| r.body.to_string())
        .filter(|b| b.contains("ASKER") && b.contains(r#""role":"tool""#))
        .collect()
}

async fn run(
    target: &str,
    slow_eng: Duration,
    escalate_after: Duration,
) -> (FakeLlmServer, Stores) {
    let llm = FakeLlmServer::start(script(target, slow_eng))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let queue: Arc<dyn EventQueue> = Arc::new(MemoryBroker::new().client());
    let stores = Stores::memory();
    let backends = Backends::new(queue.clone(), stores.clone());
    let engine = EngineBuilder::new(company(&llm.openai_base_url()), &backends)
        .options(EngineOptions {
            stream_progress: false,
            ask_escalate_after: escalate_after,
            ..EngineOptions::default()
        })
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    engine
        .assign(
            "ceo",
            "api",
            &format!("ASKER {target}: find out which database we run"),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("the asker to read an answer", WAIT, || async {
        (!tool_results(&llm).is_empty()).then_some(())
    })
    .await;
    wait_for("the asker's turn to complete", WAIT, || async {
        events_of(&stores, EventType::TaskCompleted)
            .await
            .iter()
            .any(|e| e.agent_handle() == Some("ceo"))
            .then_some(())
    })
    .await;
    engine.shutdown().await;
    (llm, stores)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_asking_turn_waits_for_the_colleagues_answer() {
    let (llm, stores) = run("cto", Duration::ZERO, Duration::from_secs(600)).await;
    let results = tool_results(&llm);
    assert!(results[0].contains("@cto answered"), "{}", results[0]);
    assert!(results[0].contains("We run PostgreSQL 18."));

    let asked = events_of(&stores, EventType::ContributionRequested).await;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].payload["target"], "cto");
    assert_eq!(asked[0].payload["depth"], 1);
    let answered = events_of(&stores, EventType::ContributionReceived).await;
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0].payload["delivered"], "in_turn");
    // The colleague's task runs one delegation deeper, in the asker's trace.
    let tasks = events_of(&stores, EventType::TaskCreated).await;
    let cto = tasks
        .iter()
        .find(|e| e.agent_handle() == Some("cto"))
        .unwrap_or_else(|| panic!("no task for cto"));
    assert_eq!(cto.delegation_depth, 1);
    assert_eq!(cto.payload["ask"]["asker"], "ceo");
    assert_eq!(cto.payload["ask"]["chain"], json!(["ceo"]));
    let ceo = tasks
        .iter()
        .find(|e| e.agent_handle() == Some("ceo"))
        .unwrap_or_else(|| panic!("no task for ceo"));
    assert_eq!(cto.trace_id, ceo.trace_id);
    assert!(events_of(&stores, EventType::AskEscalated).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_question_goes_to_the_colleagues_manager() {
    // eng takes 5 s; after 300 ms the question goes to cto, who answers.
    let (llm, stores) = run("eng", Duration::from_secs(5), Duration::from_millis(300)).await;
    let results = tool_results(&llm);
    assert!(results[0].contains("@cto answered"), "{}", results[0]);
    let escalated = events_of(&stores, EventType::AskEscalated).await;
    assert_eq!(escalated.len(), 1, "{escalated:?}");
    assert_eq!(escalated[0].payload["from"], "eng");
    assert_eq!(escalated[0].payload["to"], "cto");
    let tasks = events_of(&stores, EventType::TaskCreated).await;
    let to_cto = tasks
        .iter()
        .find(|e| e.agent_handle() == Some("cto"))
        .unwrap_or_else(|| panic!("no escalated task for cto"));
    assert!(
        to_cto.payload["content"]
            .as_str()
            .unwrap_or_default()
            .contains("has no answer yet")
    );
    assert_eq!(to_cto.payload["ask"]["asker"], "ceo");
}
