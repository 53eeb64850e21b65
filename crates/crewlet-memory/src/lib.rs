//! What agents remember, and how they learn.
//!
//! Owns: the memory tables' repositories, one small trait per table
//! ([`Diary`], [`Episodes`], [`Skills`], [`CounterpartyProfiles`],
//! [`OnboardingMarkers`]), each with a PostgreSQL + pgvector implementation
//! and an in-memory twin of the same semantics, bundled as
//! [`MemoryStores`]; the conformance suites (feature `testsuite`).
//!
//! Does not own: the schema (`migrations/`, applied by `crewlet-store`),
//! embedding text (`crewlet-llm`'s `Embedder`), the turn (`crewlet-turn`
//! reaches memory through an interface the engine adapts).

mod error;
mod memory;
mod postgres;
mod repos;
mod rules;
mod stores;
mod types;

#[cfg(feature = "testsuite")]
pub mod testsuite;

pub use error::MemoryError;
pub use memory::{
    MemoryCounterpartyProfiles, MemoryDiary, MemoryEpisodes, MemoryOnboardingMarkers, MemorySkills,
};
pub use postgres::{
    PostgresCounterpartyProfiles, PostgresDiary, PostgresEpisodes, PostgresOnboardingMarkers,
    PostgresSkills,
};
pub use repos::{CounterpartyProfiles, Diary, EpisodeFilter, Episodes, OnboardingMarkers, Skills};
pub use stores::MemoryStores;
pub use types::*;
