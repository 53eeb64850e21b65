//! Every memory repository behind its trait, as the engine wires them.

use std::sync::Arc;

use crewlet_store::Database;

use crate::error::MemoryError;
use crate::memory::{
    MemoryCounterpartyProfiles, MemoryDiary, MemoryEpisodes, MemoryOnboardingMarkers, MemorySkills,
};
use crate::postgres::{
    PostgresCounterpartyProfiles, PostgresDiary, PostgresEpisodes, PostgresOnboardingMarkers,
    PostgresSkills,
};
use crate::repos::{CounterpartyProfiles, Diary, Episodes, OnboardingMarkers, Skills};

/// The memory repositories, cheap to clone.
#[derive(Clone)]
pub struct MemoryStores {
    pub diary: Arc<dyn Diary>,
    pub episodes: Arc<dyn Episodes>,
    pub skills: Arc<dyn Skills>,
    pub profiles: Arc<dyn CounterpartyProfiles>,
    pub onboarding: Arc<dyn OnboardingMarkers>,
}

impl MemoryStores {
    /// In-process twins (embedding width
    /// [`crewlet_store::DEFAULT_EMBEDDING_DIM`]): nothing survives a restart.
    pub fn in_memory() -> Self {
        Self::in_memory_with_embedding_dim(crewlet_store::DEFAULT_EMBEDDING_DIM as usize)
    }

    /// In-process twins refusing vectors wider than `dim`, as a database
    /// migrated with that width would.
    pub fn in_memory_with_embedding_dim(dim: usize) -> Self {
        Self {
            diary: Arc::new(MemoryDiary::with_embedding_dim(dim)),
            episodes: Arc::new(MemoryEpisodes::with_embedding_dim(dim)),
            skills: Arc::new(MemorySkills::with_embedding_dim(dim)),
            profiles: Arc::new(MemoryCounterpartyProfiles::with_embedding_dim(dim)),
            onboarding: Arc::new(MemoryOnboardingMarkers::new()),
        }
    }

    /// The PostgreSQL repositories over an already migrated database. Reads
    /// the embedding width the first migration fixed, once.
    pub async fn postgres(db: Database) -> Result<Self, MemoryError> {
        let dim = crewlet_store::stored_embedding_dim(&db)
            .await?
            .ok_or_else(|| {
                MemoryError::Invalid(format!(
                    "the database at {} has no embedding width: it was never migrated; run `crewlet migrate` first",
                    db.target()
                ))
            })?;
        let dim = dim as usize;
        Ok(Self {
            diary: Arc::new(PostgresDiary::new(db.clone(), dim)),
            episodes: Arc::new(PostgresEpisodes::new(db.clone(), dim)),
            skills: Arc::new(PostgresSkills::new(db.clone(), dim)),
            profiles: Arc::new(PostgresCounterpartyProfiles::new(db.clone(), dim)),
            onboarding: Arc::new(PostgresOnboardingMarkers::new(db)),
        })
    }
}
