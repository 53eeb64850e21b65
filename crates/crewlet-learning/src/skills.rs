//! Synthesized skills: drafting one from a successful turn, refining the
//! ones a turn used, and the version-keeping writes both share.

use std::fmt::Write as _;

use crewlet_core::payload::{SkillRefined, SkillSynthesized};
use crewlet_memory::{MemoryError, NewSkill, Skill, SkillChange, SkillState};
use crewlet_turn::{AuxCall, SeatProfile};
use uuid::Uuid;

use crate::learning::{EventContext, Learning};
use crate::text::{clip, field, jaccard, json_in, slug};

const SYNTH_SYSTEM: &str = "You turn an agent's successful piece of work into a reusable skill: a short \
procedure it can follow the next time a similar task comes. Generalize: no ids, dates or one-off names \
unless they are stable (a repository, a channel). Answer with one JSON object: {\"name\": a short \
kebab-case name, \"description\": one sentence saying when to use it, \"body\": Markdown with a \
'## When to use' section and a numbered '## Steps' section naming the tools}. Answer {} when the work \
is too specific to reuse.";

const REFINE_SYSTEM: &str = "An agent followed one of its own skills in a turn. Say in one sentence the \
single most useful lesson the turn adds to the skill (something that helped, or something that went \
wrong and how to avoid it). Answer NOOP when the turn adds nothing.";

/// What one turn offers the skill workers.
pub(crate) struct SkillSource<'a> {
    pub task: &'a str,
    pub plan: &'a str,
    pub artifact: &'a str,
    pub tools: &'a [String],
    pub succeeded: bool,
}

impl Learning {
    /// After a `done` turn with enough tool calls: refine the skill whose
    /// tool set matches, or draft a new one.
    pub(crate) async fn synthesize(
        &self,
        seat: &SeatProfile,
        source: &SkillSource<'_>,
        turn_id: Uuid,
        context: EventContext<'_>,
    ) -> Result<(), MemoryError> {
        let limits = self.settings.skill_limits;
        let live = self
            .stores
            .skills
            .list(&seat.handle, &[SkillState::Active, SkillState::Stale])
            .await?;
        let best = live
            .iter()
            .map(|s| (jaccard(&s.tool_sequence, source.tools), s))
            .filter(|(j, _)| *j >= self.settings.duplicate_jaccard)
            .max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((_, existing)) = best {
            let note = format!(
                "Observed in practice: the same tools served \"{}\".",
                clip(source.task, 160)
            );
            self.append_to_skill(
                seat,
                existing,
                &note,
                "merged",
                "skill_synthesizer",
                turn_id,
                context,
            )
            .await?;
            return Ok(());
        }
        if live.len() >= limits.max_per_agent {
            tracing::debug!(agent = %seat.handle, "skill cap reached; no new skill drafted");
            return Ok(());
        }
        let mut user = String::new();
        let _ = writeln!(user, "Task:\n{}\n", clip(source.task, 3000));
        let _ = writeln!(user, "Plan: {}", clip(source.plan, 2000));
        let _ = writeln!(user, "Tools, in order: {}", source.tools.join(" -> "));
        let _ = writeln!(user, "Result: {}", clip(source.artifact, 2000));
        let Ok(answer) = self
            .ask(AuxCall {
                seat,
                worker: "skill_synthesizer",
                system: SYNTH_SYSTEM.to_owned(),
                user,
                max_tokens: 1500,
                task_id: context.task_id,
                turn_id: Some(turn_id),
                trace: context.trace,
            })
            .await
        else {
            return Ok(());
        };
        let Some(v) = json_in(&answer, '{') else {
            return Ok(());
        };
        let (Some(name), Some(body)) = (field(&v, "name"), field(&v, "body")) else {
            return Ok(());
        };
        let name = slug(name);
        if name.is_empty() {
            return Ok(());
        }
        let description = field(&v, "description").unwrap_or("").to_owned();
        let embedding = self.embed(&format!("{name}: {description}\n{body}")).await;
        let created = self
            .stores
            .skills
            .create(
                NewSkill {
                    agent_handle: seat.handle.clone(),
                    name: name.clone(),
                    description,
                    body: body.to_owned(),
                    tool_sequence: source.tools.to_vec(),
                    embedding,
                },
                limits,
            )
            .await;
        match created {
            Ok(skill) => {
                let payload = SkillSynthesized {
                    skill_id: skill.id,
                    name: skill.name.clone(),
                    description: skill.description.clone(),
                    tool_sequence: skill.tool_sequence.clone(),
                    turn_id: Some(turn_id),
                };
                let summary = format!("{} learned a skill: {}", seat.handle, skill.name);
                self.emit(seat, context, summary, &payload).await;
                Ok(())
            }
            // A name already taken or the cap reached meanwhile: nothing new.
            Err(MemoryError::Conflict(_) | MemoryError::Limit(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// After a turn that used skills: one lesson per skill, appended as
    /// "Observed in practice" (done) or "Counter-example" (failed).
    pub(crate) async fn refine_used(
        &self,
        seat: &SeatProfile,
        used: &[String],
        source: &SkillSource<'_>,
        turn_id: Uuid,
        context: EventContext<'_>,
    ) -> Result<(), MemoryError> {
        for name in used {
            let Some(skill) = self.stores.skills.get(&seat.handle, name).await? else {
                continue;
            };
            let user = format!(
                "Skill `{}`:\n{}\n\nTask: {}\nOutcome: {}\nTools: {}\nResult: {}",
                skill.name,
                clip(&skill.body, 6000),
                clip(source.task, 2000),
                if source.succeeded { "done" } else { "failed" },
                source.tools.join(" -> "),
                clip(source.artifact, 1500),
            );
            let Ok(answer) = self
                .ask(AuxCall {
                    seat,
                    worker: "skill_refiner",
                    system: REFINE_SYSTEM.to_owned(),
                    user,
                    max_tokens: 300,
                    task_id: context.task_id,
                    turn_id: Some(turn_id),
                    trace: context.trace,
                })
                .await
            else {
                continue;
            };
            let lesson = answer.trim();
            if lesson.is_empty() || lesson.eq_ignore_ascii_case("noop") {
                continue;
            }
            let (label, action) = if source.succeeded {
                ("Observed in practice", "observed")
            } else {
                ("Counter-example", "counter_example")
            };
            let note = format!("{label}: {}", clip(lesson, 600));
            match self
                .append_to_skill(
                    seat,
                    &skill,
                    &note,
                    action,
                    "skill_refiner",
                    turn_id,
                    context,
                )
                .await
            {
                Ok(_) | Err(MemoryError::Limit(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Appends a bullet to a skill's body as a new version.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn append_to_skill(
        &self,
        seat: &SeatProfile,
        skill: &Skill,
        bullet: &str,
        action: &str,
        writer: &str,
        turn_id: Uuid,
        context: EventContext<'_>,
    ) -> Result<Skill, MemoryError> {
        let mut body = skill.body.trim_end().to_owned();
        let _ = write!(body, "\n- {}\n", bullet.trim());
        self.change_skill(
            seat,
            &skill.name,
            SkillChange {
                description: None,
                body,
                change_note: clip(bullet, 300),
                embedding: None,
            },
            action,
            writer,
            Some(turn_id),
            context,
        )
        .await
    }

    /// Applies a change (a new version) and reports `skill_refined`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn change_skill(
        &self,
        seat: &SeatProfile,
        name: &str,
        change: SkillChange,
        action: &str,
        writer: &str,
        turn_id: Option<Uuid>,
        context: EventContext<'_>,
    ) -> Result<Skill, MemoryError> {
        let note = change.change_note.clone();
        let skill = self
            .stores
            .skills
            .update(&seat.handle, name, change, self.settings.skill_limits)
            .await?;
        let payload = SkillRefined {
            skill_id: skill.id,
            name: skill.name.clone(),
            version: skill.version,
            action: action.to_owned(),
            writer: writer.to_owned(),
            change_note: note,
            turn_id,
        };
        let summary = format!(
            "{} refined skill {} (v{})",
            seat.handle, skill.name, skill.version
        );
        self.emit(seat, context, summary, &payload).await;
        Ok(skill)
    }
}
