//! The order of a turn's phases: Plan -> Execute -> Review, and again
//! while Review sends the work back (`self_iterate`), at most
//! `max_iterations` times and never twice with the same artifact.

use crewlet_llm::Phase;

use crate::prompts::PriorIteration;
use crate::skills::render_catalogue;
use crate::tool::first_sentence;
use crate::{PlanDecision, ReviewDecision};

use super::ctx::TurnCtx;
use super::phases::{ExecutePhase, PlanPhase, ReviewPhase};
use super::{GuardKind, TurnDecision, TurnEngine, TurnFailure};

impl TurnEngine {
    /// The phases of the turn until one of them decides how it ends.
    pub(super) async fn drive(&self, t: &TurnCtx<'_>) -> Result<TurnDecision, TurnFailure> {
        let seat_tools = self.tools.tools_for(&t.seat.handle);
        let catalogue: Vec<(String, String)> = seat_tools
            .iter()
            .map(|tool| {
                (
                    tool.name().to_owned(),
                    first_sentence(tool.description(), 160),
                )
            })
            .collect();
        // The skills Plan and Review list match everything the seat has;
        // Execute's match the tools of its plan.
        let plan_skills = render_catalogue(&self.skills.catalogue(Phase::Plan, &seat_tools), true);
        let review_skills =
            render_catalogue(&self.skills.catalogue(Phase::Review, &seat_tools), false);
        // What the seat remembers, asked once and frozen for every Plan
        // of this turn.
        let memory = self
            .recall
            .prefetch(crate::RecallRequest {
                seat: t.seat,
                trigger: t.trigger,
                turn_id: t.turn_id,
                trace: t.span,
            })
            .await;
        let mut prior: Vec<PriorIteration> = Vec::new();
        let mut last_sent_back: Option<String> = None;
        let mut iteration = 0u32;
        loop {
            iteration += 1;
            t.state().iterations = iteration;

            let plan = self
                .run_phase(
                    t,
                    iteration,
                    &PlanPhase {
                        catalogue: &catalogue,
                        skills: &plan_skills,
                        memory: &memory,
                        prior: &prior,
                    },
                )
                .await?;
            t.state().plan = Some(plan.clone());
            if plan.decision == PlanDecision::Skip {
                return Ok(TurnDecision::Skip);
            }

            // A thin trigger gave the turn-start prefetch nothing to go on:
            // the plan may (the knowledge re-fetch, into Execute only).
            let refetched = self
                .recall
                .after_plan(
                    crate::RecallRequest {
                        seat: t.seat,
                        trigger: t.trigger,
                        turn_id: t.turn_id,
                        trace: t.span,
                    },
                    &plan_text(&plan),
                )
                .await;
            let named = plan.tool_names();
            let execute_surface: Vec<_> = seat_tools
                .iter()
                .filter(|tool| named.iter().any(|n| n == tool.name()))
                .cloned()
                .collect();
            let execute_skills = render_catalogue(
                &self.skills.catalogue(Phase::Execute, &execute_surface),
                true,
            );
            let execution = self
                .run_phase(
                    t,
                    iteration,
                    &ExecutePhase {
                        plan: &plan,
                        skills: &execute_skills,
                        memory: &refetched,
                    },
                )
                .await?;
            t.state().final_artifact.clone_from(&execution.final_text);
            if plan.decision == PlanDecision::Direct {
                return Ok(TurnDecision::Direct);
            }

            let review = self
                .run_phase(
                    t,
                    iteration,
                    &ReviewPhase {
                        plan: &plan,
                        skills: &review_skills,
                        execution: &execution,
                    },
                )
                .await?;
            {
                let mut state = t.state();
                state.review = Some(review.clone());
                if !review.final_artifact.trim().is_empty() {
                    state.final_artifact.clone_from(&review.final_artifact);
                }
            }
            match review.decision {
                ReviewDecision::Done => return Ok(TurnDecision::Done),
                ReviewDecision::SelfIterate => {
                    let artifact = review.final_artifact.trim().to_owned();
                    if last_sent_back.as_deref() == Some(artifact.as_str()) {
                        return Err(TurnFailure::guard(
                            GuardKind::Stall,
                            format!(
                                "review sent the work back twice with the same artifact (iteration {iteration})"
                            ),
                        ));
                    }
                    if iteration >= self.settings.max_iterations {
                        return Err(TurnFailure::guard(
                            GuardKind::MaxIter,
                            format!(
                                "review still asked for another pass after {iteration} iterations"
                            ),
                        ));
                    }
                    last_sent_back = Some(artifact);
                    prior.push(PriorIteration {
                        iteration,
                        plan_reasoning: plan.reasoning.clone(),
                        completed_work: review.completed_work.clone(),
                        notes: review.notes.clone(),
                        final_artifact: review.final_artifact.clone(),
                    });
                }
            }
        }
    }
}

/// The plan as a search query would read it: its reasoning and steps.
fn plan_text(plan: &crate::Plan) -> String {
    let mut out = plan.reasoning.trim().to_owned();
    for step in &plan.steps {
        if !step.intent.trim().is_empty() {
            out.push_str("; ");
            out.push_str(step.intent.trim());
        }
    }
    out
}
