//! Tests of sub-agents: the tools run under a host the way Execute sets it,
//! with an in-process model; one test runs a whole turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use crewlet_core::{AgentId, Event, EventType, TraceContext};
use crewlet_llm::{
    Completion, CompletionRequest, LlmError, LlmProvider, LlmRegistry, Message, Phase, ToolCall,
    Usage,
};
use crewlet_store::{MemoryTokenLedger, TokenLedger};
use parking_lot::Mutex;
use serde_json::{Value, json};
use uuid::Uuid;

use super::*;
use crate::{
    MemoryEventSink, Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput, Trigger,
    TurnDecision, TurnEngine, Visibility,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// What the model answers to a request; `None`: it never answers.
type Answer = dyn Fn(&CompletionRequest) -> Option<Completion> + Send + Sync;

/// A model that counts its calls in flight (to check the parallelism bound
/// without timing) and may never answer (to check the time limits).
struct Model {
    answer: Box<Answer>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    calls: AtomicUsize,
    requests: Mutex<Vec<CompletionRequest>>,
}

impl Model {
    fn new<F>(answer: F) -> Arc<Self>
    where
        F: Fn(&CompletionRequest) -> Option<Completion> + Send + Sync + 'static,
    {
        Arc::new(Self {
            answer: Box::new(answer),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
        })
    }
}

#[async_trait]
impl LlmProvider for Model {
    fn name(&self) -> &str {
        "main"
    }
    fn model(&self) -> &str {
        "test-model"
    }
    async fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.requests.lock().push(request.clone());
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        // Let the other children of a batch run into their calls too.
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        match (self.answer)(request) {
            Some(c) => Ok(c),
            None => std::future::pending().await,
        }
    }
}

struct Echo;

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self) -> &str {
        "Echoes."
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn invoke(&self, _: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text(args.to_string()))
    }
}

/// A tool that posts to a chat: it writes outside the company.
struct Post;

#[async_trait]
impl Tool for Post {
    fn name(&self) -> &str {
        "post_message"
    }
    fn description(&self) -> &str {
        "Posts to a channel."
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn invoke(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("posted"))
    }
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: 0,
    }
}

fn reply(text: &str, used: Usage) -> Completion {
    Completion {
        content: text.into(),
        usage: used,
        model: "test-model".into(),
        ..Completion::default()
    }
}

fn call(name: &str, args: Value, used: Usage) -> Completion {
    Completion {
        tool_calls: vec![ToolCall {
            id: format!("call_{name}"),
            name: name.into(),
            arguments: args.to_string(),
        }],
        usage: used,
        model: "test-model".into(),
        ..Completion::default()
    }
}

/// The task the child was given (its first message).
fn task_of(request: &CompletionRequest) -> String {
    match request.messages.first() {
        Some(Message::User { content }) => content.clone(),
        _ => String::new(),
    }
}

/// Answers every task `task N` with `answer N`.
fn answering() -> Arc<Model> {
    Model::new(|r| {
        let task = task_of(r);
        Some(reply(&task.replace("task", "answer"), usage(100, 10)))
    })
}

struct Rig {
    model: Arc<Model>,
    ledger: Arc<MemoryTokenLedger>,
    sink: Arc<MemoryEventSink>,
    host: Arc<Host>,
}

fn rig(model: Arc<Model>, settings: SubagentSettings, token_budget: u64) -> Rig {
    let tools = Arc::new(ToolRegistry::new());
    for tool in spawn_tools() {
        tools.upsert(tool, Visibility::All);
    }
    tools.upsert(Arc::new(Echo), Visibility::All);
    tools.upsert(Arc::new(Post), Visibility::All);
    let mut llm = LlmRegistry::new();
    llm.insert(model.clone());
    let ledger = Arc::new(MemoryTokenLedger::new());
    let sink = Arc::new(MemoryEventSink::new());
    let mut seat = SeatProfile::new("Nimbus", "eng", "Engineer");
    seat.token_budget = token_budget;
    let host = Arc::new(Host {
        company: CompanyProfile {
            name: "Nimbus".into(),
            ..CompanyProfile::default()
        },
        llm,
        tools,
        ledger: ledger.clone(),
        sink: sink.clone(),
        tracker: Arc::new(UsageTracker::new()),
        skills: Arc::new(ToolSkills::new()),
        settings,
        source: "test".into(),
        patience: Duration::from_secs(1),
        stream: false,
        seat,
        task_id: "task-1".into(),
        channel: None,
        sender: None,
        delegation_depth: 0,
        turn_id: Uuid::now_v7(),
        iteration: 1,
        spent: Mutex::new(Usage::default()),
        warnings: Mutex::new(Vec::new()),
    });
    Rig {
        model,
        ledger,
        sink,
        host,
    }
}

fn ctx(rig: &Rig) -> ToolContext {
    ToolContext {
        agent_id: rig.host.seat.agent_id,
        agent_handle: "eng".into(),
        role_name: "Engineer".into(),
        task_id: "task-1".into(),
        turn_id: rig.host.turn_id,
        phase: Phase::Execute,
        iteration: 1,
        delegation_depth: 0,
        delegation_chain: Vec::new(),
        trace: TraceContext::new_root(),
    }
}

/// Calls `tool` as the parent's Execute phase would.
async fn spawn(rig: &Rig, tool: &dyn Tool, args: Value) -> Result<ToolOutput, ToolError> {
    let ctx = ctx(rig);
    with_host(rig.host.clone(), tool.invoke(&ctx, args)).await
}

fn subagent_events(sink: &MemoryEventSink, t: &EventType) -> Vec<Event> {
    sink.of_type(t)
        .into_iter()
        .filter(|e| e.payload["phase"] == "subagent")
        .collect()
}

fn results(out: &ToolOutput) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
    let v: Value = serde_json::from_str(&out.content)?;
    Ok(v["results"].as_array().cloned().unwrap_or_default())
}

async fn agent_used(
    ledger: &MemoryTokenLedger,
    id: AgentId,
) -> Result<u64, Box<dyn std::error::Error>> {
    let scope = crewlet_store::agent_scope(&id);
    Ok(ledger
        .budgets()
        .await?
        .into_iter()
        .find(|r| r.scope == scope)
        .map_or(0, |r| r.used_tokens))
}

#[tokio::test]
async fn a_child_answers_and_its_answer_is_the_tool_result() -> TestResult {
    let rig = rig(answering(), SubagentSettings::default(), 0);
    let out = spawn(
        &rig,
        &SpawnSubagent,
        json!({"task_prompt": "task 7", "system_prompt": "Be brief.", "tool_names": ["echo"]}),
    )
    .await?;
    assert_eq!(out.content, "answer 7");

    // Its own system prompt: the brief, then the preamble.
    let requests = rig.model.requests.lock().clone();
    assert_eq!(requests.len(), 1);
    let system = &requests[0].system[0].text;
    assert!(system.starts_with("Be brief."), "{system}");
    assert!(system.contains("sub-agent"), "{system}");

    let started = subagent_events(&rig.sink, &EventType::AgentPhaseStarted);
    let completed = subagent_events(&rig.sink, &EventType::AgentPhaseCompleted);
    assert_eq!((started.len(), completed.len()), (1, 1));
    let done = &completed[0];
    assert_eq!(done.payload["outcome"], "ok");
    assert_eq!(done.payload["end"], "ok");
    assert_eq!(done.payload["brief"], "task 7");
    assert_eq!(done.payload["input_tokens"], 100);
    assert_eq!(
        done.payload["subagent_id"],
        started[0].payload["subagent_id"]
    );
    assert_eq!(
        done.tags.get("subagent_id").map(String::as_str),
        started[0].payload["subagent_id"].as_str()
    );
    assert!(done.is_stored());

    // Charged like the parent's calls: the seat's budget row, its lifetime
    // usage, the process totals, and the turn's share.
    assert_eq!(agent_used(&rig.ledger, rig.host.seat.agent_id).await?, 110);
    let lifetime = rig.ledger.usage().await?;
    assert_eq!(lifetime.first().map(|u| u.tokens_used), Some(110));
    assert_eq!(
        rig.host.tracker.agent(&rig.host.seat.agent_id).total_tokens,
        110
    );
    assert_eq!(*rig.host.spent.lock(), usage(100, 10));
    Ok(())
}

#[tokio::test]
async fn a_child_is_shown_the_skills_listed_for_sub_agents() -> TestResult {
    let rig = rig(answering(), SubagentSettings::default(), 0);
    for (key, phase) in [("tool:echo", "subagent"), ("tool:echo-exec", "execute")] {
        let skill = crate::ToolSkill::from_parts(
            json!({"key": key, "trigger": {"tool": "echo"}, "phases": [phase],
                   "title": "Echo", "summary": "Say it twice.", "required": false}),
            "Echo twice.",
            "test",
        )?;
        rig.host.skills.upsert(skill);
    }
    spawn(
        &rig,
        &SpawnSubagent,
        json!({"task_prompt": "task 1", "system_prompt": "s", "tool_names": ["echo"]}),
    )
    .await?;
    let requests = rig.model.requests.lock().clone();
    let system = &requests[0].system[0].text;
    assert!(system.contains("`tool:echo`"), "{system}");
    assert!(!system.contains("tool:echo-exec"), "{system}");
    assert!(
        requests[0]
            .tools
            .iter()
            .any(|t| t.name == "load_tool_skill"),
        "the child can load the skill"
    );
    Ok(())
}

#[tokio::test]
async fn limits_too_far_off_to_represent_do_not_panic() -> TestResult {
    let settings = SubagentSettings {
        timeout: Duration::MAX,
        batch_timeout: Duration::MAX,
        ..SubagentSettings::default()
    };
    let rig = rig(answering(), settings, 0);
    let out = spawn(
        &rig,
        &SpawnSubagent,
        json!({"task_prompt": "task 1", "system_prompt": "s"}),
    )
    .await?;
    assert_eq!(out.content, "answer 1");
    let out = spawn(
        &rig,
        &SpawnSubagentBatch,
        json!({"tasks": [{"task_prompt": "task 2", "system_prompt": "s"}]}),
    )
    .await?;
    assert_eq!(results(&out)?[0]["text"], "answer 2");
    Ok(())
}

#[tokio::test]
async fn a_batch_answers_in_order_with_bounded_parallelism() -> TestResult {
    let settings = SubagentSettings {
        max_parallel: 2,
        ..SubagentSettings::default()
    };
    let rig = rig(answering(), settings, 0);
    let tasks: Vec<Value> = (0..5)
        .map(|i| json!({"task_prompt": format!("task {i}"), "system_prompt": "Look it up."}))
        .collect();
    let out = spawn(&rig, &SpawnSubagentBatch, json!({"tasks": tasks})).await?;
    let results = results(&out)?;
    let texts: Vec<&str> = results.iter().filter_map(|r| r["text"].as_str()).collect();
    assert_eq!(
        texts,
        ["answer 0", "answer 1", "answer 2", "answer 3", "answer 4"]
    );
    assert!(results.iter().all(|r| r["outcome"] == "ok"));
    // Two at a time, and really two at a time.
    assert_eq!(rig.model.max_in_flight.load(Ordering::SeqCst), 2);
    assert_eq!(rig.model.calls.load(Ordering::SeqCst), 5);

    let batched = rig
        .sink
        .of_type(&EventType::Other("subagent_batched".into()));
    assert_eq!(batched.len(), 1);
    assert_eq!(batched[0].payload["task_count"], 5);
    assert_eq!(batched[0].payload["successes"], 5);
    assert_eq!(batched[0].payload["total_tokens"], 550);
    assert_eq!(
        subagent_events(&rig.sink, &EventType::AgentPhaseCompleted).len(),
        5
    );
    Ok(())
}

#[tokio::test]
async fn the_single_tool_takes_the_batch_form_too() -> TestResult {
    let rig = rig(answering(), SubagentSettings::default(), 0);
    let out = spawn(
        &rig,
        &SpawnSubagent,
        json!({"tasks": [{"task_prompt": "task 1", "system_prompt": "s"},
                         {"task_prompt": "task 2", "system_prompt": "s"}]}),
    )
    .await?;
    let texts: Vec<String> = results(&out)?
        .iter()
        .filter_map(|r| r["text"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(texts, ["answer 1", "answer 2"]);
    let both = spawn(
        &rig,
        &SpawnSubagent,
        json!({"task_prompt": "x", "system_prompt": "y", "tasks": []}),
    )
    .await;
    assert!(
        matches!(both, Err(ToolError::InvalidArguments(_))),
        "{both:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_child_spends_at_most_its_share_of_the_budget() -> TestResult {
    // 20% of 10 000 left: 2 000 tokens. Each round writes as much as it may
    // (700 tokens, or less when the call's output cap is lower).
    let model = Model::new(|r| {
        let output = r.max_tokens.map_or(700, |m| u64::from(m).min(700));
        Some(call("echo", json!({"q": 1}), usage(100, output)))
    });
    let rig = rig(model, SubagentSettings::default(), 10_000);
    let err = spawn(
        &rig,
        &SpawnSubagent,
        json!({"task_prompt": "dig", "system_prompt": "s", "tool_names": ["echo"]}),
    )
    .await;
    let Err(ToolError::Failed(message)) = err else {
        panic!("expected a failed call, got {err:?}");
    };
    assert!(message.contains("budget_exhausted"), "{message}");
    assert!(message.contains("share of 2000 tokens"), "{message}");
    // It ran, was charged to the seat, and stopped inside its share.
    let calls = rig.model.calls.load(Ordering::SeqCst);
    assert!(calls >= 1, "{calls}");
    let used = agent_used(&rig.ledger, rig.host.seat.agent_id).await?;
    assert!(used > 0 && used <= 2000, "{used}");
    assert_eq!(rig.host.spent.lock().total(), used);
    let started = subagent_events(&rig.sink, &EventType::AgentPhaseStarted);
    assert_eq!(started[0].payload["token_cap"], 2000);
    let completed = subagent_events(&rig.sink, &EventType::AgentPhaseCompleted);
    assert_eq!(completed[0].payload["error_kind"], "budget_exhausted");
    assert_eq!(completed[0].payload["outcome"], "failed");
    Ok(())
}

#[tokio::test]
async fn a_batch_splits_its_share_and_refuses_children_under_the_minimum() -> TestResult {
    // 20% of 100 000 = 20 000; at least 8 000 each: two children fit, the third is refused.
    let settings = SubagentSettings {
        min_per_child_tokens: 8_000,
        ..SubagentSettings::default()
    };
    let big = rig(answering(), settings, 100_000);
    let tasks: Vec<Value> = (0..3)
        .map(|i| json!({"task_prompt": format!("task {i}"), "system_prompt": "s"}))
        .collect();
    let out = spawn(&big, &SpawnSubagentBatch, json!({"tasks": tasks})).await?;
    let got = results(&out)?;
    let outcomes: Vec<&str> = got.iter().filter_map(|r| r["outcome"].as_str()).collect();
    assert_eq!(outcomes, ["ok", "ok", "refused"]);
    assert!(
        got[2]["error"]
            .as_str()
            .is_some_and(|e| e.contains("minimum of 8000")),
        "{}",
        got[2]
    );
    assert_eq!(big.model.calls.load(Ordering::SeqCst), 2);
    let caps: Vec<Value> = subagent_events(&big.sink, &EventType::AgentPhaseStarted)
        .iter()
        .map(|e| e.payload["token_cap"].clone())
        .collect();
    assert_eq!(caps, [json!(10_000), json!(10_000)]);

    // A share too small for even one child refuses them all, and runs nothing.
    let settings = SubagentSettings {
        min_per_child_tokens: 50_000,
        ..SubagentSettings::default()
    };
    let small = rig(answering(), settings, 100_000);
    let out = spawn(
        &small,
        &SpawnSubagentBatch,
        json!({"tasks": [{"task_prompt": "task 0", "system_prompt": "s"}]}),
    )
    .await?;
    assert_eq!(results(&out)?[0]["outcome"], "refused");
    assert_eq!(small.model.calls.load(Ordering::SeqCst), 0);
    Ok(())
}

#[tokio::test]
async fn max_turns_is_enforced_and_clamped() -> TestResult {
    let settings = SubagentSettings {
        max_turns: 3,
        ..SubagentSettings::default()
    };
    let model = Model::new(|_| Some(call("echo", json!({"again": true}), usage(10, 1))));
    let rig = rig(model, settings, 0);
    // Asking for more than the cap gets the cap.
    let err = spawn(
        &rig,
        &SpawnSubagent,
        json!({"task_prompt": "loop", "system_prompt": "s", "tool_names": ["echo"], "max_turns": 50}),
    )
    .await;
    let Err(ToolError::Failed(message)) = err else {
        panic!("expected a failed call, got {err:?}");
    };
    assert!(message.contains("max_turns"), "{message}");
    assert_eq!(rig.model.calls.load(Ordering::SeqCst), 3);
    let completed = subagent_events(&rig.sink, &EventType::AgentPhaseCompleted);
    assert_eq!(completed[0].payload["rounds"], 3);
    assert_eq!(completed[0].payload["error_kind"], "max_turns");

    // Asking for fewer gets fewer.
    let _ = spawn(
        &rig,
        &SpawnSubagent,
        json!({"task_prompt": "loop", "system_prompt": "s", "tool_names": ["echo"], "max_turns": 2}),
    )
    .await;
    assert_eq!(rig.model.calls.load(Ordering::SeqCst), 5);
    let bad = spawn(
        &rig,
        &SpawnSubagent,
        json!({"task_prompt": "loop", "system_prompt": "s", "max_turns": 0}),
    )
    .await;
    assert!(
        matches!(bad, Err(ToolError::InvalidArguments(_))),
        "{bad:?}"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_child_that_never_answers_times_out() -> TestResult {
    let rig = rig(Model::new(|_| None), SubagentSettings::default(), 0);
    let err = spawn(
        &rig,
        &SpawnSubagent,
        json!({"task_prompt": "wait", "system_prompt": "s"}),
    )
    .await;
    let Err(ToolError::Failed(message)) = err else {
        panic!("expected a failed call, got {err:?}");
    };
    assert!(message.contains("timeout"), "{message}");
    let completed = subagent_events(&rig.sink, &EventType::AgentPhaseCompleted);
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0].payload["error_kind"], "timeout");
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_batch_past_its_deadline_keeps_the_answers_it_has() -> TestResult {
    let settings = SubagentSettings {
        batch_timeout: Duration::from_secs(30),
        max_parallel: 1,
        ..SubagentSettings::default()
    };
    // Task 0 answers; task 1 never does; task 2 waits for a slot past the deadline.
    let model = Model::new(|r| {
        let task = task_of(r);
        (task == "task 0").then(|| reply("answer 0", usage(10, 1)))
    });
    let rig = rig(model, settings, 0);
    let tasks: Vec<Value> = (0..3)
        .map(|i| json!({"task_prompt": format!("task {i}"), "system_prompt": "s"}))
        .collect();
    let out = spawn(&rig, &SpawnSubagentBatch, json!({"tasks": tasks})).await?;
    let results = results(&out)?;
    let outcomes: Vec<&str> = results
        .iter()
        .filter_map(|r| r["outcome"].as_str())
        .collect();
    assert_eq!(outcomes, ["ok", "timeout", "timeout"]);
    assert_eq!(results[0]["text"], "answer 0");
    assert_eq!(results[1]["timed_out"], true);
    // The third never started.
    assert_eq!(rig.model.calls.load(Ordering::SeqCst), 2);
    Ok(())
}

#[tokio::test]
async fn a_child_cannot_spawn_and_never_sees_denied_tools() -> TestResult {
    // Left to itself, the child would spawn: its first answer calls spawn_subagent.
    let model = Model::new(|r| {
        let has_result = r.messages.iter().any(|m| matches!(m, Message::Tool { .. }));
        Some(if has_result {
            reply("did it myself", usage(10, 1))
        } else {
            call(
                SPAWN_SUBAGENT,
                json!({"task_prompt": "deeper", "system_prompt": "s"}),
                usage(10, 1),
            )
        })
    });
    let rig = rig(model, SubagentSettings::default(), 0);
    let out = spawn(
        &rig,
        &SpawnSubagent,
        json!({"task_prompt": "go", "system_prompt": "s"}),
    )
    .await?;
    assert_eq!(out.content, "did it myself");
    let requests = rig.model.requests.lock().clone();
    assert_eq!(requests.len(), 2, "the child spawned nothing");
    // With every tool of the parent's (no tool_names): only what it may share.
    let offered: Vec<&str> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["echo"]);
    let refused = requests[1]
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap_or_default();
    assert!(
        refused.1 && refused.0.contains("not available"),
        "{refused:?}"
    );

    // Named denied tools are refused and reported.
    let (given, rejected) = run::child_tools(
        &rig.host,
        Some(&[
            "echo".to_owned(),
            SPAWN_SUBAGENT_BATCH.to_owned(),
            "run_sandbox".to_owned(),
            "post_message".to_owned(),
            "activate_tool".to_owned(),
        ]),
    );
    assert_eq!(given, ["echo"]);
    assert_eq!(
        rejected,
        [
            SPAWN_SUBAGENT_BATCH,
            "run_sandbox",
            "post_message",
            "activate_tool"
        ]
    );

    // And a spawn tool called inside a child is refused outright.
    let ctx = ctx(&rig);
    let inner = with_host(
        rig.host.clone(),
        as_child(SpawnSubagent.invoke(&ctx, json!({"task_prompt": "x", "system_prompt": "y"}))),
    )
    .await;
    assert!(
        matches!(&inner, Err(ToolError::Failed(m)) if m.contains("cannot start sub-agents")),
        "{inner:?}"
    );
    // Outside a turn there is nothing to spawn from.
    let outside = SpawnSubagent
        .invoke(&ctx, json!({"task_prompt": "x", "system_prompt": "y"}))
        .await;
    assert!(
        matches!(&outside, Err(ToolError::Failed(m)) if m.contains("Execute")),
        "{outside:?}"
    );
    Ok(())
}

/// A whole turn: Plan names `spawn_subagent`, Execute calls it, the child
/// answers, Execute passes the answer on, Review accepts.
fn turn_model() -> Arc<Model> {
    Model::new(|r| {
        let offered = |n: &str| r.tools.iter().any(|t| t.name == n);
        let system = r.system.first().map(|b| b.text.as_str()).unwrap_or("");
        let tool_result = r.messages.iter().find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        });
        Some(if offered("submit_plan") {
            call(
                "submit_plan",
                json!({"decision": "plan", "reasoning": "delegate the reading",
                       "steps": [{"intent": "read", "approach": "a sub-agent reads",
                                  "tools": ["spawn_subagent"], "on_failure": "read myself"}],
                       "tools_needed": ["spawn_subagent"], "success_criteria": ["answered"]}),
                usage(100, 10),
            )
        } else if offered("submit_review") {
            call(
                "submit_review",
                json!({"decision": "done", "notes": "ok", "completed_work": "read",
                       "final_artifact": "the answer"}),
                usage(100, 10),
            )
        } else if system.contains("You are a sub-agent") {
            reply("child says 42", usage(7, 3))
        } else if let Some(result) = tool_result {
            reply(&format!("parent got: {result}"), usage(100, 10))
        } else {
            call(
                SPAWN_SUBAGENT,
                json!({"task_prompt": "read the wiki", "system_prompt": "Read carefully."}),
                usage(100, 10),
            )
        })
    })
}

#[tokio::test]
async fn a_turn_runs_a_child_under_its_execute_phase() -> TestResult {
    let model = turn_model();
    let tools = Arc::new(ToolRegistry::new());
    for tool in spawn_tools() {
        tools.register(tool, Visibility::All)?;
    }
    let mut llm = LlmRegistry::new();
    llm.insert(model.clone());
    let ledger = Arc::new(MemoryTokenLedger::new());
    let sink = Arc::new(MemoryEventSink::new());
    let engine = TurnEngine::new(
        CompanyProfile {
            name: "Nimbus".into(),
            ..CompanyProfile::default()
        },
        llm,
        ledger.clone(),
        sink.clone(),
    )
    .with_tools(tools);
    let seat = SeatProfile::new("Nimbus", "eng", "Engineer");
    let outcome = engine
        .run_turn(
            &seat,
            &Trigger::new("task-9", "test", "What does the wiki say?"),
        )
        .await;
    assert_eq!(
        outcome.decision,
        TurnDecision::Done,
        "{:?}",
        outcome.failure
    );

    // The child's answer was the tool's result.
    let requests = model.requests.lock().clone();
    assert!(
        requests.iter().any(|r| r.messages.iter().any(|m| matches!(
            m,
            Message::Tool { content, .. } if content == "child says 42"
        ))),
        "the parent never saw the child's answer"
    );

    // The child's events hang off the Execute phase's span, in its trace.
    let execute = sink
        .of_type(&EventType::AgentPhaseStarted)
        .into_iter()
        .find(|e| e.payload["phase"] == "execute")
        .ok_or("no execute phase")?;
    let child = subagent_events(&sink, &EventType::AgentPhaseCompleted);
    assert_eq!(child.len(), 1);
    assert_eq!(child[0].trace_id, execute.trace_id);
    assert!(execute.trace_id.is_some());
    assert_eq!(child[0].parent_span_id, execute.span_id);
    assert_ne!(child[0].span_id, execute.span_id);
    assert_eq!(child[0].task_id.as_deref(), Some("task-9"));
    assert_eq!(child[0].payload["turn_id"], outcome.turn_id.to_string());

    // Its tokens count in the turn and are charged to the seat.
    // Plan, Execute x2, Review at 110 each; the child 10.
    assert_eq!(outcome.usage.total(), 4 * 110 + 10);
    assert_eq!(agent_used(&ledger, seat.agent_id).await?, 4 * 110 + 10);
    Ok(())
}
