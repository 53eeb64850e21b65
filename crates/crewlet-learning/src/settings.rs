//! The learning loop's knobs, filled by the engine from the company's
//! `learning` section (this crate does not read YAML).

use crewlet_memory::SkillLimits;

use crate::rank::PoolWeights;

/// Everything the loop's workers and tools are sized by. The defaults are
/// the original engine's numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct LearningSettings {
    /// Diary rows taken by vector similarity to the trigger.
    pub diary_vector_limit: usize,
    /// Diary rows taken by recency.
    pub diary_recency_limit: usize,
    /// The union of both, deduplicated, is cut to this many candidates.
    pub candidate_pool: usize,
    /// How the pool is ordered (meaning, words, age).
    pub pool_weights: PoolWeights,
    /// The relevance filter keeps at most this many entries.
    pub max_selected: usize,
    /// The `## Personal memory` digest is at most this many characters.
    pub digest_chars: usize,
    /// TTL of a `diary_short` row when nobody says otherwise, and its cap.
    pub short_ttl_days: u32,
    pub max_short_ttl_days: u32,
    /// Episodes shown in `## Similar prior work`.
    pub episodes_in_plan: usize,
    /// `query_episodes`: default and maximum `limit`.
    pub episode_query_default: usize,
    pub episode_query_max: usize,
    /// Summarize similar episodes with the auxiliary model (raw bullets
    /// otherwise), in at most this many tokens.
    pub summarize_episodes: bool,
    pub summarize_max_tokens: u32,
    /// Post-turn reflection at all (episode, decider, skills, profiles).
    pub reflect: bool,
    pub persist_decider: bool,
    pub skill_synthesis: bool,
    /// A `done` turn with at least this many tool calls may become a skill.
    pub min_tool_calls: usize,
    /// A draft whose tool set has at least this Jaccard similarity with an
    /// existing skill's refines that skill instead.
    pub duplicate_jaccard: f64,
    pub skill_limits: SkillLimits,
    pub skill_refinement: bool,
    pub counterparty: bool,
    /// Raw episodes per agent before the oldest are compacted.
    pub compaction_threshold: usize,
    /// Raw episodes folded into one compacted row.
    pub compaction_batch: usize,
    /// Distinct `refresh_memory` hints per turn.
    pub refresh_max_hints: usize,
    /// Turns whose reflection is remembered (redelivery guard in process;
    /// the episode row is the durable one).
    pub remembered_turns: usize,
}

impl Default for LearningSettings {
    fn default() -> Self {
        Self {
            diary_vector_limit: 50,
            diary_recency_limit: 50,
            candidate_pool: 100,
            pool_weights: PoolWeights::default(),
            max_selected: 8,
            digest_chars: 1500,
            short_ttl_days: 30,
            max_short_ttl_days: 180,
            episodes_in_plan: 3,
            episode_query_default: 5,
            episode_query_max: 20,
            summarize_episodes: true,
            summarize_max_tokens: 400,
            reflect: true,
            persist_decider: true,
            skill_synthesis: true,
            min_tool_calls: 5,
            duplicate_jaccard: 0.7,
            skill_limits: SkillLimits::default(),
            skill_refinement: true,
            counterparty: true,
            compaction_threshold: 500,
            compaction_batch: 50,
            refresh_max_hints: 3,
            remembered_turns: 4096,
        }
    }
}
