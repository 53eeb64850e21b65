//! `spawn_subagent` and `spawn_subagent_batch`: their arguments, and their
//! results as the parent's model reads them.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::batch::{deadline_after, run_batch};
use super::run::{ChildSpec, ChildTask, child_tools, run_child, share};
use super::{Host, SPAWN_SUBAGENT, SPAWN_SUBAGENT_BATCH, Scope, current_scope};
use crate::{Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput};

/// Both spawn tools, to register for the seats that may use them.
pub fn spawn_tools() -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(SpawnSubagent), Arc::new(SpawnSubagentBatch)]
}

/// `spawn_subagent {task_prompt, system_prompt, tool_names?, max_turns?}`
/// (or `{tasks: [...]}`, the batch form the original engine accepts here).
#[derive(Debug, Default, Clone, Copy)]
pub struct SpawnSubagent;

/// `spawn_subagent_batch {tasks: [{task_prompt, system_prompt,
/// max_turns?}], tool_names?}`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SpawnSubagentBatch;

/// Starting workers changes nothing by itself, but what they do is not
/// read-only: Plan and Review (read-only tools) never offer it, and two
/// spawns in one round run one after the other.
fn annotations() -> ToolAnnotations {
    ToolAnnotations {
        read_only: false,
        destructive: false,
        idempotent: false,
        open_world: false,
    }
}

fn tool_names_schema() -> Value {
    json!({
        "type": "array",
        "items": {"type": "string"},
        "description": "Tools the sub-agent may call: a subset of your own. Sub-agents never \
            get spawn_subagent, run_sandbox, the discovery tools, colleague tools or tools \
            that write outside the company. Leave out to give every tool you may share."
    })
}

fn task_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "task_prompt": {"type": "string", "description": "The task, as the sub-agent's first message."},
            "system_prompt": {"type": "string", "description": "How the sub-agent should work (its system prompt)."},
            "max_turns": {"type": "integer", "minimum": 1, "description": "Fewer tool rounds than the configured cap."}
        },
        "required": ["task_prompt", "system_prompt"]
    })
}

/// The host of the running Execute phase, or why a spawn cannot run here.
fn host(tool: &str) -> Result<Arc<Host>, ToolError> {
    match current_scope() {
        Some(Scope::Parent(host)) => Ok(host),
        Some(Scope::Child) => Err(ToolError::Failed(format!(
            "{tool}: a sub-agent cannot start sub-agents; do the work yourself"
        ))),
        None => Err(ToolError::Failed(format!(
            "{tool} only runs inside a turn's Execute phase"
        ))),
    }
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::InvalidArguments(message.into())
}

fn text_field(args: &Value, key: &str, at: &str) -> Result<String, ToolError> {
    match args.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        _ => Err(invalid(format!("{at}{key} must be a non-empty string"))),
    }
}

/// A positive whole number (an integer, a whole float or digits), if given.
fn max_turns(args: &Value, at: &str) -> Result<Option<u32>, ToolError> {
    let n = match args.get("max_turns") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 1e12)
                // A whole float within range: exact.
                .map(|f| {
                    #[allow(clippy::cast_possible_truncation)]
                    let i = f as i64;
                    i
                })
        }),
        Some(Value::String(s)) => s.trim().parse::<i64>().ok(),
        Some(_) => None,
    };
    match n {
        Some(n) if n >= 1 => Ok(Some(u32::try_from(n).unwrap_or(u32::MAX))),
        Some(n) => Err(invalid(format!("{at}max_turns must be >= 1, got {n}"))),
        None => Err(invalid(format!("{at}max_turns must be a positive integer"))),
    }
}

/// `tool_names`: `None` when left out (every tool the parent may share).
fn tool_names(args: &Value) -> Result<Option<Vec<String>>, ToolError> {
    match args.get("tool_names") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| invalid(format!("tool_names entries must be strings; got {v}")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(invalid(format!("tool_names must be a list; got {other}"))),
    }
}

fn single_task(args: &Value) -> Result<ChildTask, ToolError> {
    Ok(ChildTask {
        task_prompt: text_field(args, "task_prompt", "")?,
        system_prompt: text_field(args, "system_prompt", "")?,
        max_turns: max_turns(args, "")?,
    })
}

fn batch_tasks(args: &Value) -> Result<Vec<ChildTask>, ToolError> {
    let Some(Value::Array(items)) = args.get("tasks") else {
        return Err(invalid("tasks must be a non-empty list of tasks"));
    };
    if items.is_empty() {
        return Err(invalid("tasks must not be empty"));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let at = format!("tasks[{i}].");
            if !item.is_object() {
                return Err(invalid(format!("tasks[{i}] must be an object")));
            }
            Ok(ChildTask {
                task_prompt: text_field(item, "task_prompt", &at)?,
                system_prompt: text_field(item, "system_prompt", &at)?,
                max_turns: max_turns(item, &at)?,
            })
        })
        .collect()
}

/// The span the spawn call runs in (its `tool` span), else the phase's.
fn parent_trace(ctx: &ToolContext) -> crewlet_core::TraceContext {
    crewlet_telemetry::current_trace_context().unwrap_or(ctx.trace)
}

/// A batch's results as JSON, in the order of its tasks.
async fn batch(
    host: &Host,
    ctx: &ToolContext,
    tasks: &[ChildTask],
    names: Option<&[String]>,
) -> ToolOutput {
    let (tools, rejected) = child_tools(host, names);
    let results = run_batch(host, tasks, &tools, &rejected, parent_trace(ctx)).await;
    let rendered: Vec<Value> = results
        .iter()
        .enumerate()
        .map(|(index, r)| {
            json!({
                "index": index,
                "subagent_id": r.id,
                "outcome": r.outcome.as_str(),
                "text": r.text,
                "error": r.error,
                "turns_used": r.rounds,
                "tokens_used": r.usage.total(),
                "timed_out": r.outcome == super::ChildOutcome::Timeout,
                "rejected_tools": r.rejected_tools,
                "model": r.model,
            })
        })
        .collect();
    ToolOutput::text(json!({ "results": rendered }).to_string())
}

#[async_trait]
impl Tool for SpawnSubagent {
    fn name(&self) -> &str {
        SPAWN_SUBAGENT
    }

    fn description(&self) -> &str {
        "Starts a short-lived sub-agent for a narrow task (research, reading, a calculation) \
         and returns its final answer. It works from a fresh conversation with only the tools \
         you name (a subset of yours), on a bounded share of your budget, within a time and \
         round limit, and cannot start sub-agents or contact colleagues. For several \
         independent tasks at once use spawn_subagent_batch."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "task_prompt": {"type": "string", "description": "The task, as the sub-agent's first message."},
                "system_prompt": {"type": "string", "description": "How the sub-agent should work; a fixed preamble is added."},
                "tool_names": tool_names_schema(),
                "max_turns": {"type": "integer", "minimum": 1, "description": "Fewer tool rounds than the configured cap (more is clamped)."},
                "tasks": {"type": "array", "items": task_schema(), "description": "Several tasks at once (same as spawn_subagent_batch); not with task_prompt."}
            }
        })
    }

    fn annotations(&self) -> ToolAnnotations {
        annotations()
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let host = host(SPAWN_SUBAGENT)?;
        let names = tool_names(&args)?;
        let has_single = args.get("task_prompt").is_some() || args.get("system_prompt").is_some();
        if args.get("tasks").is_some_and(|t| !t.is_null()) {
            if has_single {
                return Err(invalid(
                    "pass task_prompt and system_prompt (one sub-agent) or tasks (several), not both",
                ));
            }
            let tasks = batch_tasks(&args)?;
            return Ok(batch(&host, ctx, &tasks, names.as_deref()).await);
        }
        let task = single_task(&args)?;
        let (tools, rejected) = child_tools(&host, names.as_deref());
        let cap = share(&host).await;
        let result = run_child(
            &host,
            ChildSpec {
                task: &task,
                tools: &tools,
                rejected: &rejected,
                cap,
                deadline: deadline_after(host.settings.timeout),
                parent_trace: parent_trace(ctx),
            },
        )
        .await;
        if result.outcome != super::ChildOutcome::Ok {
            let mut message = format!("sub-agent {}: {}", result.outcome.as_str(), result.error);
            if !result.text.trim().is_empty() {
                message.push_str("\npartial answer: ");
                message.push_str(&result.text);
            }
            return Err(ToolError::Failed(message));
        }
        let mut text = result.text;
        if !result.rejected_tools.is_empty() {
            text.push_str(&format!(
                "\n\n(not given to the sub-agent: {})",
                result.rejected_tools.join(", ")
            ));
        }
        Ok(ToolOutput::text(text))
    }
}

#[async_trait]
impl Tool for SpawnSubagentBatch {
    fn name(&self) -> &str {
        SPAWN_SUBAGENT_BATCH
    }

    fn description(&self) -> &str {
        "Starts several short-lived sub-agents in parallel, one per task, sharing one tool \
         list and one share of your budget, and returns each one's result in the order of \
         the tasks (JSON: results[i].outcome, text, error). Use for independent pieces of \
         work (parallel reads, research, summaries)."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "tasks": {"type": "array", "minItems": 1, "items": task_schema()},
                "tool_names": tool_names_schema()
            },
            "required": ["tasks"]
        })
    }

    fn annotations(&self) -> ToolAnnotations {
        annotations()
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let host = host(SPAWN_SUBAGENT_BATCH)?;
        let names = tool_names(&args)?;
        let tasks = batch_tasks(&args)?;
        Ok(batch(&host, ctx, &tasks, names.as_deref()).await)
    }
}
