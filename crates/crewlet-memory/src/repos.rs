//! One small trait per table. Each has a PostgreSQL + pgvector
//! implementation (`postgres/`) and an in-memory twin (`memory/`) with the
//! same semantics; the conformance suites (`testsuite`, feature
//! `testsuite`) run against both.
//!
//! Vectors: the learning layer embeds, the repositories store and compare.
//! Similarity is cosine (1 = same direction). A vector narrower than the
//! database's embedding column is stored zero-padded, which leaves every
//! cosine unchanged; a wider one is refused, and so are empty, all-zero
//! and non-finite ones (cosine is undefined for them), all as
//! [`MemoryError::Invalid`]. Rows without a vector never appear in a
//! similarity search.
//!
//! Order: ties and names sort bytewise (`COLLATE "C"`), so both backends
//! list the same rows in the same order.
//!
//! Time: reads that hide expired rows take `now`, so a test (and the twin)
//! decide the clock, not the database.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewlet_core::AgentId;
use uuid::Uuid;

use crate::error::MemoryError;
use crate::types::*;

/// An agent's private diary (`agent_diary`).
#[async_trait]
pub trait Diary: Send + Sync {
    /// Writes a row, unless a live row of the same agent holds exactly the
    /// same content (then that row is returned as [`DiaryWrite::Duplicate`]
    /// and nothing is written). Empty content is [`MemoryError::Invalid`].
    /// A new row's `created_at` is `now`.
    async fn write(
        &self,
        entry: NewDiaryEntry,
        now: DateTime<Utc>,
    ) -> Result<DiaryWrite, MemoryError>;

    /// Live rows (no TTL, or a TTL after `now`), newest first.
    async fn recent(
        &self,
        agent: &AgentId,
        page: Page,
        now: DateTime<Utc>,
    ) -> Result<Vec<DiaryEntry>, MemoryError>;

    /// Live rows with a vector, most similar to `query` first.
    async fn similar(
        &self,
        agent: &AgentId,
        query: &[f32],
        limit: usize,
        now: DateTime<Utc>,
    ) -> Result<Vec<Scored<DiaryEntry>>, MemoryError>;

    /// Live rows of the agent.
    async fn count(&self, agent: &AgentId, now: DateTime<Utc>) -> Result<usize, MemoryError>;

    /// Deletes one row of the agent; whether it existed.
    async fn delete(&self, agent: &AgentId, id: Uuid) -> Result<bool, MemoryError>;

    /// Deletes every row (of every agent) whose TTL is at or before `now`;
    /// how many.
    async fn delete_expired(&self, now: DateTime<Utc>) -> Result<u64, MemoryError>;
}

/// One row per completed turn (`episodes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EpisodeFilter<'a> {
    /// Only episodes whose `review_outcome` is this.
    pub outcome: Option<&'a str>,
    /// Only this kind.
    pub kind: Option<EpisodeKind>,
}

#[async_trait]
pub trait Episodes: Send + Sync {
    /// Records an episode; `false` when one with the same id and `ended_at`
    /// was already recorded (nothing changes then).
    async fn record(&self, episode: NewEpisode) -> Result<bool, MemoryError>;

    /// Whether the agent has an episode with this id.
    async fn contains(&self, agent_handle: &str, id: Uuid) -> Result<bool, MemoryError>;

    /// Newest first (by `ended_at`).
    async fn recent(
        &self,
        agent_handle: &str,
        filter: EpisodeFilter<'_>,
        page: Page,
    ) -> Result<Vec<Episode>, MemoryError>;

    /// Episodes with a vector, most similar to `query` first.
    async fn similar(
        &self,
        agent_handle: &str,
        query: &[f32],
        filter: EpisodeFilter<'_>,
        limit: usize,
    ) -> Result<Vec<Scored<Episode>>, MemoryError>;

    async fn counts(&self, agent_handle: &str) -> Result<EpisodeCounts, MemoryError>;

    /// Agents holding more than `raw_threshold` raw episodes, with their
    /// raw counts (what compaction looks for), by handle.
    async fn over_raw_threshold(
        &self,
        raw_threshold: usize,
    ) -> Result<Vec<(String, usize)>, MemoryError>;

    /// The agent's oldest raw episodes, oldest first.
    async fn oldest_raw(
        &self,
        agent_handle: &str,
        limit: usize,
    ) -> Result<Vec<Episode>, MemoryError>;

    /// In one transaction: deletes the agent's raw episodes `replaced` and
    /// records `compacted` (whose kind must be `Compacted`). Returns how
    /// many rows were replaced; ids already gone are ignored, and when none
    /// of them is left nothing is written (a second compaction of the same
    /// rows is a no-op).
    async fn compact(
        &self,
        agent_handle: &str,
        replaced: &[Uuid],
        compacted: NewEpisode,
    ) -> Result<usize, MemoryError>;
}

/// Synthesized skills and their versions (`synthesized_skills`,
/// `synthesized_skill_versions`).
#[async_trait]
pub trait Skills: Send + Sync {
    /// Creates a skill at version 1. [`MemoryError::Conflict`] when the
    /// agent already has one of that name; [`MemoryError::Limit`] when the
    /// agent already holds `limits.max_per_agent` active or stale skills
    /// or the body is over `limits.max_body_chars` characters.
    async fn create(&self, skill: NewSkill, limits: SkillLimits) -> Result<Skill, MemoryError>;

    async fn get(&self, agent_handle: &str, name: &str) -> Result<Option<Skill>, MemoryError>;

    /// The agent's skills in `states` (all states when empty), by name.
    async fn list(
        &self,
        agent_handle: &str,
        states: &[SkillState],
    ) -> Result<Vec<Skill>, MemoryError>;

    /// Archives the current state as a version, applies `change` and bumps
    /// the version; keeps the newest `limits.max_versions` archived
    /// versions. [`MemoryError::NotFound`] for an unknown skill,
    /// [`MemoryError::Limit`] when the new body is over the cap (nothing
    /// changes then).
    async fn update(
        &self,
        agent_handle: &str,
        name: &str,
        change: SkillChange,
        limits: SkillLimits,
    ) -> Result<Skill, MemoryError>;

    /// Archived versions, newest first.
    async fn versions(
        &self,
        agent_handle: &str,
        name: &str,
    ) -> Result<Vec<SkillVersion>, MemoryError>;

    /// Adds one use at `at` (`last_used_at` never moves back).
    async fn record_use(
        &self,
        agent_handle: &str,
        name: &str,
        at: DateTime<Utc>,
    ) -> Result<Skill, MemoryError>;

    async fn set_state(
        &self,
        agent_handle: &str,
        name: &str,
        state: SkillState,
    ) -> Result<Skill, MemoryError>;

    /// Active skills with a vector, most similar to `query` first.
    async fn similar(
        &self,
        agent_handle: &str,
        query: &[f32],
        limit: usize,
    ) -> Result<Vec<Scored<Skill>>, MemoryError>;
}

/// What agents know of the people they work with (`counterparty_profiles`).
#[async_trait]
pub trait CounterpartyProfiles: Send + Sync {
    async fn get(
        &self,
        observer: &str,
        subject: &str,
        platform: &str,
    ) -> Result<Option<CounterpartyProfile>, MemoryError>;

    /// Creates or updates the profile of (observer, subject, platform),
    /// adding one interaction and moving `last_seen_at` forward (never back).
    async fn observe(
        &self,
        observation: ProfileObservation,
    ) -> Result<CounterpartyProfile, MemoryError>;

    /// The observer's profiles of one subject on every platform.
    async fn about(
        &self,
        observer: &str,
        subject: &str,
    ) -> Result<Vec<CounterpartyProfile>, MemoryError>;

    /// The observer's profiles, most recently seen first.
    async fn list(
        &self,
        observer: &str,
        page: Page,
    ) -> Result<Vec<CounterpartyProfile>, MemoryError>;
}

/// First-turn onboarding markers (`agent_onboarding_markers`).
#[async_trait]
pub trait OnboardingMarkers: Send + Sync {
    async fn get(&self, agent_id: &AgentId) -> Result<Option<OnboardingMarker>, MemoryError>;

    /// Records (or replaces) the agent's marker.
    async fn mark(
        &self,
        agent_id: &AgentId,
        chain_hash: &str,
    ) -> Result<OnboardingMarker, MemoryError>;
}
