//! One round's tool calls: which tools are offered, whether each call may
//! run, and running it (in a `tool {name}` span, panics caught, results
//! cleaned).

use std::collections::{BTreeSet, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use serde_json::Value;
use tracing::Instrument;

use crewlet_llm::ToolCall;

use super::{LoopEnv, LoopNotice, Terminator, ToolExecution, ToolSelection, meta};
use crate::journal::{self, StepSource, ToolPlan, ToolResultRecord, ToolStarted};
use crate::sanitize::clean_tool_result;
use crate::skills::{ToolSkills, block_message};
use crate::{Tool, ToolContext, ToolError, TurnError};

pub(super) fn select_tools(
    env: &LoopEnv<'_>,
    selection: &ToolSelection,
    activated: &[String],
) -> Vec<Arc<dyn Tool>> {
    let mut tools = match selection {
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
    };
    for name in activated {
        if !tools.iter().any(|t| t.name() == name)
            && let Some(tool) = env.registry.get_for(&env.ctx.agent_handle, name)
        {
            tools.push(tool);
        }
    }
    tools
}

pub(super) enum Resolved {
    Run(Arc<dyn Tool>, Value),
    /// Answered by the loop itself (its own tools).
    Answer(String),
    /// Not run; the message goes back to the model as an error.
    Refuse(String),
}

/// What the calls of one round are checked against.
pub(super) struct Round<'r> {
    pub offered: HashSet<&'r str>,
    /// Every tool the seat has (for discovery and the skill guard).
    pub seat_tools: &'r [Arc<dyn Tool>],
    /// Skills loaded before this round: a load in the same round does not
    /// count, since the call was written without the skill in view.
    pub loaded: &'r BTreeSet<String>,
    /// The required-skill guard is armed.
    pub guard: Option<&'r ToolSkills>,
    pub discovery: bool,
}

pub(super) fn resolve<D>(
    env: &LoopEnv<'_>,
    terminators: &[Terminator<D>],
    round: &Round<'_>,
    tc: &ToolCall,
    notices: &mut Vec<LoopNotice>,
) -> Resolved {
    let args = match tc.parsed_arguments() {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return Resolved::Refuse("arguments must be a JSON object".into()),
        Err(e) => return Resolved::Refuse(format!("arguments are not valid JSON: {e}")),
    };
    if let Some(t) = terminators.iter().find(|t| t.spec.name == tc.name) {
        let why = (t.parse)(&args).err().unwrap_or_default();
        return Resolved::Refuse(format!(
            "{why}; fix the arguments and call {} again",
            t.spec.name
        ));
    }
    if !round.offered.contains(tc.name.as_str()) {
        if round.discovery {
            if meta::find(round.seat_tools, &tc.name).is_some() {
                return Resolved::Refuse(format!(
                    "`{}` is one of your tools but is not callable in this phase yet: call \
                     {}(name=\"{}\") first",
                    tc.name,
                    meta::ACTIVATE_TOOL,
                    tc.name
                ));
            }
            notices.push(LoopNotice::MissingTool {
                tool: tc.name.clone(),
            });
            return Resolved::Refuse(format!(
                "you have no tool `{}`; {} lists the tools you have",
                tc.name,
                meta::LIST_MCP_SERVER_TOOLS
            ));
        }
        let mut names: Vec<&str> = round.offered.iter().copied().collect();
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
    let Some(tool) = env.registry.get_for(&env.ctx.agent_handle, &tc.name) else {
        return Resolved::Refuse(format!("tool `{}` is no longer available", tc.name));
    };
    if let Some(skills) = round.guard {
        let missing = skills.blocking(tool.as_ref(), round.seat_tools, round.loaded);
        if !missing.is_empty() {
            notices.push(LoopNotice::SkillBlocked {
                tool: tc.name.clone(),
                skills: missing.iter().map(|e| e.key.clone()).collect(),
            });
            return Resolved::Refuse(block_message(&tc.name, &missing));
        }
    }
    Resolved::Run(tool, args)
}

pub(super) struct CallResult {
    pub content: String,
    pub is_error: bool,
    pub terminate: bool,
    /// The tool suspended the turn (its answer comes when the turn runs
    /// again): nothing is recorded for it.
    pub suspend: bool,
    pub execution: Option<ToolExecution>,
}

pub(super) async fn run_one(
    ctx: &ToolContext,
    call_id: &str,
    resolved: Resolved,
) -> Result<CallResult, TurnError> {
    let (tool, args) = match resolved {
        Resolved::Run(tool, args) => (tool, args),
        Resolved::Answer(content) => {
            return Ok(CallResult {
                content,
                is_error: false,
                terminate: false,
                suspend: false,
                execution: None,
            });
        }
        Resolved::Refuse(message) => {
            return Ok(CallResult {
                content: format!("error: {message}"),
                is_error: true,
                terminate: false,
                suspend: false,
                execution: None,
            });
        }
    };
    let span = crewlet_telemetry::tool_span(tool.name());
    let started = Instant::now();
    let outcome = crate::tool::with_call_id(
        call_id.to_owned(),
        AssertUnwindSafe(tool.invoke(ctx, args)).catch_unwind(),
    )
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
    let mut suspend = false;
    let (content, is_error, terminate) = match result {
        Ok(out) => match clean_tool_result(&out.content) {
            Ok(text) => {
                suspend = out.suspend;
                (text, false, out.terminate)
            }
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
        suspend,
        execution: Some(ToolExecution {
            name,
            ok: !is_error,
            duration_ms,
        }),
    })
}

/// Runs one resolved call the way the journal planned it (see
/// [`crate::journal`]); without a plan, as it is.
pub(super) async fn run_planned(
    env: &LoopEnv<'_>,
    tc: &ToolCall,
    resolved: Resolved,
    plan: Option<ToolPlan>,
) -> Result<CallResult, TurnError> {
    let (Some(plan), Some(journal)) = (plan, env.journal) else {
        return run_one(env.ctx, &tc.id, resolved).await;
    };
    let (args, read_only) = match &resolved {
        Resolved::Run(tool, args) => (args.clone(), tool.annotations().read_only),
        _ => (Value::Null, false),
    };
    let (step, record, source) = match plan {
        ToolPlan::Recorded(r) => return Ok(recorded(r)),
        ToolPlan::Uncertain(step) => {
            if let Some(observer) = env.progress {
                observer
                    .notice(LoopNotice::EffectUncertain {
                        tool: tc.name.clone(),
                        step,
                    })
                    .await;
            }
            (
                step,
                journal::uncertain_result(&tc.id, &tc.name),
                StepSource::Uncertain,
            )
        }
        ToolPlan::DryRun(step) => (
            step,
            journal::dry_run_result(&tc.id, &tc.name),
            StepSource::DryRun,
        ),
        ToolPlan::Run(step) => {
            journal
                .tool_started(
                    step,
                    &ToolStarted {
                        call_id: tc.id.clone(),
                        name: tc.name.clone(),
                        arguments: args.clone(),
                        read_only,
                    },
                )
                .await?;
            let result = run_one(env.ctx, &tc.id, resolved).await?;
            if result.suspend {
                // No result yet: the turn runs again from here once the
                // work is done, and this call answers then.
                return Ok(result);
            }
            let record = ToolResultRecord {
                call_id: tc.id.clone(),
                name: tc.name.clone(),
                content: result.content.clone(),
                is_error: result.is_error,
                terminate: result.terminate,
                duration_ms: result.execution.as_ref().map_or(0, |e| e.duration_ms),
                uncertain: false,
            };
            journal
                .tool_result(step, &record, &args, StepSource::Live)
                .await?;
            return Ok(result);
        }
    };
    journal.tool_result(step, &record, &args, source).await?;
    Ok(recorded(record))
}

/// A journaled result as the loop's call result.
fn recorded(r: ToolResultRecord) -> CallResult {
    CallResult {
        execution: Some(ToolExecution {
            name: r.name,
            ok: !r.is_error,
            duration_ms: r.duration_ms,
        }),
        content: r.content,
        is_error: r.is_error,
        terminate: r.terminate,
        suspend: false,
    }
}

/// A count as a span field (`u64` fields are exported as strings).
pub(crate) fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) fn i64_of_duration(d: Duration) -> i64 {
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
