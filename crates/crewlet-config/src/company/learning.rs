//! `learning`: what agents remember between turns and how they improve.
//! The original engine's layout and defaults. The keys the learning loop
//! (`crewlet-learning`) honours have effect; the rest (skill promotion, the
//! skill curator, clustering and budget knobs) are accepted, type-checked
//! and reported as having no effect yet.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

const PROMOTION: &str = "skill promotion to the team knowledge base is not built yet";
const CURATOR: &str = "the skill curator is not built yet";
const BUDGET: &str = "learning calls are charged to the seat's budget; a separate per-worker token budget is not built yet";
const CLUSTERING: &str = "skill synthesis from clusters of episodes on a timer is not built yet";
const LIFECYCLE: &str = "only `max_raw_episodes_per_agent` drives compaction so far";

/// Agent memory and self-improvement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Learning {
    /// Learning for every agent seat; a role's `learning_enabled` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Recall of similar past turns (episodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episodic: Option<Episodic>,
    /// Reflection after a turn: what to keep in the diary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflect: Option<Reflect>,
    /// Profiles of the people and agents a seat works with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counterparty: Option<Counterparty>,
    /// Skills written from successful turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill_synthesis: Option<SkillSynthesis>,
    /// Skills revised after use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skill_refinement: Option<SkillRefinement>,
    /// Skills shared from a seat to its team.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = PROMOTION))]
    pub skill_promotion: Option<SkillPromotion>,
    /// Archiving of skills nobody uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = CURATOR))]
    pub skill_curator: Option<SkillCurator>,
    /// The seat's own notes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personal_memory: Option<PersonalMemory>,
    /// Compaction and expiry of episodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub episode_lifecycle: Option<EpisodeLifecycle>,
    /// Crewlet addition: diary entries given to Plan after filtering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diary_prefetch_entries: Option<u32>,
    /// Crewlet addition: size of the diary digest given to Plan, in characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diary_digest_chars: Option<u32>,
    /// Crewlet addition: how long a short-term diary entry lives, in days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diary_short_ttl_days: Option<u32>,
}

impl Learning {
    /// Learning for every agent seat (default on).
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }
}

/// Episode recall.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Episodic {
    /// Similar past turns summarized into the Plan prompt.
    pub retrieval_limit: u32,
}

impl Default for Episodic {
    fn default() -> Self {
        Self { retrieval_limit: 5 }
    }
}

/// Reflection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Reflect {
    /// Reflect after each turn.
    pub enabled: bool,
    /// Let a model decide what is worth keeping.
    pub persist_decider: bool,
    /// Tokens one reflection may spend.
    #[schemars(extend("x-crewlet-inert" = BUDGET))]
    pub budget_tokens: u32,
    /// Summarize each turn into an episode.
    pub summarize_episodes: bool,
    /// Longest episode summary, in tokens.
    pub summarize_max_tokens: u32,
}

impl Default for Reflect {
    fn default() -> Self {
        Self {
            enabled: true,
            persist_decider: true,
            budget_tokens: 5000,
            summarize_episodes: true,
            summarize_max_tokens: 400,
        }
    }
}

/// Counterparty profiles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Counterparty {
    /// Keep profiles of counterparties.
    pub enabled: bool,
    /// Tokens one profile update may spend.
    #[schemars(extend("x-crewlet-inert" = BUDGET))]
    pub budget_tokens: u32,
}

impl Default for Counterparty {
    fn default() -> Self {
        Self {
            enabled: true,
            budget_tokens: 3000,
        }
    }
}

/// Skill synthesis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SkillSynthesis {
    /// Write skills from successful turns.
    pub enabled: bool,
    /// Tool calls a turn needs before a skill may be written from it.
    pub min_tool_calls: u32,
    /// Tokens one synthesis may spend.
    #[schemars(extend("x-crewlet-inert" = BUDGET))]
    pub budget_tokens: u32,
    /// Skills kept per agent.
    pub max_skills_per_agent: u32,
    /// Similarity at or above which a new skill is a duplicate.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub duplicate_jaccard_threshold: f64,
    /// Also synthesize from clusters of past episodes on a timer.
    #[schemars(extend("x-crewlet-inert" = CLUSTERING))]
    pub scheduler_enabled: bool,
    /// How often the timer runs, in seconds.
    #[schemars(extend("x-crewlet-inert" = CLUSTERING))]
    pub scheduler_interval_seconds: u32,
    /// How far back the timer looks, in hours.
    #[schemars(extend("x-crewlet-inert" = CLUSTERING))]
    pub cluster_window_hours: u32,
    /// Fewest similar episodes that make a cluster.
    #[schemars(extend("x-crewlet-inert" = CLUSTERING))]
    pub cluster_min_size: u32,
    /// Similarity at or above which episodes cluster.
    #[schemars(range(min = 0.0, max = 1.0))]
    #[schemars(extend("x-crewlet-inert" = CLUSTERING))]
    pub cluster_jaccard_threshold: f64,
    /// Most episodes one timer run reads.
    #[schemars(extend("x-crewlet-inert" = CLUSTERING))]
    pub episode_fetch_limit: u32,
}

impl Default for SkillSynthesis {
    fn default() -> Self {
        Self {
            enabled: true,
            min_tool_calls: 5,
            budget_tokens: 4000,
            max_skills_per_agent: 50,
            duplicate_jaccard_threshold: 0.7,
            scheduler_enabled: false,
            scheduler_interval_seconds: 3600,
            cluster_window_hours: 168,
            cluster_min_size: 3,
            cluster_jaccard_threshold: 0.6,
            episode_fetch_limit: 200,
        }
    }
}

/// Skill refinement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SkillRefinement {
    /// Revise skills after use.
    pub enabled: bool,
    /// Revise after a turn that used the skill succeeded.
    pub auto_refine_on_success: bool,
    /// Revise after a turn that used the skill failed.
    pub auto_refine_on_failure: bool,
    /// Tokens one revision may spend.
    #[schemars(extend("x-crewlet-inert" = BUDGET))]
    pub budget_tokens: u32,
    /// Longest skill body, in characters.
    pub max_body_chars: u32,
    /// Versions kept per skill.
    pub max_versions_kept: u32,
}

impl Default for SkillRefinement {
    fn default() -> Self {
        Self {
            enabled: true,
            auto_refine_on_success: true,
            auto_refine_on_failure: true,
            budget_tokens: 3000,
            max_body_chars: 20000,
            max_versions_kept: 10,
        }
    }
}

/// Skill promotion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SkillPromotion {
    /// Promote skills several teammates wrote alike.
    pub enabled: bool,
    /// Fewest similar skills that make a promotion.
    pub min_sibling_count: u32,
    /// Similarity at or above which skills are alike.
    #[schemars(range(min = 0.0, max = 1.0))]
    pub jaccard_threshold: f64,
    /// Tokens one promotion may spend.
    #[schemars(extend("x-crewlet-inert" = BUDGET))]
    pub budget_tokens: u32,
}

impl Default for SkillPromotion {
    fn default() -> Self {
        Self {
            enabled: true,
            min_sibling_count: 3,
            jaccard_threshold: 0.6,
            budget_tokens: 4000,
        }
    }
}

/// The skill curator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SkillCurator {
    /// Archive skills nobody uses.
    pub enabled: bool,
    /// How often the curator runs, in hours.
    pub interval_hours: u32,
    /// Days unused before a skill is stale.
    pub stale_after_days: u32,
    /// Days unused before a skill is archived.
    pub archive_after_days: u32,
}

impl Default for SkillCurator {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_hours: 24,
            stale_after_days: 30,
            archive_after_days: 90,
        }
    }
}

/// Personal memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PersonalMemory {
    /// Most note refreshes in one turn.
    pub max_refreshes_per_turn: u32,
}

impl Default for PersonalMemory {
    fn default() -> Self {
        Self {
            max_refreshes_per_turn: 3,
        }
    }
}

/// Episode compaction and expiry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EpisodeLifecycle {
    /// Raw episodes per agent before older ones are compacted.
    pub max_raw_episodes_per_agent: u32,
    /// Check the episode count every this many writes.
    #[schemars(extend("x-crewlet-inert" = LIFECYCLE))]
    pub write_check_every_n: u32,
    /// Days an unfinished episode is kept.
    #[schemars(extend("x-crewlet-inert" = LIFECYCLE))]
    pub non_terminal_max_age_days: u32,
    /// Days a compacted episode's originals are kept.
    #[schemars(extend("x-crewlet-inert" = LIFECYCLE))]
    pub consolidated_grace_days: u32,
    /// Days before an episode may be compacted.
    #[schemars(extend("x-crewlet-inert" = LIFECYCLE))]
    pub compaction_min_age_days: u32,
    /// Fewest similar episodes compacted together.
    #[schemars(extend("x-crewlet-inert" = LIFECYCLE))]
    pub compaction_min_cluster_size: u32,
    /// Similarity at or above which episodes are compacted together.
    #[schemars(range(min = 0.0, max = 1.0))]
    #[schemars(extend("x-crewlet-inert" = LIFECYCLE))]
    pub compaction_jaccard_threshold: f64,
    /// Most episodes one compaction pass reads.
    #[schemars(extend("x-crewlet-inert" = LIFECYCLE))]
    pub compaction_batch_size: u32,
    /// Tokens one compaction may spend.
    #[schemars(extend("x-crewlet-inert" = LIFECYCLE))]
    pub compaction_budget_tokens: u32,
    /// Originals kept as examples of a compacted cluster.
    #[schemars(extend("x-crewlet-inert" = LIFECYCLE))]
    pub exemplar_count: u32,
    /// Days a compacted episode is kept; 0 = for ever.
    #[schemars(extend("x-crewlet-inert" = LIFECYCLE))]
    pub compacted_max_age_days: u32,
}

impl Default for EpisodeLifecycle {
    fn default() -> Self {
        Self {
            max_raw_episodes_per_agent: 500,
            write_check_every_n: 10,
            non_terminal_max_age_days: 14,
            consolidated_grace_days: 30,
            compaction_min_age_days: 30,
            compaction_min_cluster_size: 3,
            compaction_jaccard_threshold: 0.6,
            compaction_batch_size: 200,
            compaction_budget_tokens: 4000,
            exemplar_count: 2,
            compacted_max_age_days: 0,
        }
    }
}
