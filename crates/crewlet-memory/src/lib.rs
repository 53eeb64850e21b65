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
mod repos;
mod types;

pub use error::MemoryError;
pub use repos::{
    CounterpartyProfiles, Diary, EpisodeFilter, Episodes, OnboardingMarkers, Skills,
};
pub use types::*;
