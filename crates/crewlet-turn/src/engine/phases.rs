//! The three phases as units of their own. Each one builds the tool-loop
//! request of one attempt on one provider and turns the loop's end into
//! its own typed result: Plan a [`Plan`], Execute an [`ExecutionRecord`],
//! Review a [`Review`]. The fallback runner (`fallback.rs`) drives any of
//! them over the seat's provider chain.
//!
//! Plan and Review end with a decision tool (`submit_plan`,
//! `submit_review`): its arguments are parsed once, by the tool loop's
//! terminator, and a model that does not call it gets up to `rescue_rounds`
//! more rounds that offer only that tool ([`TurnEngine::decide`]).

use std::future::Future;

use crewlet_llm::{LlmProvider, Message, Phase, SystemBlock, ToolChoice};

use super::TurnEngine;
use super::ctx::PhaseCtx;
use super::report::Progress;
use crate::decisions::{SUBMIT_PLAN, SUBMIT_REVIEW, submit_plan_spec_for, submit_review_spec};
use crate::prompts::{self, ExecutionRecord, PhaseBrief, PriorIteration};
use crate::tool_loop::{
    LoopEnd, LoopEnv, LoopRequest, LoopStats, MetaTools, Terminator, ToolSelection, run_tool_loop,
};
use crate::{BudgetGate, BudgetLimits, Plan, Review, ReviewDecision, ToolContext, TurnError};

/// One phase of a turn, as the fallback runner drives it.
pub(super) trait PhaseWork: Sync {
    /// What the phase hands to the next one.
    type Output: Send;
    const PHASE: Phase;

    /// The per-phase part of the system prompt.
    fn brief(&self) -> PhaseBrief<'_>;

    /// One try of the phase on the provider of `attempt`.
    fn run(
        &self,
        engine: &TurnEngine,
        attempt: Attempt<'_>,
        stats: &mut LoopStats,
    ) -> impl Future<Output = Result<Self::Output, TurnError>> + Send;
}

/// Plan: read-only tools with a slim catalogue, ended by `submit_plan`.
pub(super) struct PlanPhase<'a> {
    /// (name, one-line description) of every tool the seat has.
    pub catalogue: &'a [(String, String)],
    /// The `## Tool skills` section (may be empty).
    pub skills: &'a str,
    /// What the seat remembers (frozen at turn start).
    pub memory: &'a [crate::MemorySection],
    /// The iterations Review sent back, oldest first.
    pub prior: &'a [PriorIteration],
}

/// Execute: the tools the plan names, with a grace round at the cap.
pub(super) struct ExecutePhase<'a> {
    pub plan: &'a Plan,
    /// The `## Tool skills` section (may be empty).
    pub skills: &'a str,
    /// Sections the recall fetched after the plan.
    pub memory: &'a [crate::MemorySection],
}

/// Review: read-only tools, ended by `submit_review`.
pub(super) struct ReviewPhase<'a> {
    pub plan: &'a Plan,
    /// The `## Tool skills` section (may be empty).
    pub skills: &'a str,
    pub execution: &'a ExecutionRecord,
}

/// What one attempt of a phase runs with: the loop's environment (the
/// provider, the tools, the budget) and the opening of the conversation.
pub(super) struct Attempt<'a> {
    pub env: LoopEnv<'a>,
    pub system: Vec<SystemBlock>,
    pub messages: Vec<Message>,
}

impl Attempt<'_> {
    /// The loop request of this attempt (it takes the opening of the
    /// conversation: one request per attempt).
    fn request<D>(
        &mut self,
        tools: ToolSelection,
        slim_tools: bool,
        terminators: Vec<Terminator<D>>,
        meta: MetaTools,
        round_cap: u32,
        grace_round: bool,
    ) -> LoopRequest<D> {
        LoopRequest {
            system: std::mem::take(&mut self.system),
            messages: std::mem::take(&mut self.messages),
            tools,
            slim_tools,
            terminators,
            tool_choice: ToolChoice::Auto,
            meta,
            round_cap,
            grace_round,
            require_first_call: false,
        }
    }
}

impl PhaseWork for PlanPhase<'_> {
    type Output = Plan;
    const PHASE: Phase = Phase::Plan;

    fn brief(&self) -> PhaseBrief<'_> {
        PhaseBrief::Plan {
            catalogue: self.catalogue,
            skills: self.skills,
            memory: self.memory,
            prior: self.prior,
        }
    }

    async fn run(
        &self,
        engine: &TurnEngine,
        mut attempt: Attempt<'_>,
        stats: &mut LoopStats,
    ) -> Result<Plan, TurnError> {
        let terminator = Terminator {
            spec: submit_plan_spec_for(self.catalogue.iter().map(|(name, _)| name.as_str())),
            parse: Plan::parse,
        };
        let request = attempt.request(
            ToolSelection::ReadOnly,
            true,
            vec![terminator],
            MetaTools {
                load_skills: true,
                discovery: false,
            },
            engine.settings.plan_round_cap,
            false,
        );
        let decided = engine
            .decide(&attempt.env, request, SUBMIT_PLAN, stats)
            .await?;
        Ok(decided.unwrap_or_else(|| Plan::skip("the model did not call submit_plan")))
    }
}

impl PhaseWork for ExecutePhase<'_> {
    type Output = ExecutionRecord;
    const PHASE: Phase = Phase::Execute;

    fn brief(&self) -> PhaseBrief<'_> {
        PhaseBrief::Execute {
            plan: self.plan,
            skills: self.skills,
            memory: self.memory,
        }
    }

    async fn run(
        &self,
        engine: &TurnEngine,
        mut attempt: Attempt<'_>,
        stats: &mut LoopStats,
    ) -> Result<ExecutionRecord, TurnError> {
        let planned = self.plan.tool_names();
        let mut request: LoopRequest = attempt.request(
            ToolSelection::Named(planned.clone()),
            false,
            Vec::new(),
            MetaTools {
                load_skills: true,
                discovery: true,
            },
            engine.settings.execute_round_cap,
            true,
        );
        // A plan that names the tools its work needs starts by calling one:
        // a model may not answer from thin air what it planned to look up.
        request.require_first_call = !planned.is_empty();
        let outcome = run_tool_loop(&attempt.env, request, stats).await?;
        let mut final_text = outcome.text;
        if let LoopEnd::Terminated { tool, .. } = &outcome.end
            && final_text.trim().is_empty()
        {
            final_text = format!("(ended by the tool {tool})");
        }
        Ok(ExecutionRecord {
            final_text,
            tool_executions: stats.tool_executions.clone(),
            hit_round_cap: outcome.end == LoopEnd::RoundCap,
        })
    }
}

impl PhaseWork for ReviewPhase<'_> {
    type Output = Review;
    const PHASE: Phase = Phase::Review;

    fn brief(&self) -> PhaseBrief<'_> {
        PhaseBrief::Review {
            plan: self.plan,
            skills: self.skills,
            execution: self.execution,
        }
    }

    async fn run(
        &self,
        engine: &TurnEngine,
        mut attempt: Attempt<'_>,
        stats: &mut LoopStats,
    ) -> Result<Review, TurnError> {
        let terminator = Terminator {
            spec: submit_review_spec(),
            parse: Review::parse,
        };
        let request = attempt.request(
            ToolSelection::ReadOnly,
            false,
            vec![terminator],
            MetaTools::NONE,
            engine.settings.review_round_cap,
            false,
        );
        let decided = engine
            .decide(&attempt.env, request, SUBMIT_REVIEW, stats)
            .await?;
        Ok(decided.unwrap_or_else(|| Review {
            decision: ReviewDecision::Done,
            notes: "the model did not call submit_review; the work is taken as it is".into(),
            completed_work: self.execution.final_text.clone(),
            final_artifact: self.execution.final_text.clone(),
        }))
    }
}

impl TurnEngine {
    /// One try of `work` on `provider`: the tool context, the budget gate,
    /// the progress reporter and the prompts of the phase, then the phase's
    /// own loop.
    pub(super) async fn attempt<W: PhaseWork>(
        &self,
        pc: &PhaseCtx<'_, '_>,
        work: &W,
        provider: &dyn LlmProvider,
        stats: &mut LoopStats,
    ) -> Result<W::Output, TurnError> {
        let t = pc.turn;
        let ctx = ToolContext {
            agent_id: t.seat.agent_id,
            agent_handle: t.seat.handle.clone(),
            role_name: t.seat.role_name.clone(),
            task_id: t.trigger.task_id.clone(),
            turn_id: t.turn_id,
            phase: pc.phase,
            iteration: pc.iteration,
            delegation_depth: t.trigger.delegation_depth,
            delegation_chain: t.trigger.delegation_chain.clone(),
            trace: pc.span,
        };
        let observer = Progress { engine: self, pc };
        let limits = BudgetLimits::of(&self.company, t.seat);
        let env = LoopEnv {
            provider,
            registry: &self.tools,
            skills: Some(&self.skills),
            ctx: &ctx,
            budget: BudgetGate {
                ledger: self.ledger.as_ref(),
                tracker: &self.usage,
                agent_id: t.seat.agent_id,
                agent_handle: &t.seat.handle,
                limits: &limits,
                turn_usage: Some(&t.usage),
                warnings: Some(&t.budget_warnings),
                patience: crewlet_store::Patience::at_most(self.settings.store_patience),
            },
            progress: Some(&observer),
            stream: self.settings.stream,
            journal: t.journal,
        };
        let attempt = Attempt {
            env,
            system: prompts::system_prompt(&self.company, t.seat, t.trigger, &work.brief()),
            messages: vec![Message::user(prompts::kickoff(pc.phase))],
        };
        if W::PHASE != Phase::Execute {
            return work.run(self, attempt, stats).await;
        }
        // Execute may start sub-agents: the spawn tools reach the turn here.
        let host = self.subagent_host(pc);
        let result = crate::subagent::with_host(host.clone(), work.run(self, attempt, stats)).await;
        Self::fold_subagents(pc, &host);
        result
    }

    /// Runs a decision loop (Plan, Review), then up to `rescue_rounds` rounds
    /// that offer only the decision tool `tool` with `tool_choice:
    /// required`. The decision its terminator parsed; `None` when the model
    /// never called it with valid arguments. A provider that
    /// [decides at once](LlmProvider::decides_at_once) skips the loop: its
    /// first round is already one that offers only the decision tool.
    async fn decide<D: Clone>(
        &self,
        env: &LoopEnv<'_>,
        request: LoopRequest<D>,
        tool: &str,
        stats: &mut LoopStats,
    ) -> Result<Option<D>, TurnError> {
        let system = request.system.clone();
        let terminators = request.terminators.clone();
        let decision_only = |messages: Vec<Message>| LoopRequest {
            system: system.clone(),
            messages,
            tools: ToolSelection::None,
            slim_tools: false,
            terminators: terminators.clone(),
            tool_choice: ToolChoice::Required,
            meta: MetaTools::NONE,
            round_cap: 1,
            grace_round: false,
            require_first_call: false,
        };
        let first = if env.provider.decides_at_once() {
            decision_only(request.messages)
        } else {
            request
        };
        let mut outcome = run_tool_loop(env, first, stats).await?;
        for _ in 0..self.settings.rescue_rounds {
            if let Some(decision) = outcome.decision {
                return Ok(Some(decision));
            }
            let mut messages = outcome.messages;
            messages.push(Message::user(prompts::rescue(tool)));
            outcome = run_tool_loop(env, decision_only(messages), stats).await?;
        }
        Ok(outcome.decision)
    }
}
