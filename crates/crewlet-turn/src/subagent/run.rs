//! Running one sub-agent: its tools, model, cap, loop and events (a batch
//! of them: `batch.rs`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::Utc;
use crewlet_core::TraceContext;
use crewlet_core::payload::{AgentPhaseCompleted, AgentPhaseStarted, AgentTurnProgress};
use crewlet_core::{Event, EventPayload};
use crewlet_llm::{Message, Phase, RoleLlm, SystemBlock, ToolChoice, Usage};
use crewlet_store::{ORG_SCOPE, TokenLedger, agent_scope, new_period, unit_scope};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;
use tracing::Instrument;
use uuid::Uuid;

use super::ledger::CappedLedger;
use super::{Host, SUBAGENT_DENYLIST, as_child};
use crate::tool_loop::{
    LoopEnd, LoopEnv, LoopNotice, LoopRequest, LoopStats, MetaTools, ProgressObserver,
    ToolSelection, i64_of, run_tool_loop,
};
use crate::{BudgetGate, BudgetLimits, ToolAnnotations, ToolContext, ToolExecution, TurnError};

/// Said to every sub-agent after its parent's brief.
const PREAMBLE: &str = "You are a sub-agent working for the agent that started you, on one \
bounded task. You cannot start sub-agents of your own or contact colleagues, and you only \
have the tools listed for this call. When you are done, reply with a short final answer as \
plain text. If you cannot finish, reply with what you found and why you stopped.";

/// Most characters of a child's brief an event carries.
const BRIEF_CHARS: usize = 500;

/// One child to run: its brief and, optionally, fewer rounds than the cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ChildTask {
    pub task_prompt: String,
    pub system_prompt: String,
    pub max_turns: Option<u32>,
}

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildOutcome {
    /// It answered.
    Ok,
    /// It ran past its (or its batch's) wall-clock limit.
    Timeout,
    /// Its token share, or a budget of the seat, had no room left.
    BudgetExhausted,
    /// It used its rounds without a final answer.
    MaxTurns,
    /// It never ran: its share of a batch's budget was under the minimum.
    Refused,
    /// Something else ended it (no model, a provider error).
    Failed,
}

impl ChildOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ChildOutcome::Ok => "ok",
            ChildOutcome::Timeout => "timeout",
            ChildOutcome::BudgetExhausted => "budget_exhausted",
            ChildOutcome::MaxTurns => "max_turns",
            ChildOutcome::Refused => "refused",
            ChildOutcome::Failed => "failed",
        }
    }
}

/// What a child produced.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildResult {
    pub id: Uuid,
    pub outcome: ChildOutcome,
    /// Its last text (partial when it did not end well).
    pub text: String,
    /// Why it did not end well; empty when it did.
    pub error: String,
    pub rounds: u32,
    pub usage: Usage,
    /// The model that answered last.
    pub model: String,
    /// Named tools it was not given.
    pub rejected_tools: Vec<String>,
}

impl ChildResult {
    pub(super) fn unrun(outcome: ChildOutcome, error: String, rejected_tools: Vec<String>) -> Self {
        Self {
            id: Uuid::now_v7(),
            outcome,
            text: String::new(),
            error,
            rounds: 0,
            usage: Usage::default(),
            model: String::new(),
            rejected_tools,
        }
    }
}

/// A tool that changes something outside the company (not read-only, and
/// destructive or open-world): a sub-agent would act there under its
/// parent's identity, so it never gets one.
fn writes_outside(a: ToolAnnotations) -> bool {
    !a.read_only && (a.destructive || a.open_world)
}

/// The tools a child gets: those named (all of the parent's when `None`)
/// that the seat has, minus the denylist and minus tools that write
/// outside; and the named ones refused.
pub(super) fn child_tools(host: &Host, requested: Option<&[String]>) -> (Vec<String>, Vec<String>) {
    let seat_tools = host.tools.tools_for(&host.seat.handle);
    let allowed = |name: &str| {
        !SUBAGENT_DENYLIST.contains(&name)
            && seat_tools
                .iter()
                .find(|t| t.name() == name)
                .is_some_and(|t| !writes_outside(t.annotations()))
    };
    match requested {
        None => (
            seat_tools
                .iter()
                .map(|t| t.name().to_owned())
                .filter(|n| allowed(n))
                .collect(),
            Vec::new(),
        ),
        Some(names) => {
            let (mut given, mut refused) = (Vec::new(), Vec::new());
            for name in names {
                let list = if allowed(name) {
                    &mut given
                } else {
                    &mut refused
                };
                if !list.contains(name) {
                    list.push(name.clone());
                }
            }
            (given, refused)
        }
    }
}

/// What the seat may still spend: the least room of its capped budgets
/// (org, units, agent); `None` when none has a cap.
async fn remaining(host: &Host) -> Option<u64> {
    let limits = BudgetLimits::of(&host.company, &host.seat);
    let mut caps: Vec<(String, u64)> = Vec::new();
    if limits.org_max > 0 {
        caps.push((ORG_SCOPE.to_owned(), limits.org_max));
    }
    for u in limits.units.iter().filter(|u| u.max > 0) {
        caps.push((unit_scope(&u.unit), u.max));
    }
    if limits.agent_max > 0 {
        caps.push((agent_scope(&host.seat.agent_id), limits.agent_max));
    }
    if caps.is_empty() {
        return None;
    }
    let scopes: Vec<String> = caps.iter().map(|(s, _)| s.clone()).collect();
    let rows = match host.ledger.scope_rows(&scopes).await {
        Ok(rows) => rows,
        Err(e) => {
            // The seat's own budgets still stop it; the share counts from the caps.
            tracing::warn!(agent = %host.seat.handle, error = %e, "cannot read the budgets for a sub-agent's share");
            Vec::new()
        }
    };
    let window = limits.period.window(Utc::now());
    caps.iter()
        .map(|(scope, max)| {
            let used = rows
                .iter()
                .find(|r| &r.scope == scope)
                .filter(|r| !new_period(r.period_start, window))
                .map_or(0, |r| r.used_tokens.saturating_add(r.reserved_tokens));
            max.saturating_sub(used)
        })
        .min()
}

/// The tokens one spawn call may spend: `budget_fraction` of what the
/// seat has left; `None` when nothing caps it.
pub(super) async fn share(host: &Host) -> Option<u64> {
    let fraction = host.settings.budget_fraction;
    if !(fraction > 0.0 && fraction <= 1.0) {
        return None;
    }
    let left = remaining(host).await?;
    // A token share: the fraction of a count, rounded down.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let share = (left as f64 * fraction) as u64;
    Some(share.max(1))
}

/// Where a child reports to: the events carry its span, its id and the
/// parent's turn.
pub(super) struct ChildReporter<'h> {
    pub host: &'h Host,
    pub span: TraceContext,
    /// The child's id (`None` for the batch's own event).
    pub id: Option<Uuid>,
}

impl ChildReporter<'_> {
    pub(super) async fn emit(&self, event: Event, summary: String, extra: Value) {
        let h = self.host;
        let mut event = event
            .with_summary(summary)
            .with_agent(h.seat.agent_id, h.seat.role_name.as_str())
            .with_task(h.task_id.as_str())
            .with_trace(self.span)
            .with_delegation_depth(h.delegation_depth)
            .with_agent_handle(h.seat.handle.as_str());
        if let Some(id) = self.id {
            event = event.with_tag("subagent_id", id.to_string());
        }
        if let Some(channel) = &h.channel {
            event = event.with_channel(channel.as_str());
        }
        if let Some(sender) = &h.sender {
            event = event.with_sender(sender.as_str());
        }
        if let (Value::Object(payload), Value::Object(extra)) = (&mut event.payload, extra) {
            payload.extend(extra);
        }
        h.sink.emit(event).await;
    }
}

#[async_trait]
impl ProgressObserver for ChildReporter<'_> {
    async fn progress(&self, text: &str, tool_executions: &[ToolExecution]) {
        let h = self.host;
        let payload = AgentTurnProgress {
            turn_id: h.turn_id,
            phase: "subagent".to_owned(),
            iteration: h.iteration,
            role: h.seat.role_name.clone(),
            response: text.to_owned(),
            tool_executions: tool_executions.to_vec(),
        };
        let summary = format!("{} sub-agent in progress", h.seat.handle);
        self.emit(
            payload.to_event(h.source.as_str()),
            summary,
            json!({"subagent_id": self.id}),
        )
        .await;
    }

    async fn notice(&self, notice: LoopNotice) {
        if let LoopNotice::SkillBlocked { tool, skills } = notice {
            let h = self.host;
            let payload = crewlet_core::payload::ToolSkillBlocked {
                turn_id: h.turn_id,
                phase: "subagent".to_owned(),
                iteration: h.iteration,
                tool: tool.clone(),
                skills: skills.clone(),
            };
            let summary = format!(
                "{} sub-agent must load {} before {tool}",
                h.seat.handle,
                skills.join(", ")
            );
            self.emit(
                payload.to_event(h.source.as_str()),
                summary,
                json!({"subagent_id": self.id}),
            )
            .await;
        }
    }
}

fn cut(text: &str, chars: usize) -> String {
    let mut out: String = text.chars().take(chars).collect();
    if text.chars().count() > chars {
        out.push_str("...");
    }
    out
}

/// How one child runs: its brief, tools, share and deadline.
pub(super) struct ChildSpec<'a> {
    pub task: &'a ChildTask,
    pub tools: &'a [String],
    pub rejected: &'a [String],
    /// Its token cap; `None` = only the seat's budgets.
    pub cap: Option<u64>,
    /// When it must be done by.
    pub deadline: Instant,
    /// The span of the call that starts it (when no telemetry records
    /// spans, its events hang off this).
    pub parent_trace: TraceContext,
}

/// Runs one child to its end, in a `phase subagent` span under the
/// current (tool) span, with `agent_phase_started` / `agent_phase_completed`
/// (`phase: subagent`) around it.
pub(super) async fn run_child(host: &Host, spec: ChildSpec<'_>) -> ChildResult {
    let id = Uuid::now_v7();
    let span = crewlet_telemetry::phase_span("subagent");
    span.record("iteration", i64::from(host.iteration));
    let trace =
        crewlet_telemetry::trace_context_of(&span).unwrap_or_else(|| spec.parent_trace.child());
    let reporter = ChildReporter {
        host,
        span: trace,
        id: Some(id),
    };
    let rejected = spec.rejected.to_vec();
    let round_cap = spec
        .task
        .max_turns
        .unwrap_or(host.settings.max_turns)
        .clamp(1, host.settings.max_turns.max(1));
    let brief = cut(&spec.task.task_prompt, BRIEF_CHARS);

    // Its own model chain: `llm_subagent`, else the role's `llm`, else the
    // company default (never the Execute override).
    let role = RoleLlm {
        general: if host.seat.subagent_llm.is_empty() {
            host.seat.llm.general.clone()
        } else {
            host.seat.subagent_llm.clone()
        },
        per_phase: BTreeMap::new(),
    };
    let chain = match host.llm.resolve(&role, Phase::Execute) {
        Ok(chain) if !chain.is_empty() => chain,
        Ok(_) => {
            return ChildResult::unrun(
                ChildOutcome::Failed,
                "no model is configured for sub-agents".into(),
                rejected,
            );
        }
        Err(e) => {
            return ChildResult::unrun(
                ChildOutcome::Failed,
                format!("no model for sub-agents: {e}"),
                rejected,
            );
        }
    };
    let first = &chain.providers()[0];
    let started_payload = AgentPhaseStarted {
        phase: "subagent".to_owned(),
        turn_id: host.turn_id,
        iteration: host.iteration,
        provider: first.name().to_owned(),
        model: first.model().to_owned(),
    };
    reporter
        .emit(
            started_payload.to_event(host.source.as_str()),
            format!(
                "{} sub-agent started: {}",
                host.seat.handle,
                cut(&brief, 80)
            ),
            json!({"subagent_id": id, "brief": brief, "tools": spec.tools,
                   "max_turns": round_cap, "token_cap": spec.cap}),
        )
        .await;

    let capped = spec
        .cap
        .map(|cap| CappedLedger::new(host.ledger.clone(), cap));
    let ledger: &dyn TokenLedger = match &capped {
        Some(c) => c,
        None => host.ledger.as_ref(),
    };
    let limits = BudgetLimits::of(&host.company, &host.seat);
    let spent = Mutex::new(Usage::default());
    let ctx = ToolContext {
        agent_id: host.seat.agent_id,
        agent_handle: host.seat.handle.clone(),
        role_name: host.seat.role_name.clone(),
        task_id: host.task_id.clone(),
        turn_id: host.turn_id,
        phase: Phase::Execute,
        iteration: host.iteration,
        delegation_depth: host.delegation_depth,
        delegation_chain: Vec::new(),
        trace,
    };
    let mut system = spec.task.system_prompt.trim().to_owned();
    // The skills listed for sub-agents whose trigger its tools match.
    let surface: Vec<_> = spec
        .tools
        .iter()
        .filter_map(|n| host.tools.get_for(&host.seat.handle, n))
        .collect();
    let skills = crate::skills::render_catalogue(&host.skills.subagent_catalogue(&surface), true);
    if !skills.is_empty() {
        system.push_str("\n\n");
        system.push_str(skills.trim_end());
    }
    if !system.is_empty() {
        system.push_str("\n\n");
    }
    system.push_str(PREAMBLE);
    let mut stats = LoopStats::default();
    let mut provider_used = first.clone();
    let started = std::time::Instant::now();

    let attempts = async {
        let mut providers = chain.providers().iter().peekable();
        loop {
            let Some(provider) = providers.next() else {
                return Err(TurnError::Llm(crewlet_llm::LlmError::NoProviders));
            };
            provider_used = provider.clone();
            let env = LoopEnv {
                provider: provider.as_ref(),
                registry: &host.tools,
                skills: Some(&host.skills),
                ctx: &ctx,
                budget: BudgetGate {
                    ledger,
                    tracker: &host.tracker,
                    agent_id: host.seat.agent_id,
                    agent_handle: &host.seat.handle,
                    limits: &limits,
                    turn_usage: Some(&spent),
                    warnings: Some(&host.warnings),
                    patience: crewlet_store::Patience::at_most(host.patience),
                },
                progress: Some(&reporter),
                stream: host.stream,
                journal: None,
            };
            let request: LoopRequest = LoopRequest {
                system: vec![SystemBlock::stable(system.clone())],
                messages: vec![Message::user(spec.task.task_prompt.clone())],
                tools: ToolSelection::Named(spec.tools.to_vec()),
                slim_tools: false,
                terminators: Vec::new(),
                tool_choice: ToolChoice::Auto,
                meta: MetaTools {
                    load_skills: true,
                    discovery: false,
                },
                round_cap,
                grace_round: false,
                require_first_call: false,
            };
            match run_tool_loop(&env, request, &mut stats).await {
                // A provider that fails with a next one in the chain hands over.
                Err(TurnError::Llm(e)) if providers.peek().is_some() => {
                    tracing::warn!(agent = %host.seat.handle, provider = provider.name(), error = %e, "sub-agent's provider failed; restarting on the next one");
                }
                other => return other,
            }
        }
    };
    let ended = tokio::time::timeout_at(spec.deadline, as_child(attempts))
        .instrument(span.clone())
        .await;

    let usage = *spent.lock();
    host.spent.lock().add(&usage);
    let (outcome, text, error) = match ended {
        Ok(Ok(o)) => match o.end {
            LoopEnd::Reply | LoopEnd::Terminated { .. } => {
                (ChildOutcome::Ok, o.text, String::new())
            }
            LoopEnd::RoundCap => (
                ChildOutcome::MaxTurns,
                o.text,
                format!("the sub-agent used its {round_cap} rounds without a final answer"),
            ),
        },
        Ok(Err(TurnError::BudgetExhausted { refusal })) => {
            let why = match &capped {
                Some(c) if c.tripped() => format!(
                    "the sub-agent's share of {} tokens is spent (it used {})",
                    c.cap(),
                    refusal.used_tokens
                ),
                _ => format!(
                    "the {} budget is exhausted ({} of {} tokens)",
                    refusal.budget_type.as_str(),
                    refusal.used_tokens,
                    refusal.max_tokens
                ),
            };
            (ChildOutcome::BudgetExhausted, String::new(), why)
        }
        Ok(Err(e)) => (ChildOutcome::Failed, String::new(), e.to_string()),
        Err(_) => (
            ChildOutcome::Timeout,
            String::new(),
            "the sub-agent ran past its time limit".to_owned(),
        ),
    };
    let text = if text.is_empty() {
        stats.response.clone()
    } else {
        text
    };
    let model = stats
        .models
        .last()
        .cloned()
        .unwrap_or_else(|| provider_used.model().to_owned());
    span.record("llm_input_tokens", i64_of(stats.usage.input_tokens));
    span.record("llm_output_tokens", i64_of(stats.usage.output_tokens));

    let ok = outcome == ChildOutcome::Ok;
    let completed = AgentPhaseCompleted {
        phase: "subagent".to_owned(),
        model: model.clone(),
        provider: provider_used.name().to_owned(),
        input_tokens: stats.usage.input_tokens,
        output_tokens: stats.usage.output_tokens,
        cache_read_tokens: stats.usage.cache_read_tokens,
        calls: Some(u64::from(stats.calls)),
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        tool_executions: stats.tool_executions.clone(),
        turn_id: host.turn_id.to_string(),
        iteration: host.iteration,
        outcome: if ok { "ok" } else { "failed" }.to_owned(),
        auxiliary: None,
        prompt: stats.prompt.clone(),
        response: Some(stats.response.clone()).filter(|r| !r.is_empty()),
    };
    let mut extra = json!({
        "subagent_id": id,
        "brief": brief,
        "end": outcome.as_str(),
        "rounds": stats.rounds,
        "rejected_tools": rejected,
    });
    if !ok && let Value::Object(map) = &mut extra {
        map.insert("error".into(), Value::String(error.clone()));
        map.insert("error_kind".into(), Value::String(outcome.as_str().into()));
    }
    reporter
        .emit(
            completed.to_event(host.source.as_str()),
            format!(
                "{} sub-agent {}",
                host.seat.handle,
                if ok { "completed" } else { outcome.as_str() }
            ),
            extra,
        )
        .await;
    ChildResult {
        id,
        outcome,
        text,
        error,
        rounds: stats.rounds,
        usage: stats.usage,
        model,
        rejected_tools: rejected,
    }
}
