//! The payloads of the learning events (`crewlet-learning` writes them;
//! the API and the dashboard read them). Contents of memory never travel in
//! events beyond a short preview: the rows themselves stay in the memory
//! tables, private to their agent.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::EventPayload;
use crate::EventType;

/// `diary_written`: a row was added to an agent's diary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiaryWritten {
    pub entry_id: Uuid,
    /// `diary_long` or `diary_short`.
    pub kind: String,
    /// `reflect_and_persist` (the agent, in a turn) or `persist_decider`
    /// (after the turn).
    pub writer: String,
    /// At most 120 characters of the content.
    pub preview: String,
    pub chars: usize,
    /// RFC 3339, for `diary_short`.
    pub ttl_until: Option<String>,
    pub turn_id: Option<Uuid>,
}

impl EventPayload for DiaryWritten {
    const EVENT_TYPE: EventType = EventType::DiaryWritten;
}

/// `episode_recorded`: a finished turn became an episode (or old episodes
/// were compacted into one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeRecorded {
    pub episode_id: Uuid,
    /// `raw` or `compacted`.
    pub kind: String,
    pub outcome: Option<String>,
    pub tool_calls: usize,
    pub skills_used: Vec<String>,
    /// For a compacted episode: how many raw ones it replaced.
    pub replaced: usize,
}

impl EventPayload for EpisodeRecorded {
    const EVENT_TYPE: EventType = EventType::EpisodeRecorded;
}

/// `skill_synthesized`: an agent drafted a new skill from its own work.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillSynthesized {
    pub skill_id: Uuid,
    pub name: String,
    pub description: String,
    pub tool_sequence: Vec<String>,
    pub turn_id: Option<Uuid>,
}

impl EventPayload for SkillSynthesized {
    const EVENT_TYPE: EventType = EventType::SkillSynthesized;
}

/// `skill_refined`: a skill got a new version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillRefined {
    pub skill_id: Uuid,
    pub name: String,
    pub version: i32,
    /// `append`, `replace_body`, `observed`, `counter_example` or `merged`.
    pub action: String,
    /// `refine_skill` (the agent) or `skill_refiner` / `skill_synthesizer`.
    pub writer: String,
    pub change_note: String,
    pub turn_id: Option<Uuid>,
}

impl EventPayload for SkillRefined {
    const EVENT_TYPE: EventType = EventType::SkillRefined;
}

/// `profile_updated`: what an agent knows of a person changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileUpdated {
    pub subject: String,
    pub platform: String,
    pub interaction_count: i32,
    /// Trait keys set by this observation.
    pub traits: Vec<String>,
    pub turn_id: Option<Uuid>,
}

impl EventPayload for ProfileUpdated {
    const EVENT_TYPE: EventType = EventType::ProfileUpdated;
}

/// One block of the Plan prefetch: whether it rendered, how many rows it
/// looked at and kept, and its size.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefetchBlock {
    /// `personal_memory`, `similar_prior_work`, `skills`, `onboarding`,
    /// `counterparties`.
    pub block: String,
    pub hit: bool,
    /// Rows considered (e.g. the diary candidate pool).
    pub candidates: usize,
    /// Rows rendered.
    pub selected: usize,
    pub bytes: usize,
}

/// `memory_prefetched`: what a turn's Plan got from memory at its start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryPrefetched {
    pub turn_id: Uuid,
    pub blocks: Vec<PrefetchBlock>,
    /// Blocks that rendered.
    pub hits: usize,
    pub bytes: usize,
    pub duration_ms: u64,
}

impl EventPayload for MemoryPrefetched {
    const EVENT_TYPE: EventType = EventType::MemoryPrefetched;
}

/// `agent_onboarded`: a seat finished first-turn onboarding for its place
/// in the org (`chain_hash`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentOnboarded {
    pub chain_hash: String,
}

impl EventPayload for AgentOnboarded {
    const EVENT_TYPE: EventType = EventType::AgentOnboarded;
}
