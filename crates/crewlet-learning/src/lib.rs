//! How agents learn: the loop over `crewlet-memory`.
//!
//! Owns: [`Learning`], which
//! - implements [`crewlet_turn::Recall`]: the Plan prefetch (`## Personal
//!   memory`, `## People in this conversation`, `## Similar prior work`,
//!   `## Synthesized skills you've learned`, `## First-turn onboarding`),
//!   frozen into the Plan prompt at turn start;
//! - provides the memory tools ([`Learning::tools`]): `reflect_and_persist`,
//!   `refresh_memory`, `query_episodes`, `use_skill`, `refine_skill`,
//!   `mark_onboarded`;
//! - reflects on finished turns ([`Learning::reflect`]): the episode, the
//!   persist decider, skill synthesis and refinement, counterparty
//!   profiles;
//! - keeps memory in shape ([`Learning::maintain`]): expired diary rows,
//!   episode compaction.
//!
//! Everything here is best-effort: a failed learning step is logged and
//! skipped, never a failed turn. Model calls go through the seat's
//! auxiliary chain ([`AuxModel`], which `crewlet_turn::Auxiliary`
//! implements), charged to its budget and shown as auxiliary usage.
//!
//! Does not own: the tables and their repositories (`crewlet-memory`),
//! embedding (`crewlet-llm`'s `Embedder`), when a reflection runs (the
//! engine's seat runtime).

mod episodes;
mod learning;
mod memo;
mod persist;
mod prefetch;
pub mod profiles;
pub mod rank;
mod reflect;
mod settings;
mod skills;
mod text;
mod tools;

pub use learning::{AuxModel, Learning, LearningParts};
pub use prefetch::{ONBOARDING, PEOPLE, PERSONAL_MEMORY, SIMILAR_WORK, SKILLS, hybrid_candidates};
pub use reflect::Reflection;
pub use settings::LearningSettings;
pub use tools::{
    MARK_ONBOARDED, QUERY_EPISODES, REFINE_SKILL, REFLECT_AND_PERSIST, REFRESH_MEMORY, USE_SKILL,
};
