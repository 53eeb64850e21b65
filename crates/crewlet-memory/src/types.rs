//! The rows agents remember, as the repositories hand them out.

use chrono::{DateTime, Utc};
use crewlet_core::AgentId;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A row and how close it is to a query vector: cosine similarity in
/// [-1, 1], 1 = same direction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scored<T> {
    pub item: T,
    pub score: f32,
}

/// Offset paging for listings (the API's `?offset=&limit=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    pub offset: usize,
    pub limit: usize,
}

impl Page {
    pub fn first(limit: usize) -> Self {
        Self { offset: 0, limit }
    }
}

// ---------------------------------------------------------------- diary

/// How long a diary row lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiaryKind {
    /// A durable fact or preference (`diary_long`, no TTL).
    #[serde(rename = "diary_long")]
    Long,
    /// Situational state with a TTL (`diary_short`).
    #[serde(rename = "diary_short")]
    Short,
}

impl DiaryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DiaryKind::Long => "diary_long",
            DiaryKind::Short => "diary_short",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "diary_long" => Some(DiaryKind::Long),
            "diary_short" => Some(DiaryKind::Short),
            _ => None,
        }
    }
}

/// One row of an agent's private diary (`agent_diary`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiaryEntry {
    pub id: Uuid,
    pub agent_id: AgentId,
    pub kind: DiaryKind,
    /// Stored verbatim, never truncated.
    pub content: String,
    /// `Short` rows expire here: excluded from every read after it.
    pub ttl_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// A diary row to write. `embedding` is the vector of `content` (the
/// learning layer embeds; the repository only stores).
#[derive(Clone, Debug, PartialEq)]
pub struct NewDiaryEntry {
    pub agent_id: AgentId,
    pub kind: DiaryKind,
    pub content: String,
    pub ttl_until: Option<DateTime<Utc>>,
    pub embedding: Option<Vec<f32>>,
}

/// What a diary write did.
#[derive(Clone, Debug, PartialEq)]
pub enum DiaryWrite {
    /// A new row.
    Written(DiaryEntry),
    /// A live row of the same agent already holds exactly this content:
    /// nothing was written; this is that row.
    Duplicate(DiaryEntry),
}

impl DiaryWrite {
    pub fn entry(&self) -> &DiaryEntry {
        match self {
            DiaryWrite::Written(e) | DiaryWrite::Duplicate(e) => e,
        }
    }

    pub fn is_new(&self) -> bool {
        matches!(self, DiaryWrite::Written(_))
    }
}

// ------------------------------------------------------------- episodes

/// A raw episode is one turn; a compacted one summarizes many old ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeKind {
    Raw,
    Compacted,
}

impl EpisodeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EpisodeKind::Raw => "raw",
            EpisodeKind::Compacted => "compacted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "raw" => Some(EpisodeKind::Raw),
            "compacted" => Some(EpisodeKind::Compacted),
            _ => None,
        }
    }
}

/// One completed turn of one agent (`episodes`), or a compacted summary of
/// several.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Episode {
    /// For a raw episode, the turn id: recording the same turn twice
    /// writes once.
    pub id: Uuid,
    pub agent_handle: String,
    pub agent_id: Option<AgentId>,
    /// The task the turn worked on.
    pub task_id: Option<String>,
    pub task_summary: String,
    pub plan_summary: String,
    /// Tool names in call order.
    pub tool_sequence: Vec<String>,
    /// Synthesized skills the turn loaded with `use_skill`.
    pub skills_used: Vec<String>,
    /// `done`, `failed`, `direct`, `skip` (the turn's decision).
    pub review_outcome: Option<String>,
    pub started_at: DateTime<Utc>,
    pub ended_at: DateTime<Utc>,
    pub duration_ms: i64,
    pub kind: EpisodeKind,
    /// What the work was about across turns (issue key, thread), when known.
    pub work_key: Option<String>,
}

/// An episode to record, with the vector of its task and plan summaries.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEpisode {
    pub episode: Episode,
    pub embedding: Option<Vec<f32>>,
}

/// How many episodes one agent holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpisodeCounts {
    pub raw: usize,
    pub compacted: usize,
}

// --------------------------------------------------------------- skills

/// Where a synthesized skill is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkillState {
    Active,
    Stale,
    Archived,
}

impl SkillState {
    pub fn as_str(self) -> &'static str {
        match self {
            SkillState::Active => "active",
            SkillState::Stale => "stale",
            SkillState::Archived => "archived",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(SkillState::Active),
            "stale" => Some(SkillState::Stale),
            "archived" => Some(SkillState::Archived),
            _ => None,
        }
    }
}

/// A procedure an agent drafted from its own successful work
/// (`synthesized_skills`). The body is Markdown, returned verbatim by
/// `use_skill`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skill {
    pub id: Uuid,
    pub agent_handle: String,
    pub name: String,
    pub description: String,
    pub body: String,
    pub tool_sequence: Vec<String>,
    pub state: SkillState,
    pub version: i32,
    pub use_count: i32,
    pub last_used_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// An earlier state of a skill (`synthesized_skill_versions`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkillVersion {
    pub skill_id: Uuid,
    pub version: i32,
    pub description: String,
    pub body: String,
    pub change_note: String,
    pub created_at: DateTime<Utc>,
}

/// A skill to create.
#[derive(Clone, Debug, PartialEq)]
pub struct NewSkill {
    pub agent_handle: String,
    pub name: String,
    pub description: String,
    pub body: String,
    pub tool_sequence: Vec<String>,
    pub embedding: Option<Vec<f32>>,
}

/// A change to a skill: the prior state is archived as a version first.
#[derive(Clone, Debug, PartialEq)]
pub struct SkillChange {
    /// `None` keeps the description.
    pub description: Option<String>,
    pub body: String,
    /// Why (kept with the archived version).
    pub change_note: String,
    /// `None` keeps the vector.
    pub embedding: Option<Vec<f32>>,
}

/// The caps the skill repository enforces on every write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkillLimits {
    /// Live (active or stale) skills per agent.
    pub max_per_agent: usize,
    /// Archived versions kept per skill (older ones are pruned).
    pub max_versions: usize,
    /// Characters in a body.
    pub max_body_chars: usize,
}

impl Default for SkillLimits {
    fn default() -> Self {
        Self {
            max_per_agent: 50,
            max_versions: 10,
            max_body_chars: 20_000,
        }
    }
}

// ------------------------------------------------------------- profiles

/// What one agent (the observer) knows of one person (the subject) on one
/// platform (`counterparty_profiles`). Private to the observer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CounterpartyProfile {
    pub observer: String,
    pub subject: String,
    pub platform: String,
    pub display_name: Option<String>,
    pub summary: String,
    /// A JSON object of observed traits (style, preferences, topics).
    pub traits: serde_json::Value,
    pub interaction_count: i32,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One observation of a counterparty: creates the profile or updates it,
/// adding one to its interaction count.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileObservation {
    pub observer: String,
    pub subject: String,
    pub platform: String,
    /// `None` keeps the stored name.
    pub display_name: Option<String>,
    /// `None` keeps the stored summary.
    pub summary: Option<String>,
    /// Keys merged over the stored traits (a JSON object; `null` values
    /// remove a key).
    pub traits: serde_json::Map<String, serde_json::Value>,
    pub seen_at: DateTime<Utc>,
    /// `None` keeps the vector.
    pub embedding: Option<Vec<f32>>,
}

// ----------------------------------------------------------- onboarding

/// An agent finished first-turn onboarding for the manager chain whose
/// hash is `chain_hash`; a changed chain opens onboarding again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnboardingMarker {
    pub agent_id: AgentId,
    pub chain_hash: String,
    pub onboarded_at: DateTime<Utc>,
}
