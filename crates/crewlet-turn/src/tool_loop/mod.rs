//! The loop every phase runs: each round refreshes the tools, asks the model,
//! charges the budget, runs the tool calls it asked for and appends the
//! results. It ends on a reply without tool calls, a terminating tool, or the
//! round cap (then, if asked, one grace round without tools summarizes).
//!
//! Parts: this file has the loop and its types; `complete` asks the model
//! (in an `llm` span, streaming progress when asked); `calls` checks and
//! runs the tool calls of one round (each in a `tool` span).

mod calls;
mod complete;
#[cfg(test)]
mod journal_tests;
mod meta;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crewlet_llm::{
    Completion, CompletionRequest, LlmProvider, Message, SystemBlock, ToolChoice, ToolSpec, Usage,
};

/// One tool call as it ran (the record the phase events carry).
pub use crewlet_core::payload::ToolExecution;

pub use self::meta::{ACTIVATE_TOOL, LIST_MCP_SERVER_TOOLS, MetaTools};

pub(crate) use self::calls::i64_of;
use self::calls::{CallResult, Resolved, Round, resolve, run_planned, select_tools};
use self::complete::complete;
use self::meta::Session;
use crate::journal::{ToolPlan, TurnJournal};
use crate::skills::{LOAD_TOOL_SKILL, ToolSkills};
use crate::{
    BudgetGate, Tool, ToolContext, ToolRegistry, TurnError, prompts, slim_tool_spec, tool_spec,
};

/// Most tool calls run in one round; the rest are answered with an error.
pub const MAX_CALLS_PER_ROUND: usize = 32;

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

/// A tool that ends the loop when called with arguments that parse, such as
/// `submit_plan`: the loop hands back the parsed decision `D` (parsed once,
/// here). Arguments that do not parse go back to the model as an error.
#[derive(Clone, Debug)]
pub struct Terminator<D> {
    pub spec: ToolSpec,
    pub parse: fn(&Value) -> Result<D, String>,
}

/// What the loop is asked to do; `D` is what its terminators decide.
#[derive(Clone, Debug)]
pub struct LoopRequest<D = ()> {
    pub system: Vec<SystemBlock>,
    pub messages: Vec<Message>,
    pub tools: ToolSelection,
    /// Offer first-sentence descriptions only (Plan's slim catalogue).
    pub slim_tools: bool,
    pub terminators: Vec<Terminator<D>>,
    pub tool_choice: ToolChoice,
    /// The loop's own tools (`load_tool_skill`, discovery).
    pub meta: MetaTools,
    pub round_cap: u32,
    /// After the cap, one more round without tools to summarize.
    pub grace_round: bool,
    /// The first round must call one of the offered tools (`tool_choice:
    /// required`) when any is offered: Execute, when the plan named tools.
    pub require_first_call: bool,
}

/// Something inside the loop worth an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoopNotice {
    /// Required tool skills held a call back.
    SkillBlocked { tool: String, skills: Vec<String> },
    /// `activate_tool` made a tool of the seat's catalogue callable.
    ToolActivated { tool: String },
    /// A call of a tool the seat does not have at all (with discovery on).
    MissingTool { tool: String },
    /// A resumed turn met a call that had started before the interruption
    /// and has no result; the tool is not idempotent, so it did not run
    /// again and the model is told its effect is unknown.
    EffectUncertain { tool: String, step: i32 },
}

/// Told what a streaming call has produced so far, and what the loop
/// noticed.
#[async_trait]
pub trait ProgressObserver: Send + Sync {
    async fn progress(&self, text: &str, tool_executions: &[ToolExecution]);

    async fn notice(&self, _notice: LoopNotice) {}
}

/// What the loop works with.
pub struct LoopEnv<'a> {
    pub provider: &'a dyn LlmProvider,
    pub registry: &'a ToolRegistry,
    /// The company's tool skills (`load_tool_skill`, the guard).
    pub skills: Option<&'a ToolSkills>,
    pub ctx: &'a ToolContext,
    pub budget: BudgetGate<'a>,
    pub progress: Option<&'a dyn ProgressObserver>,
    /// Use the provider's streaming call (for live progress).
    pub stream: bool,
    /// The turn's effect journal: answers and tool results are recorded
    /// before the loop moves on, and read back when the turn resumes.
    pub journal: Option<&'a TurnJournal>,
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
    /// What the phase asked: its system prompt and first messages, as the
    /// first loop of the phase sent them (redacted, capped).
    pub prompt: Option<String>,
    /// What the model answered last: its text and tool calls (redacted,
    /// capped).
    pub response: String,
}

/// Most bytes of a phase's recorded prompt or response.
pub const MAX_RECORDED_BYTES: usize = 32 * 1024;

/// The system blocks and messages as one readable text.
fn render_prompt(system: &[crewlet_llm::SystemBlock], messages: &[Message]) -> String {
    let mut out = String::new();
    for block in system {
        out.push_str(&block.text);
        out.push_str("\n\n");
    }
    for m in messages {
        match m {
            Message::User { content } => {
                out.push_str("--- user\n");
                out.push_str(content);
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                out.push_str("--- assistant\n");
                out.push_str(content);
                for c in tool_calls {
                    out.push_str(&format!("\n-> {}({})", c.name, c.arguments));
                }
            }
            Message::Tool { name, content, .. } => {
                out.push_str(&format!("--- tool {name}\n"));
                out.push_str(content);
            }
        }
        out.push_str("\n\n");
    }
    crate::sanitize::cap(
        &crate::sanitize::redact_secrets(out.trim_end()),
        MAX_RECORDED_BYTES,
    )
}

/// An answer as text: what it said, then each tool call.
fn render_response(content: &str, tool_calls: &[crewlet_llm::ToolCall]) -> String {
    let mut out = content.to_owned();
    for c in tool_calls {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("-> {}({})", c.name, c.arguments));
    }
    crate::sanitize::cap(&crate::sanitize::redact_secrets(&out), MAX_RECORDED_BYTES)
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
pub struct LoopOutcome<D = ()> {
    pub end: LoopEnd,
    /// What the terminator that ended the loop decided (its arguments,
    /// parsed); `None` when no terminator ended it.
    pub decision: Option<D>,
    /// The last text the model said.
    pub text: String,
    /// The whole conversation, ready to continue.
    pub messages: Vec<Message>,
}

/// Asks the model once, under the budget: reserve, call, settle.
async fn ask(
    env: &LoopEnv<'_>,
    call: &mut CompletionRequest,
    stats: &mut LoopStats,
) -> Result<Completion, TurnError> {
    let output = crate::budget::output_bound(call, env.provider.max_tokens());
    let hold = env
        .budget
        .reserve(crate::budget::prompt_bound(call), output)
        .await?;
    // A budget with less room than the call's usual cap: ask for less.
    let asked = call.max_tokens;
    if output > hold.output_cap() {
        call.max_tokens = Some(u32::try_from(hold.output_cap()).unwrap_or(u32::MAX));
    }
    let completion = complete(env, call, stats).await;
    call.max_tokens = asked;
    let completion = match completion {
        Ok(c) => c,
        Err(e) => {
            env.budget.release(hold).await;
            return Err(e);
        }
    };
    stats.count(&completion);
    env.budget.settle(hold, &completion.usage).await?;
    Ok(completion)
}

/// Runs the loop until it ends; see the module doc.
pub async fn run_tool_loop<D>(
    env: &LoopEnv<'_>,
    request: LoopRequest<D>,
    stats: &mut LoopStats,
) -> Result<LoopOutcome<D>, TurnError> {
    let LoopRequest {
        system,
        messages,
        tools,
        slim_tools,
        terminators,
        tool_choice,
        meta,
        round_cap,
        grace_round,
        require_first_call,
    } = request;
    let mut session = Session::default();
    let mut call = CompletionRequest {
        system,
        messages,
        ..CompletionRequest::default()
    };
    if stats.prompt.is_none() {
        stats.prompt = Some(render_prompt(&call.system, &call.messages));
    }
    let mut rounds = 0u32;
    let mut last_text = String::new();
    loop {
        let grace = rounds >= round_cap;
        if grace && !grace_round {
            return Ok(LoopOutcome {
                end: LoopEnd::RoundCap,
                decision: None,
                text: last_text,
                messages: call.messages,
            });
        }
        // Refresh: tools may have come or gone since the last round.
        let offered: Vec<Arc<dyn Tool>> = if grace {
            Vec::new()
        } else {
            select_tools(env, &tools, &session.activated)
        };
        call.tools.clear();
        // The forced first call is one of the tools the plan named, not a
        // meta tool.
        let forced = rounds == 0 && require_first_call && !offered.is_empty();
        if !grace {
            // The meta tools come last, so that a prompt which lists the
            // tools (a local model's) changes only at its end when they
            // join after a forced first round, and the rest of it is reused.
            call.tools
                .extend(terminators.iter().map(|t| t.spec.clone()));
            call.tools.extend(offered.iter().map(|t| {
                if slim_tools {
                    slim_tool_spec(t.as_ref())
                } else {
                    tool_spec(t.as_ref())
                }
            }));
            if !forced {
                call.tools.extend(meta.specs(env.skills));
            }
        } else {
            call.messages.push(Message::user(prompts::GRACE));
        }
        call.tool_choice = if call.tools.is_empty() {
            ToolChoice::Auto
        } else if forced {
            ToolChoice::Required
        } else {
            tool_choice.clone()
        };

        // A resumed turn reads its recorded answer back: no call, no charge.
        let recorded = match env.journal {
            Some(j) => j.recorded_model()?,
            None => None,
        };
        let completion = match recorded {
            Some(c) => {
                stats.count(&c);
                c
            }
            None => {
                let completion = ask(env, &mut call, stats).await?;
                if let Some(j) = env.journal {
                    j.record_model(&completion).await?;
                }
                completion
            }
        };
        rounds += 1;
        stats.rounds += 1;

        let Completion {
            content,
            tool_calls,
            ..
        } = completion;
        last_text.clone_from(&content);
        stats.response = render_response(&content, &tool_calls);
        call.messages
            .push(Message::assistant(content, tool_calls.clone()));
        if grace {
            return Ok(LoopOutcome {
                end: LoopEnd::RoundCap,
                decision: None,
                text: last_text,
                messages: call.messages,
            });
        }
        if tool_calls.is_empty() {
            return Ok(LoopOutcome {
                end: LoopEnd::Reply,
                decision: None,
                text: last_text,
                messages: call.messages,
            });
        }

        // A valid call of a terminator ends the loop at once.
        for tc in &tool_calls {
            if let Some(t) = terminators.iter().find(|t| t.spec.name == tc.name)
                && let Ok(args) = tc.parsed_arguments()
                && let Ok(decision) = (t.parse)(&args)
            {
                return Ok(LoopOutcome {
                    end: LoopEnd::Terminated {
                        tool: tc.name.clone(),
                        arguments: args,
                    },
                    decision: Some(decision),
                    text: last_text,
                    messages: call.messages,
                });
            }
        }

        let seat_tools: Vec<Arc<dyn Tool>> = if meta.discovery || meta.skills_on(env.skills) {
            env.registry.tools_for(&env.ctx.agent_handle)
        } else {
            Vec::new()
        };
        let loaded = session.loaded.clone();
        let round = Round {
            offered: offered.iter().map(|t| t.name()).collect::<HashSet<&str>>(),
            seat_tools: &seat_tools,
            loaded: &loaded,
            guard: env.skills.filter(|_| meta.skills_on(env.skills)),
            discovery: meta.discovery,
        };
        let mut notices = Vec::new();
        let resolved: Vec<Resolved> = tool_calls
            .iter()
            .enumerate()
            .map(|(i, tc)| {
                if i >= MAX_CALLS_PER_ROUND {
                    return Resolved::Refuse(format!(
                        "not run: at most {MAX_CALLS_PER_ROUND} tool calls are run per round"
                    ));
                }
                if !meta.handles(&tc.name, env.skills) {
                    return resolve(env, &terminators, &round, tc, &mut notices);
                }
                let args = tc.parsed_arguments().unwrap_or(Value::Null);
                let answer = match tc.name.as_str() {
                    LOAD_TOOL_SKILL => match env.skills {
                        Some(skills) => meta::load_skill(skills, &args, &mut session),
                        None => Err("there are no tool skills".to_owned()),
                    },
                    LIST_MCP_SERVER_TOOLS => meta::list_tools(&seat_tools, &args),
                    _ => {
                        let (answer, activated) =
                            meta::activate(&seat_tools, &round.offered, &args, &mut session);
                        if let Some(tool) = activated {
                            notices.push(LoopNotice::ToolActivated { tool });
                        }
                        answer
                    }
                };
                match answer {
                    Ok(text) => Resolved::Answer(text),
                    Err(why) => Resolved::Refuse(why),
                }
            })
            .collect();
        if let Some(observer) = env.progress {
            for notice in notices {
                observer.notice(notice).await;
            }
        }
        let all_read_only = resolved.iter().all(|r| match r {
            Resolved::Run(tool, _) => tool.annotations().read_only,
            Resolved::Refuse(_) | Resolved::Answer(_) => true,
        });
        // Steps are numbered in the answer's order, before anything runs.
        let planned: Vec<(Resolved, Option<ToolPlan>)> = resolved
            .into_iter()
            .zip(&tool_calls)
            .map(|(r, tc)| {
                let plan = match (&r, env.journal) {
                    (Resolved::Run(tool, args), Some(j)) => {
                        let a = tool.annotations();
                        Some(j.plan_tool(&tc.name, args, a.idempotent || a.read_only))
                    }
                    _ => None,
                };
                (r, plan)
            })
            .collect();
        let results: Vec<CallResult> = if all_read_only && planned.len() > 1 {
            futures::future::join_all(
                planned
                    .into_iter()
                    .zip(&tool_calls)
                    .map(|((r, plan), tc)| run_planned(env, tc, r, plan)),
            )
            .await
            .into_iter()
            .collect::<Result<_, _>>()?
        } else {
            let mut out = Vec::with_capacity(planned.len());
            for ((r, plan), tc) in planned.into_iter().zip(&tool_calls) {
                out.push(run_planned(env, tc, r, plan).await?);
            }
            out
        };

        if let Some((tc, _)) = tool_calls.iter().zip(&results).find(|(_, r)| r.suspend) {
            return Err(TurnError::Suspended {
                tool: tc.name.clone(),
            });
        }
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
                decision: None,
                text: last_text,
                messages: call.messages,
            });
        }
    }
}
