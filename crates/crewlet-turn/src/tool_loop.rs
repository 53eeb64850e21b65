//! The loop every phase runs: each round refreshes the tools, asks the model,
//! charges the budget, runs the tool calls it asked for and appends the
//! results. It ends on a reply without tool calls, a terminating tool, or the
//! round cap (then, if asked, one grace round without tools summarizes).

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use serde::Serialize;
use serde_json::Value;
use tracing::Instrument;

use crewlet_llm::{
    Completion, CompletionRequest, LlmError, LlmProvider, Message, StreamEvent, SystemBlock,
    ToolCall, ToolChoice, ToolSpec, Usage,
};

use crate::sanitize::clean_tool_result;
use crate::{
    BudgetGate, Tool, ToolContext, ToolError, ToolRegistry, TurnError, prompts, slim_tool_spec,
    tool_spec,
};

/// Least time between two progress reports while text streams in.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

/// Most tool calls run in one round; the rest are answered with an error.
pub const MAX_CALLS_PER_ROUND: usize = 32;

/// One tool call as it ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolExecution {
    pub name: String,
    pub ok: bool,
    pub duration_ms: u64,
}

/// Which registry tools a phase offers (besides its terminators).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolSelection {
    None,
    /// Every tool the role sees.
    All,
    /// The role's read-only tools.
    ReadOnly,
    /// These tools, if the role sees them.
    Named(Vec<String>),
}

/// A tool that ends the loop when called with valid arguments, such as
/// `submit_plan`. Invalid arguments go back to the model as an error.
#[derive(Clone, Debug)]
pub struct Terminator {
    pub spec: ToolSpec,
    pub validate: fn(&Value) -> Result<(), String>,
}

/// What the loop is asked to do.
#[derive(Clone, Debug)]
pub struct LoopRequest {
    pub system: Vec<SystemBlock>,
    pub messages: Vec<Message>,
    pub tools: ToolSelection,
    /// Offer first-sentence descriptions only (Plan's slim catalogue).
    pub slim_tools: bool,
    pub terminators: Vec<Terminator>,
    pub tool_choice: ToolChoice,
    pub round_cap: u32,
    /// After the cap, one more round without tools to summarize.
    pub grace_round: bool,
}

/// Told what a streaming call has produced so far.
#[async_trait]
pub trait ProgressObserver: Send + Sync {
    async fn progress(&self, text: &str, tool_executions: &[ToolExecution]);
}

/// What the loop works with.
pub struct LoopEnv<'a> {
    pub provider: &'a dyn LlmProvider,
    pub registry: &'a ToolRegistry,
    pub ctx: &'a ToolContext,
    pub budget: BudgetGate<'a>,
    pub progress: Option<&'a dyn ProgressObserver>,
    /// Use the provider's streaming call (for live progress).
    pub stream: bool,
}

/// Counters a phase accumulates over its loops, kept even when a loop fails.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoopStats {
    pub usage: Usage,
    pub calls: u32,
    pub rounds: u32,
    pub tool_executions: Vec<ToolExecution>,
    /// Models that answered, first use first.
    pub models: Vec<String>,
}

impl LoopStats {
    fn count(&mut self, completion: &Completion) {
        self.usage.add(&completion.usage);
        self.calls += 1;
        if !self.models.contains(&completion.model) {
            self.models.push(completion.model.clone());
        }
    }
}

/// How the loop ended.
#[derive(Clone, Debug, PartialEq)]
pub enum LoopEnd {
    /// The model answered without tool calls.
    Reply,
    /// A terminator or a terminating tool was called.
    Terminated { tool: String, arguments: Value },
    /// The round cap was reached (after the grace round, if any).
    RoundCap,
}

#[derive(Clone, Debug)]
pub struct LoopOutcome {
    pub end: LoopEnd,
    /// The last text the model said.
    pub text: String,
    /// The whole conversation, ready to continue.
    pub messages: Vec<Message>,
}

/// Runs the loop until it ends; see the module doc.
pub async fn run_tool_loop(
    env: &LoopEnv<'_>,
    request: LoopRequest,
    stats: &mut LoopStats,
) -> Result<LoopOutcome, TurnError> {
    let LoopRequest {
        system,
        messages,
        tools,
        slim_tools,
        terminators,
        tool_choice,
        round_cap,
        grace_round,
    } = request;
    let mut call = CompletionRequest {
        system,
        messages,
        ..CompletionRequest::default()
    };
    let mut rounds = 0u32;
    let mut last_text = String::new();
    loop {
        let grace = rounds >= round_cap;
        if grace && !grace_round {
            return Ok(LoopOutcome {
                end: LoopEnd::RoundCap,
                text: last_text,
                messages: call.messages,
            });
        }
        // Refresh: tools may have come or gone since the last round.
        let offered: Vec<Arc<dyn Tool>> = if grace {
            Vec::new()
        } else {
            select_tools(env, &tools)
        };
        call.tools.clear();
        if !grace {
            call.tools
                .extend(terminators.iter().map(|t| t.spec.clone()));
            call.tools.extend(offered.iter().map(|t| {
                if slim_tools {
                    slim_tool_spec(t.as_ref())
                } else {
                    tool_spec(t.as_ref())
                }
            }));
        } else {
            call.messages.push(Message::user(prompts::GRACE));
        }
        call.tool_choice = if call.tools.is_empty() {
            ToolChoice::Auto
        } else {
            tool_choice.clone()
        };

        let completion = complete(env, &call, stats).await?;
        stats.count(&completion);
        env.budget.charge(&completion.usage).await?;
        rounds += 1;
        stats.rounds += 1;

        let Completion {
            content,
            tool_calls,
            ..
        } = completion;
        last_text.clone_from(&content);
        call.messages
            .push(Message::assistant(content, tool_calls.clone()));
        if grace {
            return Ok(LoopOutcome {
                end: LoopEnd::RoundCap,
                text: last_text,
                messages: call.messages,
            });
        }
        if tool_calls.is_empty() {
            return Ok(LoopOutcome {
                end: LoopEnd::Reply,
                text: last_text,
                messages: call.messages,
            });
        }

        // A valid call of a terminator ends the loop at once.
        for tc in &tool_calls {
            if let Some(t) = terminators.iter().find(|t| t.spec.name == tc.name)
                && let Ok(args) = tc.parsed_arguments()
                && (t.validate)(&args).is_ok()
            {
                return Ok(LoopOutcome {
                    end: LoopEnd::Terminated {
                        tool: tc.name.clone(),
                        arguments: args,
                    },
                    text: last_text,
                    messages: call.messages,
                });
            }
        }

        let offered_names: HashSet<&str> = offered.iter().map(|t| t.name()).collect();
        let resolved: Vec<Resolved> = tool_calls
            .iter()
            .enumerate()
            .map(|(i, tc)| {
                if i >= MAX_CALLS_PER_ROUND {
                    Resolved::Refuse(format!(
                        "not run: at most {MAX_CALLS_PER_ROUND} tool calls are run per round"
                    ))
                } else {
                    resolve(env, &terminators, &offered_names, tc)
                }
            })
            .collect();
        let all_read_only = resolved.iter().all(|r| match r {
            Resolved::Run(tool, _) => tool.annotations().read_only,
            Resolved::Refuse(_) => true,
        });
        let results: Vec<CallResult> = if all_read_only && resolved.len() > 1 {
            futures::future::join_all(resolved.into_iter().map(|r| run_one(env.ctx, r)))
                .await
                .into_iter()
                .collect::<Result<_, _>>()?
        } else {
            let mut out = Vec::with_capacity(resolved.len());
            for r in resolved {
                out.push(run_one(env.ctx, r).await?);
            }
            out
        };

        let mut terminated: Option<(String, Value)> = None;
        for (tc, result) in tool_calls.iter().zip(results) {
            if let Some(exec) = result.execution {
                stats.tool_executions.push(exec);
            }
            if result.terminate && terminated.is_none() {
                terminated = Some((
                    tc.name.clone(),
                    tc.parsed_arguments().unwrap_or(Value::Null),
                ));
            }
            call.messages.push(Message::Tool {
                call_id: tc.id.clone(),
                name: tc.name.clone(),
                content: result.content,
                is_error: result.is_error,
            });
        }
        if let Some(observer) = env.progress {
            observer.progress(&last_text, &stats.tool_executions).await;
        }
        if let Some((tool, arguments)) = terminated {
            return Ok(LoopOutcome {
                end: LoopEnd::Terminated { tool, arguments },
                text: last_text,
                messages: call.messages,
            });
        }
    }
}

fn select_tools(env: &LoopEnv<'_>, selection: &ToolSelection) -> Vec<Arc<dyn Tool>> {
    match selection {
        ToolSelection::None => Vec::new(),
        ToolSelection::All => env.registry.tools_for(&env.ctx.agent_handle),
        ToolSelection::ReadOnly => env
            .registry
            .tools_for(&env.ctx.agent_handle)
            .into_iter()
            .filter(|t| t.annotations().read_only)
            .collect(),
        ToolSelection::Named(names) => names
            .iter()
            .filter_map(|n| env.registry.get_for(&env.ctx.agent_handle, n))
            .collect(),
    }
}

/// One completion, in an `llm {model}` span with its token counts.
async fn complete(
    env: &LoopEnv<'_>,
    call: &CompletionRequest,
    stats: &LoopStats,
) -> Result<Completion, TurnError> {
    let span = crewlet_telemetry::llm_span(env.provider.name(), env.provider.model());
    let started = Instant::now();
    let result = complete_in_span(env, call, stats)
        .instrument(span.clone())
        .await;
    if !span.is_disabled() {
        if let Ok(c) = &result {
            span.record("llm_input_tokens", i64_of(c.usage.input_tokens));
            span.record("llm_output_tokens", i64_of(c.usage.output_tokens));
        }
        span.record("duration_ms", i64_of_duration(started.elapsed()));
    }
    result
}

async fn complete_in_span(
    env: &LoopEnv<'_>,
    call: &CompletionRequest,
    stats: &LoopStats,
) -> Result<Completion, TurnError> {
    if !env.stream {
        return Ok(env.provider.complete(call).await?);
    }
    let mut stream = env.provider.stream(call).await?;
    let mut text = String::new();
    let mut last_report = Instant::now();
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::TextDelta(delta) => {
                text.push_str(&delta);
                if let Some(observer) = env.progress
                    && last_report.elapsed() >= PROGRESS_INTERVAL
                {
                    observer.progress(&text, &stats.tool_executions).await;
                    last_report = Instant::now();
                }
            }
            StreamEvent::ToolCallDelta { .. } => {}
            StreamEvent::Completed(completion) => {
                if let Some(observer) = env.progress
                    && !completion.content.is_empty()
                {
                    observer
                        .progress(&completion.content, &stats.tool_executions)
                        .await;
                }
                return Ok(completion);
            }
        }
    }
    Err(TurnError::Llm(LlmError::Decode {
        provider: env.provider.name().to_owned(),
        message: "stream ended without a completion".into(),
    }))
}

enum Resolved {
    Run(Arc<dyn Tool>, Value),
    /// Not run; the message goes back to the model as an error.
    Refuse(String),
}

fn resolve(
    env: &LoopEnv<'_>,
    terminators: &[Terminator],
    offered: &HashSet<&str>,
    tc: &ToolCall,
) -> Resolved {
    let args = match tc.parsed_arguments() {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return Resolved::Refuse("arguments must be a JSON object".into()),
        Err(e) => return Resolved::Refuse(format!("arguments are not valid JSON: {e}")),
    };
    if let Some(t) = terminators.iter().find(|t| t.spec.name == tc.name) {
        let why = (t.validate)(&args).err().unwrap_or_default();
        return Resolved::Refuse(format!(
            "{why}; fix the arguments and call {} again",
            t.spec.name
        ));
    }
    if !offered.contains(tc.name.as_str()) {
        let mut names: Vec<&str> = offered.iter().copied().collect();
        names.sort_unstable();
        return Resolved::Refuse(format!(
            "tool `{}` is not available here; available: {}",
            tc.name,
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        ));
    }
    match env.registry.get_for(&env.ctx.agent_handle, &tc.name) {
        Some(tool) => Resolved::Run(tool, args),
        None => Resolved::Refuse(format!("tool `{}` is no longer available", tc.name)),
    }
}

struct CallResult {
    content: String,
    is_error: bool,
    terminate: bool,
    execution: Option<ToolExecution>,
}

async fn run_one(ctx: &ToolContext, resolved: Resolved) -> Result<CallResult, TurnError> {
    let (tool, args) = match resolved {
        Resolved::Run(tool, args) => (tool, args),
        Resolved::Refuse(message) => {
            return Ok(CallResult {
                content: format!("error: {message}"),
                is_error: true,
                terminate: false,
                execution: None,
            });
        }
    };
    let span = crewlet_telemetry::tool_span(tool.name());
    let started = Instant::now();
    let outcome = AssertUnwindSafe(tool.invoke(ctx, args))
        .catch_unwind()
        .instrument(span.clone())
        .await;
    let elapsed = started.elapsed();
    let duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    span.record("duration_ms", i64_of_duration(elapsed));
    let name = tool.name().to_owned();
    let result = match outcome {
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_owned());
            span.record("error", format!("panicked: {message}").as_str());
            return Err(TurnError::ToolPanicked {
                tool: name,
                message,
            });
        }
        Ok(r) => r,
    };
    let (content, is_error, terminate) = match result {
        Ok(out) => match clean_tool_result(&out.content) {
            Ok(text) => (text, false, out.terminate),
            Err(rejected) => (format!("error: {rejected}"), true, out.terminate),
        },
        Err(e) => {
            let text = match &e {
                ToolError::InvalidArguments(_) | ToolError::Failed(_) => e.to_string(),
            };
            let text = clean_tool_result(&text).unwrap_or_else(|r| r.to_string());
            (format!("error: {text}"), true, false)
        }
    };
    if is_error && !span.is_disabled() {
        span.record("error", error_field(&content));
    }
    Ok(CallResult {
        content,
        is_error,
        terminate,
        execution: Some(ToolExecution {
            name,
            ok: !is_error,
            duration_ms,
        }),
    })
}

/// A count as a span field (`u64` fields are exported as strings).
fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn i64_of_duration(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The start of a failed tool call's answer, for the span's `error` field.
fn error_field(content: &str) -> &str {
    const MAX: usize = 300;
    let content = content.strip_prefix("error: ").unwrap_or(content);
    match content.char_indices().nth(MAX) {
        Some((end, _)) => &content[..end],
        None => content,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use crewlet_core::{AgentId, TraceContext};
    use crewlet_llm::ScriptedProvider;
    use crewlet_store::MemoryTokenLedger;
    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::{BudgetLimits, ToolAnnotations, ToolOutput, UsageTracker, Visibility};

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
            validate: needs_x,
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
}
