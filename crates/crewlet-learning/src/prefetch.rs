//! The Plan prefetch: what a seat remembers, asked once at turn start and
//! frozen into every Plan prompt of the turn.
//!
//! Blocks, in prompt order (each left out when it has nothing to say):
//! - `## Personal memory`: diary candidates (vector top-K to the trigger
//!   union recency top-K, deduplicated, capped), cut by the auxiliary
//!   relevance filter to a few entries within a character budget. Without
//!   a working filter nothing is shown: an unfiltered recency list would
//!   surface what one person said about another to the wrong turn.
//! - `## People in this conversation`: what the seat knows of the sender.
//! - `## Similar prior work`: the nearest earlier episodes, summarized by
//!   the auxiliary model (raw bullets when that is off or fails).
//! - `## Synthesized skills you've learned`: names and descriptions.
//! - `## First-turn onboarding`: until the seat calls `mark_onboarded` for
//!   its current place in the org.

use std::fmt::Write as _;
use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewlet_core::payload::{MemoryPrefetched, PrefetchBlock};
use crewlet_memory::{Diary, DiaryEntry, DiaryKind, EpisodeFilter, Page, SkillState};
use crewlet_turn::{AuxCall, MemorySection, Recall, RecallRequest, SeatProfile};
use uuid::Uuid;

use crate::learning::{EventContext, Learning, day};
use crate::memo::TurnMemo;
use crate::settings::LearningSettings;
use crate::text::{clip, indices};

pub const PERSONAL_MEMORY: &str = "## Personal memory";
pub const PEOPLE: &str = "## People in this conversation";
pub const SIMILAR_WORK: &str = "## Similar prior work";
pub const SKILLS: &str = "## Synthesized skills you've learned";
pub const ONBOARDING: &str = "## First-turn onboarding";

/// Characters of the trigger the relevance steps read.
pub(crate) const TASK_CHARS: usize = 4000;

/// Shown when the seat has memories but the filter chose none.
const NOTHING_SELECTED: &str = "You have personal memories, but none looked relevant to this trigger as written. \
If your research shows the task is about something specific, call `refresh_memory` with what you learned.";

const FILTER_SYSTEM: &str = "You choose which of an agent's own memories help with the task in front of it. \
A memory helps when it states a fact, preference or situation that changes how this task should be done. \
A memory about one person applies only when the task involves that person. \
Answer with a JSON array of the numbers of the helpful memories, most helpful first, and nothing else. \
Answer [] when none helps.";

const EPISODES_SYSTEM: &str = "You brief an agent on its own earlier work that resembles its new task. \
From the past turns listed, say in a few short bullets what was done, what worked, what failed, and anything \
that should be done differently now. Do not invent details; answer only with the bullets.";

/// The diary's hybrid candidate pool for `query` (vector top-K union
/// recency top-K, deduplicated by id, capped), vector hits first.
pub(crate) async fn diary_candidates(
    learning: &Learning,
    seat: &SeatProfile,
    text: &str,
    query: Option<&[f32]>,
) -> Vec<DiaryEntry> {
    hybrid_candidates(
        learning.stores.diary.as_ref(),
        seat,
        text,
        query,
        &learning.settings,
        Utc::now(),
    )
    .await
}

/// The hybrid candidate pool the Plan prefetch and `refresh_memory` hand
/// to the relevance filter: the seat's `diary_vector_limit` live rows most
/// similar to `query` (none without a query), in similarity order, then
/// its `diary_recency_limit` newest live rows not already in, deduplicated
/// by id and cut to `candidate_pool`, then ordered by meaning, words and
/// age together ([`crate::rank`]) for the trigger `text`. A failed read is
/// logged and counts as empty. Public so the recall test measures this
/// very selection.
pub async fn hybrid_candidates(
    diary: &dyn Diary,
    seat: &SeatProfile,
    text: &str,
    query: Option<&[f32]>,
    settings: &LearningSettings,
    now: DateTime<Utc>,
) -> Vec<DiaryEntry> {
    let s = settings;
    let (similar, recent) = tokio::join!(
        async {
            match query {
                Some(q) => diary
                    .similar(&seat.agent_id, q, s.diary_vector_limit, now)
                    .await
                    .unwrap_or_else(|e| {
                        tracing::warn!(agent = %seat.handle, error = %e, "diary vector search failed");
                        Vec::new()
                    }),
                None => Vec::new(),
            }
        },
        async {
            diary
                .recent(&seat.agent_id, Page::first(s.diary_recency_limit), now)
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(agent = %seat.handle, error = %e, "diary recency read failed");
                    Vec::new()
                })
        }
    );
    crate::rank::rank_candidates(text, similar, recent, s.candidate_pool, s.pool_weights)
}

/// The relevance filter over `candidates`: the indices it kept, `None`
/// when it could not run.
pub(crate) async fn filter_candidates(
    learning: &Learning,
    seat: &SeatProfile,
    task: &str,
    sender: Option<&str>,
    candidates: &[DiaryEntry],
    turn: (
        Option<&str>,
        Option<Uuid>,
        Option<crewlet_core::TraceContext>,
    ),
    worker: &str,
) -> Option<Vec<usize>> {
    let mut user = String::with_capacity(4096);
    let _ = writeln!(user, "Task:\n{}\n", clip(task, TASK_CHARS));
    if let Some(sender) = sender {
        let _ = writeln!(user, "Current sender: {sender}\n");
    }
    let _ = writeln!(user, "Memories:");
    for (i, e) in candidates.iter().enumerate() {
        let _ = writeln!(user, "{i}. {}", bullet_text(e));
    }
    let answer = learning
        .ask(AuxCall {
            seat,
            worker,
            system: FILTER_SYSTEM.to_owned(),
            user,
            max_tokens: 300,
            task_id: turn.0,
            turn_id: turn.1,
            trace: turn.2,
        })
        .await
        .ok()?;
    let picked = indices(&answer, learning.settings.max_selected)?;
    Some(
        picked
            .into_iter()
            .filter(|i| *i < candidates.len())
            .collect(),
    )
}

fn bullet_text(e: &DiaryEntry) -> String {
    match (e.kind, e.ttl_until) {
        (DiaryKind::Short, Some(until)) => format!("(until {}) {}", day(until), e.content.trim()),
        _ => e.content.trim().to_owned(),
    }
}

/// The chosen entries as bullets within `budget` characters.
pub(crate) fn render_selected(
    candidates: &[DiaryEntry],
    picked: &[usize],
    budget: usize,
) -> String {
    let mut out = String::new();
    for &i in picked {
        let Some(e) = candidates.get(i) else { continue };
        let line = format!("- {}", bullet_text(e));
        if out.len() + line.len() > budget {
            break;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&line);
    }
    out
}

struct Block {
    section: Option<MemorySection>,
    stat: PrefetchBlock,
}

impl Block {
    fn empty(name: &str, candidates: usize) -> Self {
        Self {
            section: None,
            stat: PrefetchBlock {
                block: name.to_owned(),
                candidates,
                ..PrefetchBlock::default()
            },
        }
    }

    fn with(name: &str, heading: &str, body: String, candidates: usize, selected: usize) -> Self {
        let bytes = body.len();
        Self {
            section: Some(MemorySection::new(heading, body)),
            stat: PrefetchBlock {
                block: name.to_owned(),
                hit: true,
                candidates,
                selected,
                bytes,
            },
        }
    }
}

type Turn<'a> = (
    Option<&'a str>,
    Option<Uuid>,
    Option<crewlet_core::TraceContext>,
);

impl Learning {
    async fn personal_memory(
        &self,
        seat: &SeatProfile,
        task: &str,
        sender: Option<&str>,
        query: Option<&[f32]>,
        turn: Turn<'_>,
    ) -> Block {
        let candidates = diary_candidates(self, seat, task, query).await;
        if candidates.is_empty() {
            return Block::empty("personal_memory", 0);
        }
        let n = candidates.len();
        match filter_candidates(self, seat, task, sender, &candidates, turn, "memory_filter").await
        {
            None => Block::empty("personal_memory", n),
            Some(picked) if picked.is_empty() => Block::with(
                "personal_memory",
                PERSONAL_MEMORY,
                NOTHING_SELECTED.to_owned(),
                n,
                0,
            ),
            Some(picked) => {
                let body = render_selected(&candidates, &picked, self.settings.digest_chars);
                let selected = body.lines().count();
                Block::with("personal_memory", PERSONAL_MEMORY, body, n, selected)
            }
        }
    }

    async fn similar_work(
        &self,
        seat: &SeatProfile,
        query: Option<&[f32]>,
        turn: Turn<'_>,
    ) -> Block {
        let Some(q) = query else {
            return Block::empty("similar_prior_work", 0);
        };
        let hits = match self
            .stores
            .episodes
            .similar(
                &seat.handle,
                q,
                EpisodeFilter::default(),
                self.settings.episodes_in_plan,
            )
            .await
        {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(agent = %seat.handle, error = %e, "episode recall failed");
                return Block::empty("similar_prior_work", 0);
            }
        };
        if hits.is_empty() {
            return Block::empty("similar_prior_work", 0);
        }
        let raw: Vec<String> = hits
            .iter()
            .map(|h| crate::episodes::bullet(&h.item))
            .collect();
        let raw = raw.join("\n");
        let body = if self.settings.summarize_episodes {
            match self
                .ask(AuxCall {
                    seat,
                    worker: "episode_summarizer",
                    system: EPISODES_SYSTEM.to_owned(),
                    user: format!("Past turns:\n{raw}"),
                    max_tokens: self.settings.summarize_max_tokens,
                    task_id: turn.0,
                    turn_id: turn.1,
                    trace: turn.2,
                })
                .await
            {
                Ok(text) if !text.trim().is_empty() => text.trim().to_owned(),
                _ => raw,
            }
        } else {
            raw
        };
        Block::with(
            "similar_prior_work",
            SIMILAR_WORK,
            body,
            hits.len(),
            hits.len(),
        )
    }

    async fn skills_block(&self, seat: &SeatProfile) -> Block {
        let skills = match self
            .stores
            .skills
            .list(&seat.handle, &[SkillState::Active])
            .await
        {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(agent = %seat.handle, error = %e, "listing skills failed");
                return Block::empty("skills", 0);
            }
        };
        if skills.is_empty() {
            return Block::empty("skills", 0);
        }
        let mut body = String::from("Load one with `use_skill` before following it:\n");
        for s in &skills {
            let _ = writeln!(body, "- {}: {}", s.name, clip(&s.description, 200));
        }
        Block::with("skills", SKILLS, body, skills.len(), skills.len())
    }

    async fn onboarding_block(&self, seat: &SeatProfile) -> Block {
        let hash = self.chain_hash(seat);
        match self.stores.onboarding.get(&seat.agent_id).await {
            Ok(Some(m)) if m.chain_hash == hash => Block::empty("onboarding", 0),
            Ok(_) => {
                let mut body = String::from(
                    "This is your first turn in this seat, or your place in the org changed. \
                     Alongside the work, get your bearings: who your manager and colleagues are \
                     (`lookup_colleague`)",
                );
                if !seat.unit_path.is_empty() {
                    let _ = write!(
                        body,
                        ", what your unit ({}) is responsible for",
                        seat.unit_path.join(" / ")
                    );
                }
                body.push_str(
                    ", and the team's onboarding notes where your tools reach them. \
                     Then call `mark_onboarded` so this note stops appearing.",
                );
                Block::with("onboarding", ONBOARDING, body, 0, 1)
            }
            // Unknown state: skip the note this turn rather than repeat an
            // onboarding that may be done.
            Err(e) => {
                tracing::warn!(agent = %seat.handle, error = %e, "reading the onboarding marker failed");
                Block::empty("onboarding", 0)
            }
        }
    }

    async fn people_block(
        &self,
        seat: &SeatProfile,
        sender: Option<&str>,
        platform: &str,
    ) -> Block {
        let Some(sender) = sender else {
            return Block::empty("counterparties", 0);
        };
        let profiles = match self.stores.profiles.about(&seat.handle, sender).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(agent = %seat.handle, error = %e, "reading counterparty profiles failed");
                return Block::empty("counterparties", 0);
            }
        };
        // The trigger's own platform first.
        let Some(p) = profiles
            .iter()
            .find(|p| p.platform == platform)
            .or_else(|| profiles.first())
        else {
            return Block::empty("counterparties", 0);
        };
        let body = crate::profiles::render(p);
        Block::with("counterparties", PEOPLE, body, profiles.len(), 1)
    }
}

#[async_trait]
impl Recall for Learning {
    async fn prefetch(&self, request: RecallRequest<'_>) -> Vec<MemorySection> {
        let seat = request.seat;
        if !self.is_enabled(&seat.handle) {
            return Vec::new();
        }
        let started = Instant::now();
        let trigger = request.trigger;
        let task = clip(&trigger.content, TASK_CHARS);
        let sender = trigger.sender.as_deref();
        self.memos.start(
            request.turn_id,
            TurnMemo {
                task: task.clone(),
                sender: trigger.sender.clone(),
                ..TurnMemo::default()
            },
        );
        let turn: Turn<'_> = (
            Some(trigger.task_id.as_str()),
            Some(request.turn_id),
            Some(request.trace),
        );
        let query = self.embed(&task).await;
        let q = query.as_deref();
        let (memory, people, work, skills, onboarding) = tokio::join!(
            self.personal_memory(seat, &task, sender, q, turn),
            self.people_block(seat, sender, &trigger.source),
            self.similar_work(seat, q, turn),
            self.skills_block(seat),
            self.onboarding_block(seat),
        );
        let blocks = [memory, people, work, skills, onboarding];
        let stats: Vec<PrefetchBlock> = blocks.iter().map(|b| b.stat.clone()).collect();
        let sections: Vec<MemorySection> = blocks.into_iter().filter_map(|b| b.section).collect();
        let payload = MemoryPrefetched {
            turn_id: request.turn_id,
            hits: stats.iter().filter(|b| b.hit).count(),
            bytes: stats.iter().map(|b| b.bytes).sum(),
            blocks: stats,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        let summary = format!(
            "{} plan prefetch: {}/5 memory blocks, {} bytes",
            seat.handle, payload.hits, payload.bytes
        );
        self.emit(
            seat,
            EventContext {
                task_id: Some(trigger.task_id.as_str()),
                trace: Some(request.trace),
            },
            summary,
            &payload,
        )
        .await;
        sections
    }
}
