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
        meta: super::MetaTools::NONE,
        system: vec![SystemBlock::stable("s")],
        messages: vec![Message::user("go")],
        tools: ToolSelection::All,
        slim_tools: false,
        terminators: Vec::new(),
        tool_choice: ToolChoice::Auto,
        round_cap: cap,
        grace_round: grace,
        require_first_call: false,
    }
}

/// `echo` only.
async fn run(
    provider: &ScriptedProvider,
    req: LoopRequest,
) -> (Result<LoopOutcome, TurnError>, LoopStats) {
    run_with(provider, req, None, None).await
}

/// A tool of the MCP server `gh` (registered as `gh__merge`).
struct Merge;

#[async_trait]
impl Tool for Merge {
    fn name(&self) -> &str {
        "gh__merge"
    }
    fn description(&self) -> &str {
        "Merges a pull request. Irreversible."
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn mcp_origin(&self) -> Option<(&str, &str)> {
        Some(("gh", "merge"))
    }
    async fn invoke(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::text("merged"))
    }
}

#[derive(Default)]
struct Notices(Mutex<Vec<LoopNotice>>);

#[async_trait]
impl ProgressObserver for Notices {
    async fn progress(&self, _: &str, _: &[ToolExecution]) {}
    async fn notice(&self, notice: LoopNotice) {
        if let Ok(mut n) = self.0.lock() {
            n.push(notice);
        }
    }
}

/// `echo`, plus `gh__merge` when `skills` are given.
async fn run_with(
    provider: &ScriptedProvider,
    req: LoopRequest,
    skills: Option<&crate::ToolSkills>,
    observer: Option<&dyn ProgressObserver>,
) -> (Result<LoopOutcome, TurnError>, LoopStats) {
    let registry = ToolRegistry::new();
    let _ = registry.register(Arc::new(Echo), Visibility::All);
    if skills.is_some() {
        let _ = registry.register(Arc::new(Merge), Visibility::All);
    }
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
    let limits = BudgetLimits::default();
    let env = LoopEnv {
        provider,
        registry: &registry,
        skills,
        ctx: &ctx,
        budget: BudgetGate {
            ledger: &ledger,
            tracker: &tracker,
            agent_id,
            agent_handle: "a",
            limits: &limits,
            turn_usage: None,
            warnings: None,
            patience: crewlet_store::Patience::at_most(std::time::Duration::ZERO),
        },
        progress: observer,
        stream: false,
        journal: None,
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

fn merge_skill(required: bool) -> crate::ToolSkill {
    match crate::ToolSkill::from_parts(
        json!({"key": "mcp:gh", "trigger": {"mcp_server": "gh"}, "phases": ["execute"],
               "title": "Merging", "summary": "Check CI first.", "required": required}),
        "Merge only green pull requests.",
        "test",
    ) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn a_required_skill_holds_its_tools_back_until_it_is_loaded() -> Result<(), TurnError> {
    let skills = crate::ToolSkills::new();
    skills.upsert(merge_skill(true));
    let p = answers(vec![
        // the load in the same round does not unlock the call beside it
        calls(&[
            ("gh__merge", "{}"),
            ("load_tool_skill", r#"{"key":"mcp:gh"}"#),
        ]),
        calls(&[("load_tool_skill", r#"{"key":"nope"}"#), ("echo", "{}")]),
        calls(&[("gh__merge", "{}")]),
        text("done"),
    ]);
    let notices = Notices::default();
    let mut req = request(5, false);
    req.meta = MetaTools {
        load_skills: true,
        discovery: false,
    };
    let (out, stats) = run_with(&p, req, Some(&skills), Some(&notices)).await;
    let results = tool_results(&out?);
    assert!(results[0].1, "{results:?}");
    assert!(
        results[0].0.contains("load_tool_skill(key=\"mcp:gh\")"),
        "{results:?}"
    );
    assert_eq!(
        results[1],
        (
            "# Merging\n\nMerge only green pull requests.".to_owned(),
            false
        )
    );
    assert!(results[2].1 && results[2].0.contains("the skills are: mcp:gh"));
    assert_eq!(results[4], ("merged".to_owned(), false), "{results:?}");
    // meta calls are not tool executions: echo and the one merge that ran
    assert_eq!(stats.tool_executions.len(), 2);
    let seen = notices.0.lock().map(|n| n.clone()).unwrap_or_default();
    assert_eq!(
        seen,
        [LoopNotice::SkillBlocked {
            tool: "gh__merge".into(),
            skills: vec!["mcp:gh".into()]
        }]
    );
    // an advisory skill never blocks; without the loader nothing is guarded
    skills.upsert(merge_skill(false));
    let p = answers(vec![calls(&[("gh__merge", "{}")]), text("done")]);
    let mut req = request(5, false);
    req.meta = MetaTools {
        load_skills: true,
        discovery: false,
    };
    let (out, _) = run_with(&p, req, Some(&skills), None).await;
    assert_eq!(tool_results(&out?)[0], ("merged".to_owned(), false));
    skills.upsert(merge_skill(true));
    let p = answers(vec![calls(&[("gh__merge", "{}")]), text("done")]);
    let (out, _) = run_with(&p, request(5, false), Some(&skills), None).await;
    assert_eq!(tool_results(&out?)[0], ("merged".to_owned(), false));
    Ok(())
}

#[tokio::test]
async fn execute_discovers_and_activates_a_tool_the_plan_missed() -> Result<(), TurnError> {
    let skills = crate::ToolSkills::new();
    let p = answers(vec![
        calls(&[("gh__merge", "{}"), ("gh__nuke", "{}")]),
        calls(&[
            ("list_mcp_server_tools", "{}"),
            ("list_mcp_server_tools", r#"{"server":"gh"}"#),
            ("activate_tool", r#"{"name":"merge"}"#),
        ]),
        calls(&[("gh__merge", "{}"), ("activate_tool", r#"{"name":"echo"}"#)]),
        text("done"),
    ]);
    let notices = Notices::default();
    let mut req = request(5, false);
    req.tools = ToolSelection::Named(vec!["echo".into()]);
    req.meta = MetaTools {
        load_skills: true,
        discovery: true,
    };
    let (out, _) = run_with(&p, req, Some(&skills), Some(&notices)).await;
    let results = tool_results(&out?);
    assert!(results[0].1 && results[0].0.contains("activate_tool(name=\"gh__merge\")"));
    assert!(results[1].1 && results[1].0.contains("you have no tool `gh__nuke`"));
    assert!(
        results[2]
            .0
            .contains("- builtin: 1 tool(s)\n- gh: 1 tool(s)"),
        "{results:?}"
    );
    assert!(
        results[3].0.contains("- gh__merge: Merges a pull request."),
        "{results:?}"
    );
    assert_eq!(
        results[4],
        (
            "`gh__merge` is callable from your next round on.".to_owned(),
            false
        )
    );
    assert_eq!(results[5], ("merged".to_owned(), false));
    assert_eq!(results[6].0, "`echo` is already callable.");
    let seen = notices.0.lock().map(|n| n.clone()).unwrap_or_default();
    assert_eq!(
        seen,
        [
            LoopNotice::MissingTool {
                tool: "gh__nuke".into()
            },
            LoopNotice::ToolActivated {
                tool: "gh__merge".into()
            }
        ]
    );
    Ok(())
}
