//! First-turn onboarding markers (`agent_onboarding_markers`).

use parking_lot::Mutex;
use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use crewlet_core::AgentId;
use serde::{Deserialize, Serialize};

use crate::db::Database;
use crate::error::{StoreError, describe, query_err};

/// An agent was onboarded for the manager chain whose hash is `chain_hash`;
/// a changed chain means onboarding again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnboardingMarker {
    pub agent_id: AgentId,
    pub chain_hash: String,
    pub onboarded_at: DateTime<Utc>,
}

#[async_trait]
pub trait OnboardingMarkers: Send + Sync {
    async fn get(&self, agent_id: &AgentId) -> Result<Option<OnboardingMarker>, StoreError>;
    /// Records (or replaces) the agent's marker.
    async fn mark(
        &self,
        agent_id: &AgentId,
        chain_hash: &str,
    ) -> Result<OnboardingMarker, StoreError>;
}

#[derive(Debug, Default)]
pub struct MemoryOnboardingMarkers {
    markers: Mutex<HashMap<AgentId, OnboardingMarker>>,
}

impl MemoryOnboardingMarkers {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl OnboardingMarkers for MemoryOnboardingMarkers {
    async fn get(&self, agent_id: &AgentId) -> Result<Option<OnboardingMarker>, StoreError> {
        Ok(self.markers.lock().get(agent_id).cloned())
    }

    async fn mark(
        &self,
        agent_id: &AgentId,
        chain_hash: &str,
    ) -> Result<OnboardingMarker, StoreError> {
        let marker = OnboardingMarker {
            agent_id: *agent_id,
            chain_hash: chain_hash.to_owned(),
            onboarded_at: Utc::now(),
        };
        self.markers.lock().insert(*agent_id, marker.clone());
        Ok(marker)
    }
}

#[derive(Clone, Debug)]
pub struct PostgresOnboardingMarkers {
    db: Database,
}

impl PostgresOnboardingMarkers {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn read_marker(r: &tokio_postgres::Row) -> Result<OnboardingMarker, StoreError> {
    let d = |e: tokio_postgres::Error| StoreError::decode("agent_onboarding_markers", describe(&e));
    Ok(OnboardingMarker {
        agent_id: AgentId::from_uuid(r.try_get(0).map_err(d)?),
        chain_hash: r.try_get(1).map_err(d)?,
        onboarded_at: r.try_get(2).map_err(d)?,
    })
}

#[async_trait]
impl OnboardingMarkers for PostgresOnboardingMarkers {
    async fn get(&self, agent_id: &AgentId) -> Result<Option<OnboardingMarker>, StoreError> {
        let client = self.db.client().await?;
        client
            .query_opt(
                "SELECT agent_id, chain_hash, onboarded_at FROM agent_onboarding_markers
                 WHERE agent_id = $1",
                &[&agent_id.as_uuid()],
            )
            .await
            .map_err(query_err(format!(
                "reading the onboarding marker of {agent_id}"
            )))?
            .map(|r| read_marker(&r))
            .transpose()
    }

    async fn mark(
        &self,
        agent_id: &AgentId,
        chain_hash: &str,
    ) -> Result<OnboardingMarker, StoreError> {
        let client = self.db.client().await?;
        let row = client
            .query_one(
                "INSERT INTO agent_onboarding_markers (agent_id, chain_hash) VALUES ($1, $2)
                 ON CONFLICT (agent_id) DO UPDATE
                 SET chain_hash = EXCLUDED.chain_hash, onboarded_at = now()
                 RETURNING agent_id, chain_hash, onboarded_at",
                &[&agent_id.as_uuid(), &chain_hash],
            )
            .await
            .map_err(query_err(format!("marking {agent_id} onboarded")))?;
        read_marker(&row)
    }
}
