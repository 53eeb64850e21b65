//! Memory helps, not only gets written: on real PostgreSQL + pgvector with
//! the local embedder, turn 1 of the Engineer learns a fact (the post-turn
//! persist decider keeps what its reviewer confirmed), and turn 2, woken
//! by a different trigger that needs the fact, finds it in its Plan prompt.
//! The fake model server records every request, so the assertions read
//! the very prompt the model was sent.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use crewlet_api::EngineView;
use crewlet_config::Company;
use crewlet_core::EventType;
use crewlet_core::payload::{AgentPhaseCompleted, EventPayload, MemoryPrefetched};
use crewlet_engine::{Backends, EngineBuilder, EngineOptions};
use crewlet_queue::MemoryBroker;
use crewlet_store::{MigrationOptions, Stores};
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::fake_llm::{FakeLlmServer, RecordedRequest, Reply, Script, When};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(120);

const TURN_ONE: &str = "Plan the rollout of billing-service 2.4 with ops (ref TURN-ONE).";
const TURN_TWO: &str =
    "A customer asks when the hotfix for billing-service can go to production (ref TURN-TWO).";
const FACT: &str = "The deploy window for production is Tuesday.";

fn script() -> Script {
    Script::new()
        // The auxiliary workers, told apart by their instructions.
        .on(
            When::system_contains("decide what an agent should remember")
                .and_transcript_contains("TURN-ONE"),
            Reply::text(json!({"tier": "LONG", "content": FACT}).to_string()).usage(60, 12),
        )
        .on(
            When::system_contains("decide what an agent should remember"),
            Reply::text(r#"{"tier": "NOOP", "content": ""}"#).usage(40, 5),
        )
        .on(
            When::system_contains("which of an agent's own memories"),
            Reply::text("[0]").usage(50, 3),
        )
        .on(
            When::system_contains("brief an agent on its own earlier work"),
            Reply::text("- Planned the billing-service rollout with ops.").usage(30, 10),
        )
        .on(
            When::system_contains("private notes on a person"),
            Reply::text("{}").usage(20, 2),
        )
        // The turn itself: plan, execute, review.
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "plan", "reasoning": "work it out with what I know",
                       "steps": [{"intent": "answer"}], "success_criteria": ["answered"]}),
            )
            .usage(100, 20),
        )
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call(
                "submit_review",
                json!({"decision": "done", "notes": "Ops confirmed: the deploy window for production is Tuesday.",
                       "completed_work": "agreed the rollout plan with ops", "final_artifact": "rollout plan"}),
            )
            .usage(80, 15),
        )
        .on(When::any(), Reply::text("Done.").usage(30, 5))
}

fn company(llm: &str, model_dir: &std::path::Path) -> Company {
    let yaml = format!(
        r#"name: "Memory Co"
providers:
  llm:
    fake: {{type: openai-compatible, model: fake-model, base_url: "{llm}"}}
  embeddings:
    type: local
    path: "{dir}"
roles:
  - {{name: Engineer, handle: eng}}
"#,
        dir = model_dir.display()
    );
    Company::from_yaml("memory company", &yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// The system prompt of a recorded OpenAI request.
fn system_text(r: &RecordedRequest) -> String {
    r.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "system")
        .map(|m| match &m["content"] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn plan_requests(llm: &FakeLlmServer, marker: &str) -> Vec<String> {
    llm.requests()
        .iter()
        .filter(|r| r.body.to_string().contains("\"submit_plan\""))
        .map(system_text)
        .filter(|s| s.contains(marker))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fact_learned_in_one_turn_reaches_the_plan_of_the_next() {
    let admin = crewlet_test_support::require!(postgres);
    let model_dir = crewlet_test_support::require!(embed_model);
    let db = FreshDatabase::create(&admin).await;
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("fake llm: {e}"));
    let (stores, _) = Stores::open(&db.dsn, MigrationOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let broker = MemoryBroker::new();
    let backends = Backends::new(Arc::new(broker.client()), stores.clone());
    let engine = EngineBuilder::new(company(&llm.openai_base_url(), &model_dir), &backends)
        .options(EngineOptions {
            run_router: false,
            run_scheduler: false,
            ..EngineOptions::default()
        })
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let memory = engine
        .memory()
        .unwrap_or_else(|| panic!("learning should be on with providers.embeddings"));
    let tools: Vec<String> = engine
        .tools(Some("eng"))
        .iter()
        .map(|t| t.name.clone())
        .collect();
    for t in [
        "reflect_and_persist",
        "refresh_memory",
        "query_episodes",
        "use_skill",
        "refine_skill",
        "mark_onboarded",
    ] {
        assert!(tools.iter().any(|x| x == t), "{t} missing from {tools:?}");
    }

    // Turn 1 teaches the fact.
    engine
        .assign("eng", "test", TURN_ONE)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let eng = crewlet_core::AgentId::for_seat("Memory Co", "eng");
    wait_for("turn 1 to be reflected on", WAIT, || async {
        let rows = memory
            .diary
            .recent(&eng, crewlet_memory::Page::first(10), chrono::Utc::now())
            .await
            .unwrap_or_default();
        let episodes = memory.episodes.counts("eng").await.unwrap_or_default();
        (episodes.raw == 1 && !rows.is_empty()).then_some(())
    })
    .await;
    let rows = memory
        .diary
        .recent(&eng, crewlet_memory::Page::first(10), chrono::Utc::now())
        .await
        .unwrap_or_default();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].content, FACT);
    assert_eq!(rows[0].kind, crewlet_memory::DiaryKind::Long);

    let first_plans = plan_requests(&llm, "TURN-ONE");
    assert!(!first_plans.is_empty(), "turn 1 planned");
    assert!(
        first_plans.iter().all(|p| !p.contains(FACT)),
        "turn 1 cannot know the fact yet"
    );

    // Turn 2, a different trigger that needs the fact.
    engine
        .assign("eng", "test", TURN_TWO)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("turn 2 to end", WAIT, || async {
        let n = memory.episodes.counts("eng").await.unwrap_or_default().raw;
        (n == 2).then_some(())
    })
    .await;
    let second_plans = plan_requests(&llm, "TURN-TWO");
    assert!(!second_plans.is_empty(), "turn 2 planned");
    for prompt in &second_plans {
        assert!(prompt.contains("## Personal memory"), "{prompt}");
        assert!(
            prompt.contains(FACT),
            "the fact reaches turn 2's Plan: {prompt}"
        );
        assert!(
            prompt.contains("## Similar prior work"),
            "turn 1 is recalled as prior work: {prompt}"
        );
    }
    // The filter saw the fact among its candidates, for turn 2's trigger.
    let filter_asked = llm.requests().iter().any(|r| {
        let t = r.body.to_string();
        t.contains("which of an agent's own memories") && t.contains("TURN-TWO") && t.contains(FACT)
    });
    assert!(
        filter_asked,
        "the relevance filter judged the fact for turn 2"
    );
    // Only one fact: turn 2's decider said NOOP, and the same fact is never
    // written twice.
    let rows = memory
        .diary
        .recent(&eng, crewlet_memory::Page::first(10), chrono::Utc::now())
        .await
        .unwrap_or_default();
    assert_eq!(rows.len(), 1, "{rows:?}");

    // The learning events, and the auxiliary calls charged as such.
    let learned = events_of(&stores, EventType::DiaryWritten).await;
    assert_eq!(learned.len(), 1);
    assert_eq!(
        events_of(&stores, EventType::EpisodeRecorded).await.len(),
        2
    );
    let prefetched: Vec<MemoryPrefetched> = events_of(&stores, EventType::MemoryPrefetched)
        .await
        .iter()
        .filter_map(|e| MemoryPrefetched::from_event(e).ok())
        .collect();
    assert_eq!(prefetched.len(), 2, "{prefetched:?}");
    assert!(prefetched.iter().any(|p| {
        p.blocks
            .iter()
            .any(|b| b.block == "personal_memory" && b.hit && b.selected == 1)
    }));
    let workers: Vec<String> = events_of(&stores, EventType::AgentPhaseCompleted)
        .await
        .iter()
        .filter_map(|e| AgentPhaseCompleted::from_event(e).ok())
        .filter_map(|p| p.auxiliary)
        .collect();
    for worker in ["persist_decider", "memory_filter", "episode_summarizer"] {
        assert!(
            workers.iter().any(|w| w == worker),
            "{worker} missing from {workers:?}"
        );
    }

    // `/tokens/breakdown` shows the learning calls as auxiliary workers.
    let breakdown = stores
        .events
        .token_breakdown(&crewlet_store::BreakdownQuery::days(1))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let decider = breakdown
        .by_worker
        .iter()
        .find(|w| w.worker == "persist_decider")
        .unwrap_or_else(|| panic!("no persist_decider in {:?}", breakdown.by_worker));
    // Two deciders ran: the LONG answer (60 + 12) and the NOOP (40 + 5).
    assert_eq!(decider.tokens.input_tokens, 100, "{decider:?}");
    assert_eq!(decider.tokens.output_tokens, 17, "{decider:?}");

    let summary = engine.shutdown().await;
    assert_eq!(summary.abandoned_turns, 0);
    backends.queue.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_embedder_the_engine_runs_and_learning_is_off() {
    let llm = FakeLlmServer::start(direct_turn(Duration::from_millis(1)))
        .await
        .unwrap_or_else(|e| panic!("fake llm: {e}"));
    let yaml = format!(
        "name: \"No Memory Co\"\nproviders:\n  llm:\n    fake: {{type: openai-compatible, model: fake-model, base_url: \"{}\"}}\nroles:\n  - {{name: Engineer, handle: eng}}\n",
        llm.openai_base_url()
    );
    let company = Company::from_yaml("no memory", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let stores = Stores::memory();
    let broker = MemoryBroker::new();
    let backends = Backends::new(Arc::new(broker.client()), stores.clone());
    let engine = EngineBuilder::new(company, &backends)
        .options(EngineOptions {
            run_router: false,
            run_scheduler: false,
            ..EngineOptions::default()
        })
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(engine.learning().is_none());
    let tools: Vec<String> = engine
        .tools(Some("eng"))
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(tools.iter().any(|t| t == "lookup_colleague"), "{tools:?}");
    assert!(
        !tools.iter().any(|t| t == "reflect_and_persist"),
        "{tools:?}"
    );
    engine
        .assign("eng", "test", "say hello")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    wait_for("the turn to complete", WAIT, || async {
        (!events_of(&stores, EventType::TaskCompleted)
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    assert!(
        events_of(&stores, EventType::MemoryPrefetched)
            .await
            .is_empty()
    );
    assert!(
        events_of(&stores, EventType::EpisodeRecorded)
            .await
            .is_empty()
    );
    engine.shutdown().await;
    backends.queue.shutdown().await;
}
