//! A whole turn on a subscription CLI provider (`type: cli-agent`): the
//! engine builds the provider from the company file, every phase of the
//! turn runs the fake `claude` in the seat's own home, and the task
//! completes with its answer.

mod common;

use std::time::Duration;

use common::*;
use crewlet_core::EventType;
use crewlet_engine::{Backends, EngineBuilder, EngineOptions};

const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_runs_on_a_subscription_cli() {
    let fake = crewlet_test_support::fake_cli_agent::binary_path()
        .unwrap_or_else(|e| panic!("fake cli: {e}"));
    let state = std::env::temp_dir().join(format!(
        "crewlet-cli-turn-{}",
        uuid::Uuid::now_v7().simple()
    ));
    let creds = state.join("credentials/.claude");
    std::fs::create_dir_all(&creds).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(creds.join(".credentials.json"), b"{\"fake\":1}")
        .unwrap_or_else(|e| panic!("{e}"));
    let yaml = format!(
        r#"name: Sub Co
providers:
  llm:
    default:
      type: cli-agent
      model: sonnet
      cli:
        agent: claude-code
        state_dir: "{state}"
        timeout_seconds: 60
        overrides: {{binary: "{fake}"}}
        env: {{FAKE_CLI_MODE: turn, FAKE_CLI_ANSWER: "The build is green."}}
roles:
  - {{name: Engineer, handle: eng}}
"#,
        state = state.display(),
        fake = fake.display(),
    );
    let company =
        crewlet_config::Company::from_yaml("sub", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let backends = Backends::memory();
    let engine = EngineBuilder::new(company, &backends)
        .options(EngineOptions {
            start_mcp: false,
            maintenance_interval: None,
            stream_progress: false,
            ..EngineOptions::default()
        })
        .start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    engine
        .assign("eng", "api", "Is the build green?")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let done = wait_for("the task to complete", WAIT, || async {
        let done = events_of(&backends.stores, EventType::TaskCompleted).await;
        (!done.is_empty()).then_some(done)
    })
    .await;
    engine.shutdown().await;
    assert!(
        events_of(&backends.stores, EventType::LlmUnavailable)
            .await
            .is_empty(),
        "a phase found the provider unavailable"
    );
    let text = done[0].payload.to_string();
    assert!(text.contains("The build is green."), "{text}");
    // The calls ran in the seat's own home, not the engine's.
    assert!(
        state.join("seats/eng/home").is_dir(),
        "no home for the seat"
    );
    let _ = std::fs::remove_dir_all(&state);
}
