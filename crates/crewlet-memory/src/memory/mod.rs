//! In-memory twins of the PostgreSQL repositories: the same rules (TTLs,
//! duplicate guards, limits, zero-padded cosine, ordering), nothing
//! survives a restart. Used by the embedded default and by tests.
//!
//! Each twin knows the embedding width it pretends the column has (default
//! [`crewlet_store::DEFAULT_EMBEDDING_DIM`]) so that a wider vector is
//! refused here exactly as PostgreSQL would refuse it.

mod diary;
mod episodes;
mod onboarding;
mod profiles;
mod skills;

pub use diary::MemoryDiary;
pub use episodes::MemoryEpisodes;
pub use onboarding::MemoryOnboardingMarkers;
pub use profiles::MemoryCounterpartyProfiles;
pub use skills::MemorySkills;

/// The column width a twin assumes when none is given.
pub(crate) fn default_dim() -> usize {
    crewlet_store::DEFAULT_EMBEDDING_DIM as usize
}
