//! A provider that decides at once (the local model): Plan and Review ask
//! it for their decision call straight away, over that one tool, and
//! Execute is unchanged. A provider that does not gets the read-only tools
//! and free choice first.

mod common;

use std::sync::Arc;

use crewlet_llm::{
    Completion, CompletionRequest, LlmRegistry, ScriptedProvider, ToolChoice, Usage,
};
use crewlet_store::MemoryTokenLedger;
use crewlet_turn::{
    CompanyProfile, MemoryEventSink, SeatProfile, ToolRegistry, Trigger, TurnDecision, TurnEngine,
    Visibility,
};
use parking_lot::Mutex;
use serde_json::json;

use crate::common::{Lookup, call};

/// Plan (one lookup step) -> Execute: a lookup, then the answer -> Review
/// done. Every request is kept.
fn answer(request: &CompletionRequest) -> Completion {
    let offered = |n: &str| request.tools.iter().any(|t| t.name == n);
    let mut c = if offered("submit_plan") {
        call(
            "submit_plan",
            json!({"decision": "plan", "reasoning": "the wiki has it",
                   "steps": [{"intent": "find it", "tools": ["lookup"]}],
                   "tools_needed": ["lookup"], "success_criteria": ["answered"]}),
        )
    } else if offered("submit_review") {
        call(
            "submit_review",
            json!({"decision": "done", "notes": "ok", "completed_work": "looked it up",
                   "final_artifact": "42"}),
        )
    } else if request
        .messages
        .iter()
        .any(|m| matches!(m, crewlet_llm::Message::Tool { .. }))
    {
        Completion {
            content: "The answer is 42".into(),
            ..Completion::default()
        }
    } else {
        call("lookup", json!({"q": "answer"}))
    };
    c.usage = Usage {
        input_tokens: 10,
        output_tokens: 1,
        cache_read_tokens: 0,
    };
    c
}

async fn turn(at_once: bool) -> Vec<CompletionRequest> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let mut provider = ScriptedProvider::new("main", "small", move |r: &CompletionRequest| {
        keep.lock().push(r.clone());
        Ok(answer(r))
    });
    if at_once {
        provider = provider.deciding_at_once();
    }
    let mut llm = LlmRegistry::new();
    llm.insert(Arc::new(provider));
    let tools = Arc::new(ToolRegistry::new());
    tools
        .register(Arc::new(Lookup::default()), Visibility::All)
        .unwrap_or_else(|e| panic!("register: {e}"));
    let engine = TurnEngine::new(
        CompanyProfile {
            name: "Nimbus".into(),
            ..CompanyProfile::default()
        },
        llm,
        Arc::new(MemoryTokenLedger::new()),
        Arc::new(MemoryEventSink::new()),
    )
    .with_tools(tools);
    let outcome = engine
        .run_turn(
            &SeatProfile::new("Nimbus", "eng", "Engineer"),
            &Trigger::new("task-1", "api", "What is the answer?"),
        )
        .await;
    assert_eq!(
        outcome.decision,
        TurnDecision::Done,
        "{:?}",
        outcome.failure
    );
    assert_eq!(outcome.final_artifact, "42");
    seen.lock().clone()
}

fn tool_names(r: &CompletionRequest) -> Vec<&str> {
    r.tools.iter().map(|t| t.name.as_str()).collect()
}

#[tokio::test]
async fn a_model_that_decides_at_once_is_asked_for_the_decision_first() {
    let requests = turn(true).await;
    // Plan, Execute's two rounds, Review: four calls and no rescue.
    assert_eq!(
        requests.len(),
        4,
        "{:?}",
        requests.iter().map(tool_names).collect::<Vec<_>>()
    );
    let plan = &requests[0];
    assert_eq!(tool_names(plan), ["submit_plan"]);
    assert!(
        matches!(plan.tool_choice, ToolChoice::Required),
        "{:?}",
        plan.tool_choice
    );
    // Execute is unchanged: the planned tool, called first.
    assert!(tool_names(&requests[1]).contains(&"lookup"));
    let review = &requests[3];
    assert_eq!(tool_names(review), ["submit_review"]);
    assert!(matches!(review.tool_choice, ToolChoice::Required));
}

#[tokio::test]
async fn other_models_get_the_read_only_tools_and_free_choice_first() {
    let requests = turn(false).await;
    assert_eq!(requests.len(), 4);
    let plan = &requests[0];
    assert!(tool_names(plan).contains(&"submit_plan"));
    assert!(
        tool_names(plan).contains(&"lookup"),
        "{:?}",
        tool_names(plan)
    );
    assert!(
        matches!(plan.tool_choice, ToolChoice::Auto),
        "{:?}",
        plan.tool_choice
    );
    assert!(matches!(requests[3].tool_choice, ToolChoice::Auto));
}
