//! Crewlet inside another tokio program.
//!
//! Builds an [`Engine`](crewlet_engine::Engine) on the memory backends (the
//! in-process queue and memory stores: nothing to install, nothing kept)
//! for a small company written inline, with one agent seat whose model is
//! an in-process function instead of an HTTP provider. Two hooks print what
//! happens: `on_agent_spawn` (registered on the builder, so it sees the
//! seats spawned at boot) and `on_task_state_change`. One task goes into
//! the seat's inbox; when it is done the program prints the per-agent token
//! summary and shuts the engine down.
//!
//! ```sh
//! cargo run -p crewlet-example-embed
//! ```
//!
//! To use a real model instead, give `providers.llm.main` a real
//! `base_url` (and `api_keys: ["${OPENAI_API_KEY}"]`) and drop the
//! `.llm(...)` call: the engine then builds the provider from the company.

use std::error::Error;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crewlet_config::Company;
use crewlet_core::{Event, EventType};
use crewlet_engine::{Backends, EngineBuilder, EngineOptions};
use crewlet_llm::{
    Completion, CompletionRequest, LlmError, LlmRegistry, ScriptedProvider, ToolCall, Usage,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The company: one agent seat. The `providers.llm` entry is what the seat
/// would use; [`EngineBuilder::llm`] replaces it with the in-process model
/// registered under the same name.
const COMPANY: &str = r#"
name: Embedded Co
mission: Keep the team informed
providers:
  llm:
    main: {type: openai-compatible, model: scripted-model, base_url: "http://127.0.0.1:9/v1"}
roles:
  - name: Status Writer
    handle: writer
    goal: Write short, clear status updates
"#;

/// The seat the task goes to.
const HANDLE: &str = "writer";
/// How long to wait for the task to finish.
const WAIT: Duration = Duration::from_secs(30);

type BoxError = Box<dyn Error + Send + Sync>;

/// One agent's token counts, as `Engine::usage_summary` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AgentTokens {
    handle: String,
    input: u64,
    output: u64,
    total: u64,
    calls: u64,
}

/// What one run did, as the hooks and the engine saw it.
#[derive(Debug)]
struct Report {
    /// Handles of the company's agent seats.
    agent_seats: Vec<String>,
    /// Handles from `agent_spawned` events, in order.
    spawned: Vec<String>,
    /// Every task state change seen: (task id, event type), in order.
    task_states: Vec<(String, EventType)>,
    /// The task this run published.
    task_id: String,
    /// `task_completed` or `task_failed`.
    outcome: EventType,
    tokens: Vec<AgentTokens>,
}

/// The in-process model: plan to answer directly, answer, review done.
/// Every call reports 40 input and 10 output tokens.
fn model(request: &CompletionRequest) -> Result<Completion, LlmError> {
    let offered = |name: &str| request.tools.iter().any(|t| t.name == name);
    let call = |name: &str, args: Value| Completion {
        tool_calls: vec![ToolCall {
            id: format!("call_{name}"),
            name: name.to_owned(),
            arguments: args.to_string(),
        }],
        ..Completion::default()
    };
    let mut completion = if offered("submit_plan") {
        call(
            "submit_plan",
            json!({"decision": "direct", "reasoning": "a one-line update needs no tools",
                   "steps": [{"intent": "write the update"}]}),
        )
    } else if offered("submit_review") {
        call(
            "submit_review",
            json!({"decision": "done", "notes": "short and clear",
                   "completed_work": "wrote the status update",
                   "final_artifact": "All systems green; release on Friday."}),
        )
    } else {
        Completion {
            content: "All systems green; release on Friday.".into(),
            ..Completion::default()
        }
    };
    completion.usage = Usage {
        input_tokens: 40,
        output_tokens: 10,
        cache_read_tokens: 0,
    };
    Ok(completion)
}

fn handle_of(event: &Event) -> String {
    event
        .tags
        .get("agent_handle")
        .cloned()
        .or_else(|| event.agent_role.clone())
        .unwrap_or_default()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn run() -> Result<Report, BoxError> {
    let company = Company::from_yaml("inline company", COMPANY)?;
    let backends = Backends::memory();
    let mut llm = LlmRegistry::new();
    llm.insert(Arc::new(ScriptedProvider::new(
        "main",
        "scripted-model",
        model,
    )));
    let options = EngineOptions {
        drain_timeout: Duration::from_secs(10),
        // No webhooks and no schedules in this program.
        run_router: false,
        run_scheduler: false,
        stream_progress: false,
        ..EngineOptions::default()
    };
    let builder = EngineBuilder::new(company, &backends)
        .options(options)
        .llm(llm);

    // Hooks run inline for every matching event the engine publishes, right
    // after the publish, on the task that published it: keep them quick
    // (print, record, hand off to a channel). Events from different tasks
    // can reach them in any order: a fast turn may report `task_started`
    // before `assign` has run the `task_created` hook.
    let spawned = Arc::new(Mutex::new(Vec::new()));
    let seen = spawned.clone();
    let _spawn_hook = builder.on_agent_spawn(move |event| {
        let handle = handle_of(event);
        println!("[hook] agent spawned: {handle} ({})", event.summary);
        lock(&seen).push(handle);
    });
    let task_states = Arc::new(Mutex::new(Vec::new()));
    let seen = task_states.clone();
    let (finished_tx, mut finished_rx) = mpsc::unbounded_channel::<(String, EventType)>();
    let _task_hook = builder.on_task_state_change(move |event| {
        let task_id = event.task_id.clone().unwrap_or_default();
        let reason = event.payload.get("reason").and_then(Value::as_str);
        match reason {
            Some(reason) => println!("[hook] task {task_id}: {} ({reason})", event.event_type),
            None => println!("[hook] task {task_id}: {}", event.event_type),
        }
        lock(&seen).push((task_id.clone(), event.event_type.clone()));
        if matches!(
            event.event_type,
            EventType::TaskCompleted | EventType::TaskFailed
        ) {
            // The receiver outlives the hooks; a send error cannot happen
            // while anyone is waiting.
            let _ = finished_tx.send((task_id, event.event_type.clone()));
        }
    });

    let engine = builder.start().await?;
    let agent_seats: Vec<String> = engine
        .organization()
        .agents()
        .map(|s| s.handle.clone())
        .collect();
    println!(
        "engine running: {} with {} agent seat(s)",
        engine.company().name,
        agent_seats.len()
    );

    let task_id = engine
        .assign(HANDLE, "embed-example", "Write a one-line status update")
        .await?;
    println!("published task {task_id} to {HANDLE}'s inbox");

    let outcome = tokio::time::timeout(WAIT, async {
        while let Some((id, state)) = finished_rx.recv().await {
            if id == task_id {
                return Some(state);
            }
        }
        None
    })
    .await;

    let usage = engine.usage_summary();
    let tokens: Vec<AgentTokens> = usage
        .agents
        .values()
        .map(|a| AgentTokens {
            handle: a.handle.clone(),
            input: a.tokens.input_tokens,
            output: a.tokens.output_tokens,
            total: a.tokens.total_tokens,
            calls: a.tokens.call_count,
        })
        .collect();
    println!("tokens per agent:");
    for t in &tokens {
        println!(
            "  {:<10} input {:>6}  output {:>6}  total {:>6}  calls {}",
            t.handle, t.input, t.output, t.total, t.calls
        );
    }
    println!(
        "  {:<10} input {:>6}  output {:>6}  total {:>6}  calls {}",
        "(engine)",
        usage.engine.input_tokens,
        usage.engine.output_tokens,
        usage.engine.total_tokens,
        usage.engine.call_count
    );

    let summary = engine.shutdown().await;
    backends.queue.shutdown().await;
    println!(
        "engine stopped ({} turn(s) abandoned)",
        summary.abandoned_turns
    );

    let outcome = match outcome {
        Ok(Some(state)) => state,
        Ok(None) => return Err("the task hook stopped before the task finished".into()),
        Err(_) => return Err(format!("task {task_id} did not finish within {WAIT:?}").into()),
    };
    let spawned = lock(&spawned).clone();
    let task_states = lock(&task_states).clone();
    Ok(Report {
        agent_seats,
        spawned,
        task_states,
        task_id,
        outcome,
        tokens,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let report = match run().await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let total: u64 = report.tokens.iter().map(|t| t.total).sum();
    println!(
        "hooks saw {} of {} agent seat(s) spawn and {} task state change(s); task {} ended with {} ({total} tokens)",
        report.spawned.len(),
        report.agent_seats.len(),
        report.task_states.len(),
        report.task_id,
        report.outcome
    );
    if report.outcome == EventType::TaskCompleted {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hooks_see_every_spawn_and_the_task_from_start_to_completion() {
        let report = run().await.expect("the example runs");

        // One agent_spawned per agent seat.
        let mut spawned = report.spawned.clone();
        spawned.sort();
        let mut seats = report.agent_seats.clone();
        seats.sort();
        assert!(!seats.is_empty());
        assert_eq!(spawned, seats, "{report:?}");

        // The task was created, then started, then completed. A hook runs
        // after each publish, on the publishing task: `task_created` comes
        // from `assign`, the other two from the turn on another worker, so
        // only started -> completed has a guaranteed order.
        let states: Vec<&EventType> = report
            .task_states
            .iter()
            .filter(|(id, _)| *id == report.task_id)
            .map(|(_, s)| s)
            .collect();
        assert_eq!(report.outcome, EventType::TaskCompleted, "{report:?}");
        assert_eq!(states.len(), 3, "{report:?}");
        assert!(states.contains(&&EventType::TaskCreated), "{report:?}");
        let lifecycle: Vec<&EventType> = states
            .iter()
            .copied()
            .filter(|s| **s != EventType::TaskCreated)
            .collect();
        assert_eq!(
            lifecycle,
            [&EventType::TaskStarted, &EventType::TaskCompleted],
            "{report:?}"
        );

        // The seat's tokens are exactly what the in-process model reported.
        assert_eq!(report.tokens.len(), 1, "{report:?}");
        let t = &report.tokens[0];
        assert_eq!(t.handle, HANDLE);
        assert!(t.calls >= 2, "plan and at least one more call: {t:?}");
        assert_eq!(t.input, 40 * t.calls, "{t:?}");
        assert_eq!(t.output, 10 * t.calls, "{t:?}");
        assert_eq!(t.total, t.input + t.output, "{t:?}");
    }
}
