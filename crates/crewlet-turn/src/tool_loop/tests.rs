//! Tests of the tool loop.

use std::collections::VecDeque;
use std::sync::Mutex;

use crewlet_core::{AgentId, TraceContext};
use crewlet_llm::{LlmError, ScriptedProvider, ToolCall};
use crewlet_store::MemoryTokenLedger;
use serde_json::json;
use uuid::Uuid;

use super::*;
use crate::{BudgetLimits, ToolAnnotations, ToolError, ToolOutput, UsageTracker, Visibility};

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
        if args.get("fail").is_some() {
            return Err(ToolError::Failed("asked to fail".into()));
        }
        Ok(ToolOutput::text(args.to_string()))
    }
}

fn answers(list: Vec<Completion>) -> ScriptedProvider {
    let queue = Mutex::new(VecDeque::from(list));
    ScriptedProvider::new("s", "m", move |_| {
        queue
            .lock()
            .ok()
            .and_then(|mut q| q.pop_front())
            .ok_or(LlmError::ScriptExhausted {
                provider: "s".into(),
            })
    })
}

fn calls(calls: &[(&str, &str)]) -> Completion {
    Completion {
        tool_calls: calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| ToolCall {
                id: format!("c{i}"),
                name: (*name).into(),
                arguments: (*args).into(),
            })
            .collect(),
        usage: Usage {
            input_tokens: 10,
            output_tokens: 1,
            cache_read_tokens: 0,
        },
        ..Completion::default()
    }
}

fn text(t: &str) -> Completion {
    Completion {
        content: t.into(),
        ..Completion::default()
    }
}

fn request(cap: u32, grace: bool) -> LoopRequest {
    LoopRequest {
        system: vec![SystemBlock::stable("s")],
        messages: vec![Message::user("go")],
        tools: ToolSelection::All,
        slim_tools: false,
        terminators: Vec::new(),
        tool_choice: ToolChoice::Auto,
        round_cap: cap,
        grace_round: grace,
    }
}

async fn run(
    provider: &ScriptedProvider,
    req: LoopRequest,
) -> (Result<LoopOutcome, TurnError>, LoopStats) {
    let registry = ToolRegistry::new();
    let _ = registry.register(Arc::new(Echo), Visibility::All);
    let ledger = MemoryTokenLedger::new();
    let tracker = UsageTracker::new();
    let agent_id = AgentId::for_seat("T", "a");
    let ctx = ToolContext {
        agent_id,
        agent_handle: "a".into(),
        role_name: "A".into(),
        task_id: "t".into(),
        turn_id: Uuid::now_v7(),
        phase: crewlet_llm::Phase::Execute,
        iteration: 1,
        delegation_depth: 0,
        delegation_chain: Vec::new(),
        trace: TraceContext::new_root(),
    };
    let env = LoopEnv {
        provider,
        registry: &registry,
        ctx: &ctx,
        budget: BudgetGate {
            ledger: &ledger,
            tracker: &tracker,
            agent_id,
            agent_handle: "a",
            limits: BudgetLimits::default(),
            turn_usage: None,
            patience: crewlet_store::Patience::at_most(std::time::Duration::ZERO),
        },
        progress: None,
        stream: false,
    };
    let mut stats = LoopStats::default();
    let out = run_tool_loop(&env, req, &mut stats).await;
    (out, stats)
}

fn tool_results(o: &LoopOutcome) -> Vec<(String, bool)> {
    o.messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn bad_calls_are_answered_with_errors_and_the_loop_goes_on() -> Result<(), TurnError> {
    let p = answers(vec![
        calls(&[
            ("echo", r#"{"x":1}"#),
            ("nope", "{}"),
            ("echo", "not json"),
            ("echo", "[1]"),
            ("echo", r#"{"fail":true}"#),
        ]),
        text("done"),
    ]);
    let (out, stats) = run(&p, request(5, false)).await;
    let out = out?;
    assert_eq!(out.end, LoopEnd::Reply);
    assert_eq!(out.text, "done");
    let results = tool_results(&out);
    assert_eq!(results[0], (r#"{"x":1}"#.to_owned(), false));
    assert!(
        results[1]
            .0
            .contains("`nope` is not available here; available: echo")
    );
    assert!(results[2].0.contains("not valid JSON"));
    assert!(results[3].0.contains("must be a JSON object"));
    assert_eq!(results[4], ("error: asked to fail".to_owned(), true));
    assert!(results[1..].iter().all(|(_, err)| *err));
    // only the calls that reached a tool count as executions
    assert_eq!(stats.tool_executions.len(), 2);
    assert_eq!(stats.calls, 2);
    Ok(())
}

#[tokio::test]
async fn round_cap_then_one_grace_round_without_tools() -> Result<(), TurnError> {
    let p = answers(vec![
        calls(&[("echo", "{}")]),
        calls(&[("echo", "{}")]),
        text("summary of the work"),
    ]);
    let (out, stats) = run(&p, request(2, true)).await;
    let out = out?;
    assert_eq!(out.end, LoopEnd::RoundCap);
    assert_eq!(out.text, "summary of the work");
    assert_eq!((stats.calls, stats.rounds), (3, 3));
    assert!(
        out.messages
            .iter()
            .any(|m| matches!(m, Message::User { content } if content == prompts::GRACE))
    );
    // without the grace round the loop just stops
    let p = answers(vec![calls(&[("echo", "{}")])]);
    let (out, stats) = run(&p, request(1, false)).await;
    assert_eq!(out?.end, LoopEnd::RoundCap);
    assert_eq!(stats.calls, 1);
    Ok(())
}

#[tokio::test]
async fn too_many_calls_in_one_round_are_refused_past_the_cap() -> Result<(), TurnError> {
    let many: Vec<(&str, &str)> = vec![("echo", "{}"); MAX_CALLS_PER_ROUND + 3];
    let p = answers(vec![calls(&many), text("ok")]);
    let (out, stats) = run(&p, request(3, false)).await;
    let results = tool_results(&out?);
    assert_eq!(results.len(), MAX_CALLS_PER_ROUND + 3);
    assert_eq!(results.iter().filter(|(_, e)| *e).count(), 3);
    assert_eq!(stats.tool_executions.len(), MAX_CALLS_PER_ROUND);
    Ok(())
}

#[tokio::test]
async fn a_terminator_with_bad_arguments_is_sent_back() -> Result<(), TurnError> {
    fn needs_x(v: &Value) -> Result<(), String> {
        v.get("x")
            .map(|_| ())
            .ok_or_else(|| "x is required".to_owned())
    }
    let p = answers(vec![
        calls(&[("finish", "{}")]),
        calls(&[("finish", r#"{"x":2}"#)]),
    ]);
    let mut req = request(5, false);
    req.terminators = vec![Terminator {
        spec: ToolSpec {
            name: "finish".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        },
        parse: needs_x,
    }];
    let (out, _) = run(&p, req).await;
    let out = out?;
    assert_eq!(
        out.end,
        LoopEnd::Terminated {
            tool: "finish".into(),
            arguments: json!({"x": 2})
        }
    );
    let results = tool_results(&out);
    assert_eq!(results.len(), 1);
    assert!(results[0].0.contains("x is required"), "{:?}", results[0]);
    Ok(())
}

#[tokio::test]
async fn a_provider_error_ends_the_loop_with_the_counts_so_far() {
    let p = answers(vec![calls(&[("echo", "{}")])]);
    let (out, stats) = run(&p, request(5, false)).await;
    assert!(matches!(
        out,
        Err(TurnError::Llm(LlmError::ScriptExhausted { .. }))
    ));
    assert_eq!(stats.calls, 1);
    assert_eq!(stats.usage.total(), 11);
}
