//! Every prompt a turn sends, in one place.
//!
//! A phase's system prompt has two blocks. The first is stable for a seat
//! and phase (company, seat, phase instructions) and carries the prompt-cache
//! breakpoint; the second changes per turn (trigger, tool catalogue, work so
//! far, the plan, the execution record).
//!
//! Headings (pinned by a test; the prose around them may change):
//! `# Company`, `## Mission`, `## Vision`, `## Policies`, `# Your seat`,
//! `## Goal`, `## Backstory`, `## Responsibilities`,
//! `## Behavioural guidelines`, `## Reporting line`, `# Phase: <phase>`,
//! `# Trigger`, the seat's memory sections (Plan: `## Personal memory`,
//! `## Similar prior work`, ... as [`crate::Recall`] returns them),
//! `## Tool skills` (each phase, when a skill applies),
//! `## Tool catalogue` (Plan), `## Work so far` (Plan after a
//! self-iteration), `## The plan` (Execute, Review), `## What was done`
//! (Review). A section with nothing to say is left out.

use std::fmt::Write as _;

use crewlet_llm::{Phase, SystemBlock};

use crate::{CompanyProfile, MemorySection, Plan, SeatProfile, ToolExecution, Trigger};

/// One earlier iteration of the same turn, as Plan sees it after a
/// `self_iterate` review.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorIteration {
    pub iteration: u32,
    pub plan_reasoning: String,
    pub completed_work: String,
    pub notes: String,
    pub final_artifact: String,
}

/// What Execute produced, as Review sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecutionRecord {
    pub final_text: String,
    pub tool_executions: Vec<ToolExecution>,
    pub hit_round_cap: bool,
}

/// The per-phase part of a prompt.
#[derive(Clone, Copy, Debug)]
pub enum PhaseBrief<'a> {
    Plan {
        /// (name, one-line description) of every tool the seat has.
        catalogue: &'a [(String, String)],
        /// The `## Tool skills` section, empty when there is none.
        skills: &'a str,
        /// What the seat remembers, frozen at turn start.
        memory: &'a [MemorySection],
        prior: &'a [PriorIteration],
    },
    Execute {
        plan: &'a Plan,
        skills: &'a str,
        /// Sections fetched after the plan (the thin-trigger knowledge
        /// re-fetch), empty when there are none.
        memory: &'a [MemorySection],
    },
    Review {
        plan: &'a Plan,
        skills: &'a str,
        execution: &'a ExecutionRecord,
    },
}

impl PhaseBrief<'_> {
    pub fn phase(&self) -> Phase {
        match self {
            PhaseBrief::Plan { .. } => Phase::Plan,
            PhaseBrief::Execute { .. } => Phase::Execute,
            PhaseBrief::Review { .. } => Phase::Review,
        }
    }
}

const PLAN_INSTRUCTIONS: &str = "\
Decide how to handle the trigger below. You may first call the read-only tools offered to \
look things up. Then call `submit_plan` exactly once:
- `plan`: concrete steps (intent, approach, tools, on_failure), the names of the tools the \
work needs in `tools_needed`, and checkable `success_criteria`. The work is reviewed afterwards.
- `direct`: the work is simple enough to do at once and needs no review (still name the tools).
- `skip`: there is nothing for you to do (not meant for you, already done, outside your role).
Only tools in the catalogue exist; name them exactly.";

const EXECUTE_INSTRUCTIONS: &str = "\
Carry out the plan below with the tools offered, step by step. When a step fails, follow \
its `on_failure`. Act only within your role and the company's policies. When the work is \
done, reply without calling tools: a short account of what you did, then the deliverable.";

const REVIEW_INSTRUCTIONS: &str = "\
Check the work below against the plan's success criteria. You may call the read-only tools \
offered to verify it. Then call `submit_review` exactly once: `done` when the criteria are \
met, `self_iterate` when something is missing that another attempt would fix. Put what was \
actually done in `completed_work` and the deliverable in `final_artifact`.";

fn push_list(out: &mut String, heading: &str, items: &[String]) {
    let items: Vec<&String> = items.iter().filter(|i| !i.trim().is_empty()).collect();
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{heading}");
    for item in items {
        let _ = writeln!(out, "- {}", item.trim());
    }
}

fn push_text(out: &mut String, heading: &str, text: &str) {
    if text.trim().is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{heading}\n{}", text.trim());
}

fn colleague(c: &crate::Colleague) -> String {
    let kind = if c.human { ", human" } else { "" };
    format!("{} (@{}{kind})", c.name, c.handle)
}

/// The stable block: company, seat, phase instructions.
pub fn identity_block(company: &CompanyProfile, seat: &SeatProfile, phase: Phase) -> String {
    let mut out = String::with_capacity(2048);
    let _ = writeln!(out, "# Company: {}", company.name);
    push_text(&mut out, "## Mission", &company.mission);
    push_text(&mut out, "## Vision", &company.vision);
    push_list(&mut out, "## Policies", &company.policies);

    let _ = writeln!(out, "\n# Your seat: {} (@{})", seat.role_name, seat.handle);
    push_text(&mut out, "## Goal", &seat.goal);
    push_text(&mut out, "## Backstory", &seat.backstory);
    push_list(&mut out, "## Responsibilities", &seat.responsibilities);
    push_list(&mut out, "## Behavioural guidelines", &seat.guidelines);
    if !seat.manager_chain.is_empty() || !seat.reports.is_empty() {
        let _ = writeln!(out, "\n## Reporting line");
        if !seat.manager_chain.is_empty() {
            let chain: Vec<String> = seat.manager_chain.iter().map(colleague).collect();
            let _ = writeln!(
                out,
                "Your manager chain (nearest first): {}",
                chain.join(" -> ")
            );
        }
        if !seat.reports.is_empty() {
            let reports: Vec<String> = seat.reports.iter().map(colleague).collect();
            let _ = writeln!(out, "Reporting to you: {}", reports.join(", "));
        }
    }

    let (title, instructions) = match phase {
        Phase::Plan => ("Plan", PLAN_INSTRUCTIONS),
        Phase::Execute => ("Execute", EXECUTE_INSTRUCTIONS),
        Phase::Review => ("Review", REVIEW_INSTRUCTIONS),
        Phase::Auxiliary => ("Auxiliary", ""),
    };
    let _ = writeln!(out, "\n# Phase: {title}\n{instructions}");
    out
}

fn plan_summary(out: &mut String, plan: &Plan) {
    let _ = writeln!(out, "\n## The plan\nDecision: {}", plan.decision.as_str());
    if !plan.reasoning.trim().is_empty() {
        let _ = writeln!(out, "Reasoning: {}", plan.reasoning.trim());
    }
    for (i, step) in plan.steps.iter().enumerate() {
        let _ = write!(out, "{}. {}", i + 1, step.intent.trim());
        if !step.approach.trim().is_empty() {
            let _ = write!(out, " -- {}", step.approach.trim());
        }
        if !step.tools.is_empty() {
            let _ = write!(out, " [tools: {}]", step.tools.join(", "));
        }
        if !step.on_failure.trim().is_empty() {
            let _ = write!(out, " (on failure: {})", step.on_failure.trim());
        }
        out.push('\n');
    }
    if !plan.success_criteria.is_empty() {
        let _ = writeln!(out, "Success criteria:");
        for c in &plan.success_criteria {
            let _ = writeln!(out, "- {c}");
        }
    }
}

fn push_skills(out: &mut String, skills: &str) {
    if !skills.trim().is_empty() {
        let _ = writeln!(out, "\n{}", skills.trim_end());
    }
}

/// The per-turn block: trigger and the phase's material.
pub fn turn_block(trigger: &Trigger, brief: &PhaseBrief<'_>) -> String {
    let mut out = String::with_capacity(1024);
    let _ = writeln!(out, "# Trigger");
    let _ = write!(out, "Source: {}", trigger.source);
    if let Some(sender) = &trigger.sender {
        let _ = write!(out, "; from: {sender}");
    }
    if let Some(channel) = &trigger.channel {
        let _ = write!(out, "; channel: {channel}");
    }
    // No task id: it is new on every wake, and the model never needs it
    // (tools get it from their context), while a prompt cache would lose
    // everything after it.
    out.push('\n');
    let _ = writeln!(out, "\n{}", trigger.content.trim());

    match brief {
        PhaseBrief::Plan {
            catalogue,
            skills,
            memory,
            prior,
        } => {
            for section in memory.iter() {
                if !section.body.trim().is_empty() {
                    let _ = writeln!(out, "\n{}\n{}", section.heading.trim(), section.body.trim());
                }
            }
            push_skills(&mut out, skills);
            if !catalogue.is_empty() {
                let _ = writeln!(out, "\n## Tool catalogue");
                for (name, description) in catalogue.iter() {
                    let _ = writeln!(out, "- {name}: {description}");
                }
            }
            if !prior.is_empty() {
                let _ = writeln!(
                    out,
                    "\n## Work so far\nEarlier attempts in this turn were reviewed and sent back. Build on them; do not repeat them."
                );
                for p in prior.iter() {
                    let _ = writeln!(out, "### Iteration {}", p.iteration);
                    if !p.plan_reasoning.trim().is_empty() {
                        let _ = writeln!(out, "Plan: {}", p.plan_reasoning.trim());
                    }
                    if !p.completed_work.trim().is_empty() {
                        let _ = writeln!(out, "Completed work: {}", p.completed_work.trim());
                    }
                    if !p.final_artifact.trim().is_empty() {
                        let _ = writeln!(out, "Artifact: {}", p.final_artifact.trim());
                    }
                    if !p.notes.trim().is_empty() {
                        let _ = writeln!(out, "Review notes: {}", p.notes.trim());
                    }
                }
            }
        }
        PhaseBrief::Execute {
            plan,
            skills,
            memory,
        } => {
            plan_summary(&mut out, plan);
            push_skills(&mut out, skills);
            for section in memory.iter() {
                if !section.body.trim().is_empty() {
                    let _ = writeln!(out, "\n{}\n{}", section.heading.trim(), section.body.trim());
                }
            }
        }
        PhaseBrief::Review {
            plan,
            skills,
            execution,
        } => {
            plan_summary(&mut out, plan);
            push_skills(&mut out, skills);
            let _ = writeln!(out, "\n## What was done");
            if execution.tool_executions.is_empty() {
                let _ = writeln!(out, "No tools were called.");
            } else {
                let calls: Vec<String> = execution
                    .tool_executions
                    .iter()
                    .map(|t| format!("{} ({})", t.name, if t.ok { "ok" } else { "failed" }))
                    .collect();
                let _ = writeln!(out, "Tool calls: {}", calls.join(", "));
            }
            if execution.hit_round_cap {
                let _ = writeln!(out, "Execution stopped at its round limit.");
            }
            let _ = writeln!(out, "Final report:\n{}", execution.final_text.trim());
        }
    }
    out
}

/// The system prompt of a phase: stable identity block, then the turn block.
pub fn system_prompt(
    company: &CompanyProfile,
    seat: &SeatProfile,
    trigger: &Trigger,
    brief: &PhaseBrief<'_>,
) -> Vec<SystemBlock> {
    vec![
        SystemBlock::stable(identity_block(company, seat, brief.phase())),
        SystemBlock::volatile(turn_block(trigger, brief)),
    ]
}

/// The user message that starts a phase.
pub fn kickoff(phase: Phase) -> &'static str {
    match phase {
        Phase::Plan => "Plan how to handle the trigger, then call submit_plan.",
        Phase::Execute => "Carry out the plan.",
        Phase::Review => "Review the work, then call submit_review.",
        Phase::Auxiliary => "Go ahead.",
    }
}

/// The user message of a rescue round, when a phase ended without its
/// decision tool.
pub fn rescue(tool: &str) -> String {
    format!("You have not called {tool}. Call {tool} now; it is the only way to finish this phase.")
}

/// The user message of the grace round after the round cap.
pub const GRACE: &str = "You have reached the round limit for this phase. Do not call tools. \
Summarize what you did, what the outcome is, and what remains undone.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Colleague, PlanDecision, PlanStep};

    fn company() -> CompanyProfile {
        CompanyProfile {
            name: "Nimbus".into(),
            mission: "Make weather boring".into(),
            vision: "Every forecast right".into(),
            policies: vec!["No customer data in chat".into()],
            ..CompanyProfile::default()
        }
    }

    fn seat() -> SeatProfile {
        let mut s = SeatProfile::new("Nimbus", "eng", "Senior Engineer");
        s.goal = "Ship reliable code".into();
        s.backstory = "Ten years of on-call".into();
        s.responsibilities = vec!["Review merge requests".into()];
        s.guidelines = vec!["Ask before deleting".into()];
        s.manager_chain = vec![
            Colleague::agent("CTO", "cto"),
            Colleague::human("Founder", "ada"),
        ];
        s.reports = vec![Colleague::agent("Junior", "jr")];
        s
    }

    fn trigger() -> Trigger {
        let mut t = Trigger::new("task-1", "slack", "Please fix the build");
        t.sender = Some("U42".into());
        t
    }

    fn headings(text: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with('#'))
            .map(|l| l.split(':').next().unwrap_or(l).trim().to_owned())
            .collect()
    }

    fn plan() -> Plan {
        Plan {
            decision: PlanDecision::Plan,
            reasoning: "build is red".into(),
            steps: vec![PlanStep {
                intent: "read the log".into(),
                approach: "ci tool".into(),
                tools: vec!["ci_log".into()],
                on_failure: "ask the CTO".into(),
            }],
            tools_needed: vec!["ci_log".into()],
            success_criteria: vec!["build green".into()],
        }
    }

    #[test]
    fn plan_prompt_has_every_section() {
        let catalogue = vec![("ci_log".to_owned(), "Reads a CI log.".to_owned())];
        let prior = vec![PriorIteration {
            iteration: 1,
            plan_reasoning: "try again".into(),
            completed_work: "read log".into(),
            notes: "not fixed".into(),
            final_artifact: "v1".into(),
        }];
        let blocks = system_prompt(
            &company(),
            &seat(),
            &trigger(),
            &PhaseBrief::Plan {
                skills: "",
                catalogue: &catalogue,
                memory: &[
                    MemorySection::new("## Personal memory", "- The deploy window is Tuesday."),
                    MemorySection::new("## Similar prior work", "  "),
                ],
                prior: &prior,
            },
        );
        assert_eq!(blocks.len(), 2);
        assert!(blocks[0].cache && !blocks[1].cache);
        assert_eq!(
            headings(&blocks[0].text),
            [
                "# Company",
                "## Mission",
                "## Vision",
                "## Policies",
                "# Your seat",
                "## Goal",
                "## Backstory",
                "## Responsibilities",
                "## Behavioural guidelines",
                "## Reporting line",
                "# Phase"
            ]
        );
        assert_eq!(
            headings(&blocks[1].text),
            [
                "# Trigger",
                "## Personal memory",
                "## Tool catalogue",
                "## Work so far",
                "### Iteration 1"
            ]
        );
        assert!(blocks[0].text.contains("# Phase: Plan"));
        assert!(
            blocks[0]
                .text
                .contains("CTO (@cto) -> Founder (@ada, human)")
        );
        assert!(blocks[1].text.contains("Please fix the build"));
        assert!(blocks[1].text.contains("- The deploy window is Tuesday."));
    }

    #[test]
    fn execute_and_review_prompts_carry_the_plan_and_the_work() {
        let plan = plan();
        let exec = system_prompt(
            &company(),
            &seat(),
            &trigger(),
            &PhaseBrief::Execute {
                skills: "",
                plan: &plan,
                memory: &[],
            },
        );
        assert!(exec[0].text.contains("# Phase: Execute"));
        assert_eq!(headings(&exec[1].text), ["# Trigger", "## The plan"]);
        let record = ExecutionRecord {
            final_text: "fixed".into(),
            tool_executions: vec![ToolExecution {
                name: "ci_log".into(),
                ok: true,
                duration_ms: 3,
            }],
            hit_round_cap: false,
        };
        let review = system_prompt(
            &company(),
            &seat(),
            &trigger(),
            &PhaseBrief::Review {
                skills: "",
                plan: &plan,
                execution: &record,
            },
        );
        assert!(review[0].text.contains("# Phase: Review"));
        assert_eq!(
            headings(&review[1].text),
            ["# Trigger", "## The plan", "## What was done"]
        );
        assert!(review[1].text.contains("ci_log (ok)"));
    }

    #[test]
    fn empty_sections_are_left_out() {
        let bare_company = CompanyProfile {
            name: "Bare".into(),
            ..CompanyProfile::default()
        };
        let bare_seat = SeatProfile::new("Bare", "x", "Helper");
        let text = identity_block(&bare_company, &bare_seat, Phase::Execute);
        assert_eq!(headings(&text), ["# Company", "# Your seat", "# Phase"]);
    }

    #[test]
    fn the_system_prompt_is_byte_stable_across_turns_of_the_same_trigger() {
        // Two wakes by the same request are two tasks: nothing per-wake
        // (task id, time, uuid) may enter the system prompt, so a provider's
        // prompt cache serves the second from the first.
        let plan = plan();
        let brief = PhaseBrief::Execute {
            skills: "",
            plan: &plan,
            memory: &[],
        };
        let first = trigger();
        let mut second = trigger();
        second.task_id = "task-2".into();
        let a = system_prompt(&company(), &seat(), &first, &brief);
        let b = system_prompt(&company(), &seat(), &second, &brief);
        assert_eq!(a, b);
        assert!(!a[1].text.contains("task-1"), "{}", a[1].text);
    }

    #[test]
    fn the_stable_block_does_not_depend_on_the_trigger() {
        let plan = plan();
        let a = system_prompt(
            &company(),
            &seat(),
            &trigger(),
            &PhaseBrief::Execute {
                skills: "",
                plan: &plan,
                memory: &[],
            },
        );
        let other = Trigger::new("task-2", "plane", "Something else");
        let b = system_prompt(
            &company(),
            &seat(),
            &other,
            &PhaseBrief::Execute {
                skills: "",
                plan: &plan,
                memory: &[],
            },
        );
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
    }
}
