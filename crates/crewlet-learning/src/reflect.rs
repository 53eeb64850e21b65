//! After a turn: the deterministic harness that learns from it whether or
//! not the agent remembered to. One episode row, the persist decider,
//! skill synthesis and refinement, counterparty profiles.
//!
//! Best-effort throughout: a failed step is logged and the next one still
//! runs; nothing here can fail the turn, which has already ended.
//! Idempotent: the episode's id is the turn id, so a turn reflected twice
//! (a redelivered completion, a retried handler) finds its episode and
//! writes nothing more.

use chrono::{Duration, Utc};
use crewlet_memory::{Episode, EpisodeKind};
use crewlet_turn::{FailureReason, SeatProfile, Trigger, TurnDecision, TurnOutcome};

use crate::episodes::plan_summary;
use crate::learning::{EventContext, Learning};
use crate::persist::TurnDigest;
use crate::prefetch::TASK_CHARS;
use crate::skills::SkillSource;
use crate::text::clip;

/// What a reflection did (for logs and tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reflection {
    /// Why nothing was done, when nothing was.
    pub skipped: Option<&'static str>,
    pub episode_recorded: bool,
}

impl Reflection {
    fn skipped(why: &'static str) -> Self {
        Self {
            skipped: Some(why),
            episode_recorded: false,
        }
    }
}

impl Learning {
    /// Learns from one finished turn of `seat`.
    pub async fn reflect(
        &self,
        seat: &SeatProfile,
        trigger: &Trigger,
        outcome: &TurnOutcome,
    ) -> Reflection {
        let memo = self.memos.finish(outcome.turn_id);
        if !self.settings.reflect {
            return Reflection::skipped("reflection is off");
        }
        if !self.is_enabled(&seat.handle) {
            return Reflection::skipped("the role opted out of learning");
        }
        if let Some(f) = &outcome.failure {
            match f.reason {
                FailureReason::BudgetExhausted(_) => {
                    return Reflection::skipped("the seat's budget is exhausted");
                }
                FailureReason::StoreUnavailable => {
                    return Reflection::skipped("the turn will run again");
                }
                _ => {}
            }
        }
        if outcome.decision == TurnDecision::Skip {
            return Reflection::skipped("the turn was skipped");
        }
        if !self.reflected.insert(outcome.turn_id) {
            return Reflection::skipped("already reflected");
        }
        match self
            .stores
            .episodes
            .contains(&seat.handle, outcome.turn_id)
            .await
        {
            Ok(true) => return Reflection::skipped("already reflected"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(agent = %seat.handle, error = %e, "episode lookup failed; reflection skipped");
                return Reflection::skipped("the memory store is unavailable");
            }
        }

        let context = EventContext {
            task_id: Some(trigger.task_id.as_str()),
            trace: trigger.trace,
        };
        let task = if memo.task.is_empty() {
            clip(&trigger.content, TASK_CHARS)
        } else {
            memo.task.clone()
        };
        let tools: Vec<String> = outcome
            .phases
            .iter()
            .flat_map(|p| p.tool_executions.iter().map(|t| t.name.clone()))
            .collect();
        let plan = plan_summary(outcome.plan.as_ref());
        let ended_at = Utc::now();
        let duration = Duration::from_std(outcome.duration).unwrap_or_else(|_| Duration::zero());
        let episode = Episode {
            id: outcome.turn_id,
            agent_handle: seat.handle.clone(),
            agent_id: Some(seat.agent_id),
            task_id: Some(outcome.task_id.clone()),
            task_summary: clip(&task, 1000),
            plan_summary: plan.clone(),
            tool_sequence: tools.clone(),
            skills_used: memo.skills_used.clone(),
            review_outcome: Some(outcome.decision.as_str().to_owned()),
            started_at: ended_at - duration,
            ended_at,
            duration_ms: duration.num_milliseconds(),
            kind: EpisodeKind::Raw,
            work_key: trigger.channel.clone(),
        };
        let recorded = match self.record_episode(seat, episode, context).await {
            Ok(true) => true,
            Ok(false) => return Reflection::skipped("already reflected"),
            Err(e) => {
                tracing::warn!(agent = %seat.handle, error = %e, "recording the episode failed");
                false
            }
        };

        let review = outcome.review.as_ref();
        let failure = outcome.failure.as_ref().map(|f| f.detail.as_str());
        if self.settings.persist_decider && !memo.persisted {
            let digest = TurnDigest {
                task: &task,
                decision: outcome.decision.as_str(),
                plan: &plan,
                completed_work: review.map_or("", |r| r.completed_work.as_str()),
                notes: review.map_or("", |r| r.notes.as_str()),
                artifact: &outcome.final_artifact,
                failure,
            };
            self.decide_and_persist(seat, &digest, outcome.turn_id, context)
                .await;
        }

        let source = SkillSource {
            task: &task,
            plan: &plan,
            artifact: &outcome.final_artifact,
            tools: &tools,
            succeeded: outcome.succeeded() && outcome.decision != TurnDecision::Failed,
        };
        if self.settings.skill_synthesis
            && outcome.decision == TurnDecision::Done
            && tools.len() >= self.settings.min_tool_calls
            && let Err(e) = self
                .synthesize(seat, &source, outcome.turn_id, context)
                .await
        {
            tracing::warn!(agent = %seat.handle, error = %e, "skill synthesis failed");
        }
        if self.settings.skill_refinement
            && !memo.skills_used.is_empty()
            && let Err(e) = self
                .refine_used(seat, &memo.skills_used, &source, outcome.turn_id, context)
                .await
        {
            tracing::warn!(agent = %seat.handle, error = %e, "skill refinement failed");
        }

        if self.settings.counterparty {
            for (sender, said) in senders(trigger) {
                self.observe_sender(
                    seat,
                    &sender,
                    &trigger.source,
                    &said,
                    outcome.turn_id,
                    context,
                )
                .await;
            }
        }
        Reflection {
            skipped: None,
            episode_recorded: recorded,
        }
    }

    /// The maintenance tick: expired `diary_short` rows are deleted and
    /// agents over the raw-episode threshold are compacted. Returns
    /// (diary rows deleted, raw episodes compacted).
    pub async fn maintain(&self) -> (u64, usize) {
        let deleted = self
            .stores
            .diary
            .delete_expired(Utc::now())
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "deleting expired diary rows failed");
                0
            });
        let compacted = self.compact_episodes().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "episode compaction failed");
            0
        });
        (deleted, compacted)
    }
}

/// Who spoke in `trigger` and what each said, first speaker first: the
/// latest sender with the whole trigger, and each other sender of a merged
/// trigger with their own messages.
fn senders(trigger: &Trigger) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    if let Some(s) = trigger.sender.as_deref().filter(|s| !s.trim().is_empty()) {
        out.push((s.to_owned(), trigger.content.clone()));
    }
    for (sender, text) in &trigger.earlier {
        let Some(s) = sender.as_deref().filter(|s| !s.trim().is_empty()) else {
            continue;
        };
        match out.iter_mut().find(|(who, _)| who == s) {
            // The latest sender's observation already reads the digest.
            Some(_) if Some(s) == trigger.sender.as_deref() => {}
            Some((_, said)) => {
                said.push_str("\n\n");
                said.push_str(text);
            }
            None => out.push((s.to_owned(), text.clone())),
        }
    }
    out
}

#[cfg(test)]
mod sender_tests {
    use super::*;

    #[test]
    fn every_sender_of_a_merged_trigger_is_observed_once_with_their_own_words() {
        let mut t = Trigger::new("t", "github", "digest of the burst");
        t.sender = Some("ann".into());
        t.earlier = vec![
            (Some("bob".into()), "first from bob".into()),
            (Some("ann".into()), "early ann".into()),
            (None, "anonymous".into()),
            (Some("bob".into()), "second from bob".into()),
        ];
        let got = senders(&t);
        assert_eq!(
            got,
            vec![
                ("ann".to_owned(), "digest of the burst".to_owned()),
                (
                    "bob".to_owned(),
                    "first from bob\n\nsecond from bob".to_owned()
                ),
            ]
        );
        assert!(senders(&Trigger::new("t", "api", "x")).is_empty());
    }
}
