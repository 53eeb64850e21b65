//! Whole turns against the fake model server, over real HTTP.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_llm::{
    BreakerSettings, GuardOptions, GuardedProvider, LlmProvider, LlmRegistry, Phase,
    ProviderConfig, ProviderKind, RoleLlm, Usage,
};
use crewlet_store::{
    BudgetCharge, BudgetRow, ChargeOutcome, MemoryTokenLedger, StoreError, TokenLedger, UsageRow,
};
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When, Wire};
use crewlet_turn::{
    CompanyProfile, FailureReason, GuardKind, MemoryEventSink, SeatProfile, Tool, ToolAnnotations,
    ToolContext, ToolError, ToolOutput, ToolRegistry, Trigger, TurnDecision, TurnEngine,
    TurnOutcome, TurnSettings, Visibility,
};
use serde_json::{Value, json};

use crate::common::Lookup;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const COMPANY: &str = "Nimbus";

// ---------------------------------------------------------------- tools

/// A read-only tool that waits for a second concurrent call before answering.
struct Rendezvous(tokio::sync::Barrier);

#[async_trait]
impl Tool for Rendezvous {
    fn name(&self) -> &str {
        "rendezvous"
    }
    fn description(&self) -> &str {
        "Waits for its twin."
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn invoke(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        self.0.wait().await;
        Ok(ToolOutput::text("met"))
    }
}

struct Explode;

#[async_trait]
impl Tool for Explode {
    fn name(&self) -> &str {
        "explode"
    }
    fn description(&self) -> &str {
        "Always panics."
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    async fn invoke(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        panic!("boom")
    }
}

// ---------------------------------------------------------------- ledger

/// Delegates to the memory ledger and sums what it really charged.
#[derive(Default)]
struct CountingLedger {
    inner: MemoryTokenLedger,
    charged: AtomicU64,
}

#[async_trait]
impl TokenLedger for CountingLedger {
    async fn charge(&self, charge: &BudgetCharge) -> Result<ChargeOutcome, StoreError> {
        let out = self.inner.charge(charge).await?;
        if out == ChargeOutcome::Charged {
            self.charged.fetch_add(charge.tokens, Ordering::SeqCst);
        }
        Ok(out)
    }
    async fn record_usage(&self, agent_handle: &str, tokens: u64) -> Result<(), StoreError> {
        self.inner.record_usage(agent_handle, tokens).await
    }
    async fn budgets(&self) -> Result<Vec<BudgetRow>, StoreError> {
        self.inner.budgets().await
    }
    async fn reset(&self, scope: &str) -> Result<(), StoreError> {
        self.inner.reset(scope).await
    }
    async fn usage(&self) -> Result<Vec<UsageRow>, StoreError> {
        self.inner.usage().await
    }
    async fn reserve(
        &self,
        charge: &BudgetCharge,
    ) -> Result<crewlet_store::ReserveOutcome, StoreError> {
        self.inner.reserve(charge).await
    }
    async fn settle(
        &self,
        id: crewlet_store::ReservationId,
        actual: u64,
    ) -> Result<Vec<crewlet_store::BudgetWarning>, StoreError> {
        let warnings = self.inner.settle(id, actual).await?;
        self.charged.fetch_add(actual, Ordering::SeqCst);
        Ok(warnings)
    }
    async fn scope_rows(&self, scopes: &[String]) -> Result<Vec<BudgetRow>, StoreError> {
        self.inner.scope_rows(scopes).await
    }
    async fn release(&self, id: crewlet_store::ReservationId) -> Result<(), StoreError> {
        self.inner.release(id).await
    }
    async fn release_stale(
        &self,
        before: chrono::DateTime<chrono::Utc>,
    ) -> Result<usize, StoreError> {
        self.inner.release_stale(before).await
    }
}

// ---------------------------------------------------------------- harness

struct Harness {
    server: FakeLlmServer,
    engine: TurnEngine,
    sink: Arc<MemoryEventSink>,
    ledger: Arc<CountingLedger>,
    lookup: Arc<Lookup>,
}

struct Setup {
    org_budget: u64,
    keys: Vec<&'static str>,
    settings: TurnSettings,
    anthropic: bool,
    lookup_answer: Option<String>,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            org_budget: 0,
            keys: vec!["key-a"],
            settings: TurnSettings::default(),
            anthropic: false,
            lookup_answer: None,
        }
    }
}

fn provider_config(
    server: &FakeLlmServer,
    name: &str,
    wire: Wire,
    keys: &[&str],
) -> ProviderConfig {
    let cfg = match wire {
        Wire::Anthropic => ProviderConfig::new(name, ProviderKind::Anthropic, "claude-fake")
            .with_base_url(server.anthropic_base_url()),
        _ => ProviderConfig::new(name, ProviderKind::OpenAi, "gpt-fake")
            .with_base_url(server.openai_base_url()),
    };
    cfg.with_keys(keys.iter().copied())
        .with_retries(0, Duration::ZERO)
}

async fn harness(script: Script, setup: Setup) -> Result<Harness, Box<dyn std::error::Error>> {
    let server = FakeLlmServer::start(script).await?;
    let wire = if setup.anthropic {
        Wire::Anthropic
    } else {
        Wire::OpenAi
    };
    let llm = LlmRegistry::from_configs([provider_config(&server, "main", wire, &setup.keys)])?;
    harness_with(server, llm, setup)
}

fn harness_with(
    server: FakeLlmServer,
    llm: LlmRegistry,
    setup: Setup,
) -> Result<Harness, Box<dyn std::error::Error>> {
    let sink = Arc::new(MemoryEventSink::new());
    let ledger = Arc::new(CountingLedger::default());
    let tools = Arc::new(ToolRegistry::new());
    let lookup = Arc::new(Lookup::answering(setup.lookup_answer));
    tools.register(lookup.clone(), Visibility::All)?;
    tools.register(Arc::new(Explode), Visibility::roles(["eng"]))?;
    let company = CompanyProfile {
        name: COMPANY.into(),
        mission: "Make weather boring".into(),
        policies: vec!["Never share customer data".into()],
        token_budget: setup.org_budget,
        ..CompanyProfile::default()
    };
    let engine = TurnEngine::new(company, llm, ledger.clone(), sink.clone())
        .with_tools(tools)
        .with_settings(setup.settings);
    Ok(Harness {
        server,
        engine,
        sink,
        ledger,
        lookup,
    })
}

fn seat(handle: &str) -> SeatProfile {
    let mut s = SeatProfile::new(COMPANY, handle, "Engineer");
    s.goal = "Answer questions about the weather service".into();
    s
}

fn trigger(task: &str) -> Trigger {
    let mut t = Trigger::new(task, "slack", "What is the answer?");
    t.sender = Some("U42".into());
    t.channel = Some("C7".into());
    t
}

fn plan_args(decision: &str, tools: &[&str]) -> Value {
    json!({
        "decision": decision,
        "reasoning": "the wiki has it",
        "steps": [{"intent": "find the answer", "approach": "search the wiki", "tools": tools,
                   "on_failure": "ask the manager"}],
        "tools_needed": tools,
        "success_criteria": ["the answer is stated"]
    })
}

fn review_args(decision: &str, artifact: &str, notes: &str) -> Value {
    json!({"decision": decision, "notes": notes, "completed_work": "looked it up",
           "final_artifact": artifact})
}

/// Plan (100/20) -> Execute: lookup call (120/12), answer (150/15) -> Review done (80/10).
fn standard_script() -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call("submit_plan", plan_args("plan", &["lookup"])).usage(100, 20),
        )
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call(
                "submit_review",
                review_args("done", "The answer is 42", "criteria met"),
            )
            .usage(80, 10),
        )
        .on(
            When::after_tool_result(),
            Reply::text("The answer is 42").usage(150, 15),
        )
        .on(
            When::tool_offered("lookup"),
            Reply::tool_call("lookup", json!({"q": "answer"})).usage(120, 12),
        )
}

fn payload_u64(e: &Event, key: &str) -> u64 {
    e.payload
        .get(key)
        .and_then(Value::as_u64)
        .unwrap_or(u64::MAX)
}

fn phase_usage(o: &TurnOutcome, phase: Phase) -> Usage {
    let mut u = Usage::default();
    for p in o.phases.iter().filter(|p| p.phase == phase) {
        u.add(&p.usage);
    }
    u
}

fn usage(input: u64, output: u64) -> Usage {
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: 0,
    }
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn plan_tool_call_review_done_with_exact_token_totals() -> TestResult {
    let h = harness(standard_script(), Setup::default()).await?;
    let eng = seat("eng");
    let parent = TraceContext::new_root();
    let mut trig = trigger("task-1");
    trig.trace = Some(parent);
    let o = h.engine.run_turn(&eng, &trig).await;

    assert_eq!(o.decision, TurnDecision::Done, "{:?}", o.failure);
    assert_eq!(o.iterations, 1);
    assert_eq!(o.final_artifact, "The answer is 42");
    assert_eq!(o.models, ["gpt-fake"]);
    assert_eq!(phase_usage(&o, Phase::Plan), usage(100, 20));
    assert_eq!(phase_usage(&o, Phase::Execute), usage(270, 27));
    assert_eq!(phase_usage(&o, Phase::Review), usage(80, 10));
    assert_eq!(o.usage, usage(450, 57));

    // the tool ran once, for the calling seat
    assert_eq!(
        h.lookup.calls(),
        vec![("eng".to_owned(), json!({"q": "answer"}))]
    );

    // what the model was offered in each phase
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 4);
    let tools = |i: usize| -> Vec<String> {
        reqs[i].body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
            .collect()
    };
    // Plan: submit_plan plus the read-only tools, slim (first sentence only)
    assert_eq!(tools(0), ["submit_plan", "lookup"]);
    assert_eq!(
        reqs[0].body["tools"][1]["function"]["description"],
        "Looks a fact up in the company wiki."
    );
    assert!(
        !tools(0).contains(&"explode".to_owned()),
        "plan sees no side-effecting tools"
    );
    let plan_system = reqs[0].body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(plan_system.contains("## Tool catalogue"));
    assert!(plan_system.contains("- explode: Always panics."));
    // Execute: the first round must call a tool the plan named, and only
    // those are offered; then what the plan needs and the discovery pair.
    assert_eq!(tools(1), ["lookup"]);
    assert_eq!(reqs[1].body["tool_choice"], "required");
    let execute = ["lookup", "list_mcp_server_tools", "activate_tool"];
    assert_eq!(tools(2), execute);
    assert_eq!(reqs[2].body["tool_choice"], "auto");
    assert_eq!(reqs[2].body["messages"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        reqs[2].body["messages"][3]["content"],
        "wiki says: answer = 42"
    );
    // Review
    assert_eq!(tools(3), ["submit_review", "lookup"]);

    // events, in order
    assert_eq!(
        h.sink.stored_types(),
        [
            "task_started",
            "agent_phase_started",
            "agent_phase_completed",
            "agent_phase_started",
            "agent_phase_completed",
            "agent_phase_started",
            "agent_phase_completed",
            "agent_turn_completed",
            "task_completed"
        ]
    );
    let events = h.sink.events();
    let turn_span = events[0].trace().ok_or("task_started has no trace")?;
    assert_eq!(turn_span.trace_id, parent.trace_id);
    assert_eq!(turn_span.parent_span_id, Some(parent.span_id));
    let agent_id = eng.agent_id.to_string();
    for e in &events {
        assert_eq!(
            e.agent_id.as_deref(),
            Some(agent_id.as_str()),
            "{}",
            e.event_type
        );
        assert_eq!(e.agent_role.as_deref(), Some("Engineer"));
        assert_eq!(e.task_id.as_deref(), Some("task-1"));
        assert_eq!(e.channel_id.as_deref(), Some("C7"));
        assert_eq!(e.trace_id, Some(parent.trace_id));
        if e.event_type.as_str().starts_with("agent_phase") {
            assert_eq!(
                e.parent_span_id,
                Some(turn_span.span_id),
                "phase span is a child"
            );
        }
    }
    let completed = h.sink.of_type(&EventType::AgentPhaseCompleted);
    let expect = [
        ("plan", 100, 20, 0),
        ("execute", 270, 27, 1),
        ("review", 80, 10, 0),
    ];
    for (e, (phase, input, output, tools_run)) in completed.iter().zip(expect) {
        assert_eq!(e.payload["phase"], phase);
        assert_eq!(e.payload["model"], "gpt-fake");
        assert_eq!(e.payload["provider"], "main");
        assert_eq!(payload_u64(e, "input_tokens"), input);
        assert_eq!(payload_u64(e, "output_tokens"), output);
        assert_eq!(payload_u64(e, "cache_read_tokens"), 0);
        assert_eq!(payload_u64(e, "iteration"), 1);
        assert!(e.payload.get("duration_ms").is_some_and(Value::is_u64));
        assert_eq!(e.payload["turn_id"], o.turn_id.to_string());
        assert_eq!(
            e.payload["tool_executions"].as_array().map(Vec::len),
            Some(tools_run)
        );
        // What the phase asked and what it got, for the dashboard's inspect.
        let prompt = e.payload["prompt"].as_str().unwrap_or_default();
        assert!(prompt.contains("--- user"), "{phase}: {prompt}");
        let response = e.payload["response"].as_str().unwrap_or_default();
        assert!(!response.is_empty(), "{phase} recorded no response");
    }
    let plan = &completed[0];
    assert!(
        plan.payload["response"]
            .as_str()
            .is_some_and(|r| r.starts_with("-> submit_plan(")),
        "{}",
        plan.payload["response"]
    );
    let turn = &h.sink.of_type(&EventType::AgentTurnCompleted)[0];
    assert_eq!(turn.payload["decision"], "done");
    assert_eq!(turn.payload["iterations"], 1);
    assert_eq!(turn.payload["models"], json!(["gpt-fake"]));
    assert_eq!(turn.payload["trigger"]["source"], "slack");
    assert_eq!(payload_u64(turn, "input_tokens"), 450);
    assert_eq!(payload_u64(turn, "output_tokens"), 57);
    // progress is streamed (not stored) with the tool executions so far
    let progress = h.sink.of_type(&EventType::AgentTurnProgress);
    assert!(!progress.is_empty());
    assert!(progress.iter().all(|e| !e.is_stored()));
    assert_eq!(progress[0].payload["tool_executions"][0]["name"], "lookup");

    // budgets and usage
    let rows = h.ledger.budgets().await?;
    assert!(rows.iter().all(|r| r.used_tokens == 507), "{rows:?}");
    let usage_rows = h.ledger.usage().await?;
    assert_eq!(usage_rows.len(), 1);
    assert_eq!(
        (
            usage_rows[0].agent_handle.as_str(),
            usage_rows[0].tokens_used
        ),
        ("eng", 507)
    );
    let summary = h.engine.summary();
    let mine = &summary.agents[&agent_id];
    assert_eq!(mine.handle, "eng");
    assert_eq!(
        (mine.tokens.input_tokens, mine.tokens.output_tokens),
        (450, 57)
    );
    assert_eq!((mine.tokens.total_tokens, mine.tokens.call_count), (507, 4));
    assert_eq!(summary.engine, mine.tokens);
    Ok(())
}

#[tokio::test]
async fn direct_turn_skips_review() -> TestResult {
    let script = Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call("submit_plan", plan_args("direct", &[])).usage(50, 5),
        )
        .on(
            // Execute: a plan that names no tool still has the discovery pair.
            When::tool_offered("activate_tool"),
            Reply::text("Hello! The answer is 42.").usage(60, 6),
        );
    let h = harness(script, Setup::default()).await?;
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-d")).await;
    assert_eq!(o.decision, TurnDecision::Direct, "{:?}", o.failure);
    assert_eq!(o.final_artifact, "Hello! The answer is 42.");
    assert_eq!(o.usage, usage(110, 11));
    let phases: Vec<Phase> = o.phases.iter().map(|p| p.phase).collect();
    assert_eq!(phases, [Phase::Plan, Phase::Execute]);
    assert_eq!(h.server.request_count(), 2);
    assert!(h.lookup.calls().is_empty());
    let turn = &h.sink.of_type(&EventType::AgentTurnCompleted)[0];
    assert_eq!(turn.payload["decision"], "direct");
    assert_eq!(h.sink.of_type(&EventType::TaskCompleted).len(), 1);
    Ok(())
}

#[tokio::test]
async fn skip_turn_ends_after_plan() -> TestResult {
    let script = Script::new().on(
        When::tool_offered("submit_plan"),
        Reply::tool_call("submit_plan", plan_args("skip", &[])).usage(40, 4),
    );
    let h = harness(script, Setup::default()).await?;
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-s")).await;
    assert_eq!(o.decision, TurnDecision::Skip);
    assert!(o.succeeded());
    assert_eq!(o.usage, usage(40, 4));
    assert_eq!(h.server.request_count(), 1);
    assert_eq!(
        h.sink.stored_types(),
        [
            "task_started",
            "agent_phase_started",
            "agent_phase_completed",
            "agent_turn_completed",
            "task_completed"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn plan_without_submit_plan_gets_two_rescue_rounds_then_skips() -> TestResult {
    let script = Script::new().on(
        When::tool_offered("submit_plan"),
        Reply::text("I think I will just chat.").usage(10, 1),
    );
    let h = harness(script, Setup::default()).await?;
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-r")).await;
    assert_eq!(o.decision, TurnDecision::Skip);
    assert_eq!(o.usage, usage(30, 3));
    let reqs = h.server.requests();
    assert_eq!(reqs.len(), 3);
    assert_eq!(reqs[0].body["tool_choice"], "auto");
    for rescue in &reqs[1..] {
        assert_eq!(rescue.body["tool_choice"], "required");
        assert_eq!(rescue.body["tools"].as_array().map(Vec::len), Some(1));
        assert_eq!(rescue.body["tools"][0]["function"]["name"], "submit_plan");
    }
    Ok(())
}

#[tokio::test]
async fn self_iterate_then_done_carries_the_ledger_into_the_second_plan() -> TestResult {
    let script = Script::new().on(
        When::tool_offered("submit_review"),
        Reply::tool_call(
            "submit_review",
            review_args("self_iterate", "draft: 41", "MISSING-THE-UNITS"),
        )
        .usage(80, 10)
        .times(1),
    );
    let h = harness(script, Setup::default()).await?;
    // the standard rules after the one-shot self_iterate
    for (when, reply) in [
        (
            When::tool_offered("submit_plan"),
            Reply::tool_call("submit_plan", plan_args("plan", &["lookup"])).usage(100, 20),
        ),
        (
            When::tool_offered("submit_review"),
            Reply::tool_call(
                "submit_review",
                review_args("done", "The answer is 42 m/s", "ok"),
            )
            .usage(80, 10),
        ),
        (
            When::after_tool_result(),
            Reply::text("The answer is 42").usage(150, 15),
        ),
        (
            When::tool_offered("lookup"),
            Reply::tool_call("lookup", json!({"q": "answer"})).usage(120, 12),
        ),
    ] {
        h.server.push_rule(when, reply);
    }
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-i")).await;
    assert_eq!(o.decision, TurnDecision::Done, "{:?}", o.failure);
    assert_eq!(o.iterations, 2);
    assert_eq!(o.final_artifact, "The answer is 42 m/s");
    assert_eq!(o.phases.len(), 6);
    assert_eq!(o.usage, usage(900, 114));

    let plans: Vec<String> = h
        .server
        .requests()
        .iter()
        .filter(|r| r.body["tools"][0]["function"]["name"] == "submit_plan")
        .map(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(plans.len(), 2);
    assert!(!plans[0].contains("## Work so far"));
    assert!(plans[1].contains("## Work so far"));
    assert!(plans[1].contains("### Iteration 1"));
    assert!(plans[1].contains("MISSING-THE-UNITS"));
    assert!(plans[1].contains("draft: 41"));
    let iterations: Vec<u64> = h
        .sink
        .of_type(&EventType::AgentPhaseStarted)
        .iter()
        .map(|e| payload_u64(e, "iteration"))
        .collect();
    assert_eq!(iterations, [1, 1, 1, 2, 2, 2]);
    Ok(())
}

fn iterate_script(artifacts: &[&str]) -> Script {
    let mut script = Script::new();
    for a in artifacts {
        script = script.on(
            When::tool_offered("submit_review"),
            Reply::tool_call("submit_review", review_args("self_iterate", a, "not yet"))
                .usage(10, 1)
                .times(1),
        );
    }
    script
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call("submit_plan", plan_args("plan", &[])).usage(10, 1),
        )
        .on(
            When::tool_offered("activate_tool"),
            Reply::text("worked on it").usage(10, 1),
        )
}

fn assert_guard(h: &Harness, o: &TurnOutcome, kind: GuardKind) {
    assert_eq!(o.decision, TurnDecision::Failed);
    assert_eq!(
        o.failure.as_ref().map(|f| &f.reason),
        Some(&FailureReason::Guard(kind))
    );
    let breaches = h.sink.of_type(&EventType::TurnGuardBreach);
    assert_eq!(breaches.len(), 1);
    assert_eq!(breaches[0].payload["kind"], kind.as_str());
    let failed = h.sink.of_type(&EventType::TaskFailed);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].payload["reason"], kind.as_str());
    assert!(h.sink.of_type(&EventType::TaskCompleted).is_empty());
    let turn = &h.sink.of_type(&EventType::AgentTurnCompleted)[0];
    assert_eq!(turn.payload["decision"], "failed");
}

#[tokio::test]
async fn max_iter_guard_after_three_self_iterations() -> TestResult {
    let h = harness(iterate_script(&["v1", "v2", "v3", "v4"]), Setup::default()).await?;
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-m")).await;
    assert_guard(&h, &o, GuardKind::MaxIter);
    assert_eq!(o.iterations, 3);
    assert_eq!(o.phases.len(), 9);
    assert_eq!(o.usage, usage(90, 9));
    Ok(())
}

#[tokio::test]
async fn stall_guard_on_the_same_artifact_twice() -> TestResult {
    let h = harness(iterate_script(&["same", "same", "other"]), Setup::default()).await?;
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-st")).await;
    assert_guard(&h, &o, GuardKind::Stall);
    assert_eq!(o.iterations, 2);
    Ok(())
}

#[tokio::test]
async fn depth_cap_guard_refuses_before_any_call() -> TestResult {
    let h = harness(standard_script(), Setup::default()).await?;
    let mut trig = trigger("task-deep");
    trig.delegation_depth = 4;
    let o = h.engine.run_turn(&seat("eng"), &trig).await;
    assert_guard(&h, &o, GuardKind::DepthCap);
    assert_eq!(h.server.request_count(), 0);
    assert!(h.sink.events().iter().all(|e| e.delegation_depth == 4));
    Ok(())
}

#[tokio::test]
async fn timeout_guard_ends_a_slow_turn() -> TestResult {
    let script = Script::new().on(
        When::any(),
        Reply::text("too late").delay(Duration::from_secs(5)),
    );
    let h = harness(script, Setup::default()).await?;
    let mut trig = trigger("task-slow");
    trig.timeout = Some(Duration::from_millis(300));
    let o = h.engine.run_turn(&seat("eng"), &trig).await;
    assert_guard(&h, &o, GuardKind::Timeout);
    Ok(())
}

#[tokio::test]
async fn a_panicking_tool_is_an_unhandled_guard_breach() -> TestResult {
    let script = Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call("submit_plan", plan_args("plan", &["explode"])),
        )
        .on(
            When::tool_offered("explode"),
            Reply::tool_call("explode", json!({})),
        );
    let h = harness(script, Setup::default()).await?;
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-p")).await;
    assert_guard(&h, &o, GuardKind::Unhandled);
    let detail = o.failure.map(|f| f.detail).unwrap_or_default();
    assert!(
        detail.contains("explode") && detail.contains("boom"),
        "{detail}"
    );
    Ok(())
}

#[tokio::test]
async fn rate_limited_first_key_rotates_to_the_second() -> TestResult {
    let mut script = Script::new().on(When::api_key("key-a"), Reply::rate_limited(60));
    for (when, reply) in standard_rules() {
        script = script.on(when, reply);
    }
    let setup = Setup {
        keys: vec!["key-a", "key-b"],
        ..Setup::default()
    };
    let h = harness(script, setup).await?;
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-k")).await;
    assert_eq!(o.decision, TurnDecision::Done, "{:?}", o.failure);
    assert_eq!(o.usage, usage(450, 57));
    let keys: Vec<String> = h.server.keys_used().into_iter().flatten().collect();
    assert_eq!(keys, ["key-a", "key-b", "key-b", "key-b", "key-b"]);
    // the cooled key is not a provider failure: no fallback, no unavailability
    assert!(h.sink.of_type(&EventType::ProviderFallback).is_empty());
    Ok(())
}

fn standard_rules() -> Vec<(When, Reply)> {
    vec![
        (
            When::tool_offered("submit_plan"),
            Reply::tool_call("submit_plan", plan_args("plan", &["lookup"])).usage(100, 20),
        ),
        (
            When::tool_offered("submit_review"),
            Reply::tool_call(
                "submit_review",
                review_args("done", "The answer is 42", "criteria met"),
            )
            .usage(80, 10),
        ),
        (
            When::after_tool_result(),
            Reply::text("The answer is 42").usage(150, 15),
        ),
        (
            When::tool_offered("lookup"),
            Reply::tool_call("lookup", json!({"q": "answer"})).usage(120, 12),
        ),
    ]
}

async fn two_provider_harness(script: Script) -> Result<Harness, Box<dyn std::error::Error>> {
    let server = FakeLlmServer::start(script).await?;
    let llm = LlmRegistry::from_configs([
        provider_config(&server, "primary", Wire::OpenAi, &["p-key"]),
        provider_config(&server, "backup", Wire::Anthropic, &["b-key"]),
    ])?;
    harness_with(server, llm, Setup::default())
}

fn chained_seat() -> SeatProfile {
    let mut s = seat("eng");
    s.llm = RoleLlm::chain(["primary", "backup"]);
    s
}

#[tokio::test]
async fn server_errors_on_the_whole_chain_are_llm_unavailable() -> TestResult {
    let h = two_provider_harness(Script::new().on(When::any(), Reply::status(503))).await?;
    let o = h.engine.run_turn(&chained_seat(), &trigger("task-x")).await;
    assert_eq!(o.decision, TurnDecision::Failed);
    assert_eq!(
        o.failure.as_ref().map(|f| &f.reason),
        Some(&FailureReason::LlmUnavailable { phase: Phase::Plan })
    );
    let fallback = h.sink.of_type(&EventType::ProviderFallback);
    assert_eq!(fallback.len(), 1);
    assert_eq!(fallback[0].payload["from"], "primary");
    assert_eq!(fallback[0].payload["to"], "backup");
    assert_eq!(fallback[0].payload["phase"], "plan");
    assert_eq!(fallback[0].payload["error_class"], "server");
    let unavailable = h.sink.of_type(&EventType::LlmUnavailable);
    assert_eq!(unavailable.len(), 1);
    assert_eq!(
        unavailable[0].payload["providers"],
        json!(["primary", "backup"])
    );
    assert_eq!(unavailable[0].payload["phase"], "plan");
    let failed = h.sink.of_type(&EventType::TaskFailed);
    assert_eq!(failed[0].payload["reason"], "llm_unavailable");
    // no model answered
    assert!(o.models.is_empty(), "{:?}", o.models);
    assert!(h.sink.of_type(&EventType::TurnGuardBreach).is_empty());
    let wires: Vec<Wire> = h.server.requests().iter().map(|r| r.wire).collect();
    assert_eq!(wires, [Wire::OpenAi, Wire::Anthropic]);
    Ok(())
}

#[tokio::test]
async fn a_failing_provider_restarts_the_phase_on_the_next() -> TestResult {
    let mut script = Script::new().on(When::any().and_wire(Wire::OpenAi), Reply::status(500));
    for (when, reply) in standard_rules() {
        script = script.on(when, reply);
    }
    let h = two_provider_harness(script).await?;
    let o = h.engine.run_turn(&chained_seat(), &trigger("task-f")).await;
    assert_eq!(o.decision, TurnDecision::Done, "{:?}", o.failure);
    // every phase first tried primary, then ran whole on backup
    assert_eq!(h.sink.of_type(&EventType::ProviderFallback).len(), 3);
    assert!(o.phases.iter().all(|p| p.provider == "backup"));
    assert_eq!(o.models, ["claude-fake"]);
    assert_eq!(o.usage, usage(450, 57));
    Ok(())
}

/// Every provider of `llm` behind a guard whose breaker opens after one
/// failure.
fn guarded(llm: LlmRegistry) -> LlmRegistry {
    llm.map(|p| {
        let options = GuardOptions::default().breaker(BreakerSettings {
            failures: 1,
            ..BreakerSettings::default()
        });
        Arc::new(GuardedProvider::new(p, options)) as Arc<dyn LlmProvider>
    })
}

#[tokio::test]
async fn an_open_circuit_hands_every_phase_to_the_next_provider_at_once() -> TestResult {
    let mut script = Script::new().on(When::any().and_wire(Wire::OpenAi), Reply::status(500));
    for (when, reply) in standard_rules() {
        script = script.on(when, reply);
    }
    let server = FakeLlmServer::start(script).await?;
    let llm = guarded(LlmRegistry::from_configs([
        provider_config(&server, "primary", Wire::OpenAi, &["p-key"]),
        provider_config(&server, "backup", Wire::Anthropic, &["b-key"]),
    ])?);
    let h = harness_with(server, llm, Setup::default())?;
    let o = h.engine.run_turn(&chained_seat(), &trigger("task-c")).await;
    assert_eq!(o.decision, TurnDecision::Done, "{:?}", o.failure);
    // Plan's failure opened primary's circuit: Execute and Review never
    // called it, they fell back at once.
    let classes: Vec<Value> = h
        .sink
        .of_type(&EventType::ProviderFallback)
        .iter()
        .map(|e| e.payload["error_class"].clone())
        .collect();
    assert_eq!(classes, ["server", "circuit_open", "circuit_open"]);
    let to_primary = h
        .server
        .requests()
        .iter()
        .filter(|r| r.wire == Wire::OpenAi)
        .count();
    assert_eq!(to_primary, 1);
    assert!(o.phases.iter().all(|p| p.provider == "backup"));
    Ok(())
}

#[tokio::test]
async fn a_rate_limit_waits_for_the_reset_and_the_turn_succeeds() -> TestResult {
    // The first call is refused with `Retry-After: 1`; everything after answers.
    let mut script = Script::new().on(When::any(), Reply::rate_limited(1).times(1));
    for (when, reply) in standard_rules() {
        script = script.on(when, reply);
    }
    let server = FakeLlmServer::start(script).await?;
    let llm = guarded(LlmRegistry::from_configs([provider_config(
        &server,
        "main",
        Wire::OpenAi,
        &["key-a"],
    )])?);
    let h = harness_with(server, llm, Setup::default())?;
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-r")).await;
    assert_eq!(o.decision, TurnDecision::Done, "{:?}", o.failure);
    assert_eq!(o.usage, usage(450, 57));
    let rules: Vec<Option<usize>> = h.server.requests().iter().map(|r| r.rule).collect();
    assert_eq!(rules.first(), Some(&Some(0)), "the first call was refused");
    assert_eq!(rules.len(), 5, "then plan, two execute rounds and review");
    assert!(h.sink.of_type(&EventType::ProviderFallback).is_empty());
    assert!(h.sink.of_type(&EventType::LlmUnavailable).is_empty());
    Ok(())
}

#[tokio::test]
async fn a_budget_without_room_for_the_call_refuses_it_before_it_is_made() -> TestResult {
    // 300 tokens cannot hold the plan call's prompt: the call is never
    // sent, so nothing is billed that the ledger does not know of.
    let setup = Setup {
        org_budget: 300,
        ..Setup::default()
    };
    let h = harness(standard_script(), setup).await?;
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-b")).await;
    assert_eq!(o.decision, TurnDecision::Failed);
    let exhausted = h.sink.of_type(&EventType::BudgetExhausted);
    assert_eq!(exhausted.len(), 1);
    assert_eq!(
        exhausted[0].payload,
        json!({"budget_type": "org", "used_tokens": 0, "max_tokens": 300})
    );
    assert!(matches!(
        o.failure.as_ref().map(|f| &f.reason),
        Some(FailureReason::BudgetExhausted(r)) if r.used_tokens == 0
    ));
    let failed = h.sink.of_type(&EventType::TaskFailed);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].payload["reason"], "budget_exhausted");
    assert_eq!(h.server.request_count(), 0, "no call was made");
    assert_eq!(h.ledger.charged.load(Ordering::SeqCst), 0);
    assert_eq!(o.usage.total(), 0);
    Ok(())
}

#[tokio::test]
async fn a_nearly_spent_budget_asks_for_less_output_and_is_never_passed() -> TestResult {
    const CAP: u64 = 1_000_000;
    let setup = Setup {
        org_budget: CAP,
        ..Setup::default()
    };
    let h = harness(standard_script(), setup).await?;
    // Leave 6,000 tokens: room for a prompt, not for a full 8,192 output.
    let pre = BudgetCharge::new(seat("eng").agent_id, "eng", CAP - 6_000, CAP, 0);
    assert_eq!(h.ledger.charge(&pre).await?, ChargeOutcome::Charged);
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-n")).await;
    let requests = h.server.requests();
    assert!(!requests.is_empty(), "the plan call fits the room");
    let asked = requests[0].body["max_tokens"]
        .as_u64()
        .or_else(|| requests[0].body["max_completion_tokens"].as_u64());
    assert!(
        asked.is_some_and(|m| (64..6_000).contains(&m)),
        "the first call's output cap shrank to the room: {asked:?}"
    );
    let used = h
        .ledger
        .budgets()
        .await?
        .into_iter()
        .find(|r| r.scope == "org")
        .map(|r| (r.used_tokens, r.reserved_tokens));
    assert_eq!(used.map(|u| u.1), Some(0), "every hold ended");
    assert!(
        used.is_some_and(|u| u.0 <= CAP),
        "never past the cap: {used:?}"
    );
    assert_eq!(
        used.map(|u| u.0),
        Some(CAP - 6_000 + o.usage.total()),
        "every completion the turn paid for is charged"
    );
    Ok(())
}

#[tokio::test]
async fn agent_budget_refusal_names_the_agent_budget() -> TestResult {
    let h = harness(standard_script(), Setup::default()).await?;
    let mut s = seat("eng");
    s.token_budget = 100;
    let o = h.engine.run_turn(&s, &trigger("task-ab")).await;
    assert_eq!(o.decision, TurnDecision::Failed);
    let exhausted = h.sink.of_type(&EventType::BudgetExhausted);
    assert_eq!(
        exhausted[0].payload,
        json!({"budget_type": "agent", "used_tokens": 0, "max_tokens": 100})
    );
    assert_eq!(h.ledger.charged.load(Ordering::SeqCst), 0);
    Ok(())
}

#[tokio::test]
async fn sixteen_concurrent_turns_never_overspend_the_org_budget() -> TestResult {
    const CAP: u64 = 5_000;
    let setup = Setup {
        org_budget: CAP,
        ..Setup::default()
    };
    let h = Arc::new(harness(standard_script(), setup).await?);
    let mut handles = Vec::new();
    for i in 0..16 {
        let h = h.clone();
        handles.push(tokio::spawn(async move {
            let s = seat(&format!("eng-{i}"));
            h.engine.run_turn(&s, &trigger(&format!("task-{i}"))).await
        }));
    }
    let mut outcomes = Vec::new();
    for handle in handles {
        outcomes.push(handle.await?);
    }
    let done = outcomes
        .iter()
        .filter(|o| o.decision == TurnDecision::Done)
        .count();
    let failed: Vec<&TurnOutcome> = outcomes.iter().filter(|o| !o.succeeded()).collect();
    assert_eq!(done + failed.len(), 16);
    assert!(!failed.is_empty(), "16 x 507 tokens cannot fit in {CAP}");
    assert!(failed.iter().all(|o| matches!(
        o.failure.as_ref().map(|f| &f.reason),
        Some(FailureReason::BudgetExhausted(_))
    )));
    let charged = h.ledger.charged.load(Ordering::SeqCst);
    assert!(charged <= CAP, "charged {charged} > {CAP}");
    let org = h
        .ledger
        .budgets()
        .await?
        .into_iter()
        .find(|r| r.scope == "org")
        .ok_or("no org row")?;
    assert_eq!(org.used_tokens, charged);
    assert_eq!(
        h.sink.of_type(&EventType::BudgetExhausted).len(),
        failed.len()
    );
    // lifetime usage is exactly what was charged
    let recorded: u64 = h.ledger.usage().await?.iter().map(|r| r.tokens_used).sum();
    assert_eq!(recorded, charged);
    Ok(())
}

#[tokio::test]
async fn read_only_calls_in_one_round_run_concurrently() -> TestResult {
    let script = Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call("submit_plan", plan_args("direct", &["rendezvous"])),
        )
        .on(When::after_tool_result(), Reply::text("both met"))
        .on(
            When::tool_offered("rendezvous"),
            Reply::tool_calls([("rendezvous", json!({})), ("rendezvous", json!({}))]),
        );
    let h = harness(script, Setup::default()).await?;
    h.engine.tools().register(
        Arc::new(Rendezvous(tokio::sync::Barrier::new(2))),
        Visibility::All,
    )?;
    // run one after the other, the first call would wait forever for its twin
    let o = tokio::time::timeout(
        Duration::from_secs(20),
        h.engine.run_turn(&seat("eng"), &trigger("task-c")),
    )
    .await?;
    assert_eq!(o.decision, TurnDecision::Direct, "{:?}", o.failure);
    assert_eq!(o.final_artifact, "both met");
    Ok(())
}

#[tokio::test]
async fn tool_results_are_cleaned_before_the_model_sees_them() -> TestResult {
    let setup = Setup {
        lookup_answer: Some(
            "\x1b[1mtoken\x1b[0m: sk-live-abcdefghijklmnopqrstuvwx\u{0007} and AKIAIOSFODNN7EXAMPLE"
                .into(),
        ),
        ..Setup::default()
    };
    let h = harness(standard_script(), setup).await?;
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-sec")).await;
    assert_eq!(o.decision, TurnDecision::Done, "{:?}", o.failure);
    let seen = h.server.requests()[2].body["messages"][3]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        seen,
        "token: [redacted api key] and [redacted aws access key]"
    );
    Ok(())
}

#[tokio::test]
async fn streamed_anthropic_turn_reports_progress_and_exact_tokens() -> TestResult {
    let setup = Setup {
        anthropic: true,
        settings: TurnSettings {
            stream: true,
            ..TurnSettings::default()
        },
        ..Setup::default()
    };
    let mut script = Script::new();
    for (when, reply) in standard_rules() {
        script = script.on(when, reply.cache_read(30));
    }
    let h = harness(script, setup).await?;
    let o = h.engine.run_turn(&seat("eng"), &trigger("task-st")).await;
    assert_eq!(o.decision, TurnDecision::Done, "{:?}", o.failure);
    assert_eq!(
        o.usage,
        Usage {
            input_tokens: 450,
            output_tokens: 57,
            cache_read_tokens: 120
        }
    );
    assert!(h.server.requests().iter().all(|r| r.stream));
    let progress = h.sink.of_type(&EventType::AgentTurnProgress);
    assert!(
        progress
            .iter()
            .any(|e| e.payload["response"] == "The answer is 42"),
        "{:?}",
        progress.iter().map(|e| &e.payload).collect::<Vec<_>>()
    );
    let plan = &h.sink.of_type(&EventType::AgentPhaseCompleted)[0];
    assert_eq!(payload_u64(plan, "cache_read_tokens"), 30);
    // the stable system block and the last tool carry cache breakpoints
    let body = &h.server.requests()[0].body;
    assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
    assert!(body["system"][1].get("cache_control").is_none());
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        tools.last().map(|t| t["cache_control"]["type"].clone()),
        Some(json!("ephemeral"))
    );
    Ok(())
}
