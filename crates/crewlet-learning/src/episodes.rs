//! Episodes: one row per finished turn, how they read in a prompt, and
//! their compaction once an agent holds too many raw ones.

use chrono::{DateTime, Utc};
use crewlet_core::payload::EpisodeRecorded;
use crewlet_memory::{Episode, EpisodeKind, MemoryError, NewEpisode};
use crewlet_turn::{AuxCall, Plan, SeatProfile};
use uuid::Uuid;

use crate::learning::{EventContext, Learning, day};
use crate::text::clip;

const COMPACT_SYSTEM: &str = "You condense an agent's old work log. Summarize the turns listed into one \
paragraph: the kinds of tasks, how they were usually handled, the tools that mattered, and what tended \
to fail. Keep names of systems and people. Answer with the paragraph only.";

/// One episode as a prompt bullet.
pub(crate) fn bullet(e: &Episode) -> String {
    let outcome = e.review_outcome.as_deref().unwrap_or("unknown");
    let mut line = format!(
        "- [{} {}] {}",
        day(e.ended_at),
        outcome,
        clip(&e.task_summary, 300)
    );
    if !e.plan_summary.trim().is_empty() {
        line.push_str(&format!(" | plan: {}", clip(&e.plan_summary, 300)));
    }
    if !e.tool_sequence.is_empty() {
        line.push_str(&format!(" | tools: {}", e.tool_sequence.join(" -> ")));
    }
    if e.kind == EpisodeKind::Compacted {
        line.push_str(" | (summary of older turns)");
    }
    line
}

/// The plan in one paragraph: reasoning, then the step intents.
pub(crate) fn plan_summary(plan: Option<&Plan>) -> String {
    let Some(plan) = plan else {
        return String::new();
    };
    let mut out = plan.reasoning.trim().to_owned();
    let steps: Vec<&str> = plan
        .steps
        .iter()
        .map(|s| s.intent.trim())
        .filter(|s| !s.is_empty())
        .collect();
    if !steps.is_empty() {
        if !out.is_empty() {
            out.push_str(" Steps: ");
        }
        out.push_str(&steps.join("; "));
    }
    clip(&out, 1000)
}

impl Learning {
    /// Records `episode` (embedded over its task and plan) and reports it;
    /// `false` when the same turn was already recorded.
    pub(crate) async fn record_episode(
        &self,
        seat: &SeatProfile,
        episode: Episode,
        context: EventContext<'_>,
    ) -> Result<bool, MemoryError> {
        let text = format!("{}\n{}", episode.task_summary, episode.plan_summary);
        let embedding = self.embed(&text).await;
        let payload = EpisodeRecorded {
            episode_id: episode.id,
            kind: episode.kind.as_str().to_owned(),
            outcome: episode.review_outcome.clone(),
            tool_calls: episode.tool_sequence.len(),
            skills_used: episode.skills_used.clone(),
            replaced: 0,
        };
        let new = self
            .stores
            .episodes
            .record(NewEpisode { episode, embedding })
            .await?;
        if new {
            let summary = format!(
                "{} recorded an episode ({})",
                seat.handle,
                payload.outcome.as_deref().unwrap_or("unknown")
            );
            self.emit(seat, context, summary, &payload).await;
        }
        Ok(new)
    }

    /// Folds the oldest raw episodes of every agent over the threshold into
    /// compacted rows, a batch at a time, until each is at or under it.
    /// Returns how many raw episodes were replaced.
    pub async fn compact_episodes(&self) -> Result<usize, MemoryError> {
        let threshold = self.settings.compaction_threshold;
        let batch = self.settings.compaction_batch.max(2);
        let mut replaced = 0;
        for (handle, mut raw) in self.stores.episodes.over_raw_threshold(threshold).await? {
            while raw > threshold {
                let take = batch.min(raw - threshold + 1).max(2);
                let old = self.stores.episodes.oldest_raw(&handle, take).await?;
                if old.len() < 2 {
                    break;
                }
                let n = self.compact_one(&handle, &old).await?;
                if n == 0 {
                    break;
                }
                replaced += n;
                raw = raw.saturating_sub(n);
            }
        }
        Ok(replaced)
    }

    async fn compact_one(&self, handle: &str, old: &[Episode]) -> Result<usize, MemoryError> {
        let listing: Vec<String> = old.iter().map(bullet).collect();
        let listing = listing.join("\n");
        let seat = self.seat(handle);
        let summary = match &seat {
            Some(seat) => self
                .ask(AuxCall {
                    seat,
                    worker: "episode_compactor",
                    system: COMPACT_SYSTEM.to_owned(),
                    user: format!("Turns:\n{listing}"),
                    max_tokens: 600,
                    task_id: None,
                    turn_id: None,
                    trace: None,
                })
                .await
                .ok()
                .filter(|s| !s.trim().is_empty()),
            None => None,
        };
        // Without a model the compacted row keeps the task lines themselves.
        let summary = summary.unwrap_or_else(|| clip(&listing, 4000));
        let first = old.first().map_or_else(Utc::now, |e| e.started_at);
        let last: DateTime<Utc> = old
            .iter()
            .map(|e| e.ended_at)
            .max()
            .unwrap_or_else(Utc::now);
        let mut tools: Vec<String> = Vec::new();
        for t in old.iter().flat_map(|e| e.tool_sequence.iter()) {
            if !tools.contains(t) {
                tools.push(t.clone());
            }
        }
        let compacted = Episode {
            id: Uuid::now_v7(),
            agent_handle: handle.to_owned(),
            agent_id: old.first().and_then(|e| e.agent_id),
            task_id: None,
            task_summary: format!(
                "{} earlier turns ({} to {})",
                old.len(),
                day(first),
                day(last)
            ),
            plan_summary: summary,
            tool_sequence: tools,
            skills_used: Vec::new(),
            review_outcome: Some("compacted".to_owned()),
            started_at: first,
            ended_at: last,
            duration_ms: old.iter().map(|e| e.duration_ms).sum(),
            kind: EpisodeKind::Compacted,
            work_key: None,
        };
        let text = format!("{}\n{}", compacted.task_summary, compacted.plan_summary);
        let embedding = self.embed(&text).await;
        let ids: Vec<Uuid> = old.iter().map(|e| e.id).collect();
        let id = compacted.id;
        let n = self
            .stores
            .episodes
            .compact(
                handle,
                &ids,
                NewEpisode {
                    episode: compacted,
                    embedding,
                },
            )
            .await?;
        if n > 0
            && let Some(seat) = &seat
        {
            let payload = EpisodeRecorded {
                episode_id: id,
                kind: EpisodeKind::Compacted.as_str().to_owned(),
                outcome: Some("compacted".to_owned()),
                tool_calls: 0,
                skills_used: Vec::new(),
                replaced: n,
            };
            let summary = format!("{} compacted {n} old episodes", seat.handle);
            self.emit(seat, EventContext::default(), summary, &payload)
                .await;
        }
        Ok(n)
    }
}
