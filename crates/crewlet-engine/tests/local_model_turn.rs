//! The quickstart with no model key: every seat falls back to the local
//! SmolLM2 inside the engine. A task through `POST /agents/ceo/tasks` runs
//! Plan, Execute (a real tool call, decoded under the tool's schema) and
//! Review on the real model; the live snapshot carries the streamed answer;
//! the token ledger holds what the model's tokenizer counted.

mod common;

use std::time::Duration;

use common::*;
use crewlet_test_support::services::require_local_model;
use serde_json::Value;

const TOKEN: &str = "local-model-test-token-0123456789";
/// A whole turn of a 135M model on a busy 2-core machine (three phases,
/// prompts of ~1,000-3,000 tokens) in a dev build.
const TURN: Duration = Duration::from_secs(1200);

fn quickstart_company() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart/company.yaml")
}

#[test]
fn the_quickstart_answers_on_the_local_model_with_no_key() {
    if require_local_model().is_none() {
        return;
    }
    // No key, whatever this machine's environment holds. This binary's one
    // test, before any other thread exists.
    // SAFETY: no other thread runs yet.
    unsafe {
        std::env::remove_var("OPENAI_API_KEY");
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
        .block_on(quickstart_turn());
}

async fn quickstart_turn() {
    let port = free_port();
    let mut bootstrap = crewlet_config::Bootstrap::default();
    bootstrap.api.port = port;
    bootstrap.api.auth.tokens = vec![crewlet_config::ApiToken {
        id: "founder".into(),
        token: TOKEN.into(),
        scopes: None,
    }];
    let options = crewlet_engine::RunOptions {
        import_company: Some(quickstart_company()),
        offline: true,
        ..crewlet_engine::RunOptions::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let engine = tokio::spawn(crewlet_engine::run::run_until(
        bootstrap,
        options,
        async move {
            let _ = stopped.await;
        },
    ));
    let base = format!("http://127.0.0.1:{port}");
    wait_ready(&base, Duration::from_secs(120)).await;

    let task_id = post_agent_task(
        &base,
        TOKEN,
        "ceo",
        "Ask the CTO to write a short status update on the product.",
    )
    .await;
    // While it runs, the dashboard's snapshot shows the seat's live turn
    // with the text the model has streamed so far.
    let streamed = std::sync::Arc::new(parking_lot::Mutex::new(None::<Value>));
    let completed = wait_for("the local model's turn", TURN, || {
        let streamed = streamed.clone();
        let base = base.clone();
        let task_id = task_id.clone();
        async move {
            if streamed.lock().is_none() {
                let (_, snapshot) = call_api(
                    reqwest::Method::GET,
                    format!("{base}/stream/snapshot"),
                    TOKEN,
                    None,
                )
                .await;
                let turn = snapshot["seats"]
                    .as_array()
                    .and_then(|s| s.iter().find(|x| x["handle"] == "ceo"))
                    .map(|s| s["turn"].clone())
                    .unwrap_or_default();
                if turn["response"]
                    .as_str()
                    .is_some_and(|r| !r.trim().is_empty())
                {
                    *streamed.lock() = Some(turn);
                }
            }
            let events = authed_events(&base, &task_id).await;
            events
                .iter()
                .any(|e| e["type"] == "task_completed" || e["type"] == "task_failed")
                .then_some(events)
        }
    })
    .await;
    let kinds = types(&completed);
    assert!(kinds.iter().any(|k| k == "task_completed"), "{kinds:?}");

    let phases: Vec<&Value> = completed
        .iter()
        .filter(|e| e["type"] == "agent_phase_completed")
        .collect();
    let phase = |name: &str| -> Value {
        phases
            .iter()
            .find(|e| e["payload"]["phase"] == name)
            .map(|e| e["payload"].clone())
            .unwrap_or_else(|| panic!("no {name} phase in {kinds:?}"))
    };
    for name in ["plan", "execute", "review"] {
        let p = phase(name);
        assert_eq!(p["provider"], "local", "{p}");
        assert_eq!(p["model"], "smollm2-135m-instruct", "{p}");
        assert_eq!(p["outcome"], "ok", "{p}");
    }
    // The plan names tools (under the schema, only the seat's own), so
    // Execute's first round is a call of one of them, decoded under its
    // arguments' schema: the loop ran it (a parse failure never runs).
    let execute = phase("execute");
    let executions = execute["tool_executions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!executions.is_empty(), "execute called no tool: {execute}");
    let turn = completed
        .iter()
        .find(|e| e["type"] == "agent_turn_completed")
        .map(|e| e["payload"].clone())
        .unwrap_or_default();
    assert!(
        ["done", "self_iterate", "direct"].contains(&turn["decision"].as_str().unwrap_or("")),
        "{turn}"
    );

    // The ledger: what the phases reported, per call, is what is charged.
    let sum = |key: &str| -> u64 {
        phases
            .iter()
            .map(|e| e["payload"][key].as_u64().unwrap_or(0))
            .sum()
    };
    let (status, breakdown) = call_api(
        reqwest::Method::GET,
        format!("{base}/tokens/breakdown"),
        TOKEN,
        None,
    )
    .await;
    assert_eq!(status, 200, "{breakdown}");
    let local = breakdown["by_model"]
        .as_array()
        .and_then(|m| m.iter().find(|r| r["provider"] == "local").cloned())
        .unwrap_or_default();
    assert_eq!(
        local["input_tokens"].as_u64(),
        Some(sum("input_tokens")),
        "{breakdown}"
    );
    assert_eq!(
        local["output_tokens"].as_u64(),
        Some(sum("output_tokens")),
        "{breakdown}"
    );
    assert!(sum("output_tokens") > 0 && sum("input_tokens") > 0);

    let live = streamed
        .lock()
        .clone()
        .unwrap_or_else(|| panic!("the snapshot never showed the ceo's streamed answer"));
    assert_eq!(live["model"], "smollm2-135m-instruct", "{live}");

    let _ = stop.send(());
    let result = tokio::time::timeout(Duration::from_secs(60), engine).await;
    assert!(matches!(result, Ok(Ok(Ok(())))), "{result:?}");
}

/// The task's stored events, content included.
async fn authed_events(base: &str, task_id: &str) -> Vec<Value> {
    let (_, body) = call_api(
        reqwest::Method::GET,
        format!("{base}/events?task_id={task_id}&limit=500"),
        TOKEN,
        None,
    )
    .await;
    let mut events = body["events"].as_array().cloned().unwrap_or_default();
    events.reverse();
    events
}
