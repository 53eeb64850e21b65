//! First-turn onboarding markers over `agent_onboarding_markers`.

use async_trait::async_trait;
use crewlet_core::AgentId;
use crewlet_store::Database;
use tokio_postgres::Row;

use super::{decode, query, query_opt};
use crate::error::MemoryError;
use crate::repos::OnboardingMarkers;
use crate::types::OnboardingMarker;

const TABLE: &str = "agent_onboarding_markers";

const GET: &str = "SELECT agent_id, chain_hash, onboarded_at FROM agent_onboarding_markers
        WHERE agent_id = $1";

const MARK: &str = "INSERT INTO agent_onboarding_markers (agent_id, chain_hash) VALUES ($1, $2)
        ON CONFLICT (agent_id) DO UPDATE
        SET chain_hash = EXCLUDED.chain_hash, onboarded_at = now()
        RETURNING agent_id, chain_hash, onboarded_at";

/// [`OnboardingMarkers`] over PostgreSQL.
#[derive(Clone, Debug)]
pub struct PostgresOnboardingMarkers {
    db: Database,
}

impl PostgresOnboardingMarkers {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn read(r: &Row) -> Result<OnboardingMarker, MemoryError> {
    let d = decode(TABLE);
    Ok(OnboardingMarker {
        agent_id: AgentId::from_uuid(r.try_get("agent_id").map_err(&d)?),
        chain_hash: r.try_get("chain_hash").map_err(&d)?,
        onboarded_at: r.try_get("onboarded_at").map_err(&d)?,
    })
}

#[async_trait]
impl OnboardingMarkers for PostgresOnboardingMarkers {
    async fn get(&self, agent_id: &AgentId) -> Result<Option<OnboardingMarker>, MemoryError> {
        let client = self.db.client().await?;
        query_opt(
            &client,
            &format!("reading the onboarding marker of {agent_id}"),
            GET,
            &[&agent_id.as_uuid()],
        )
        .await?
        .map(|r| read(&r))
        .transpose()
    }

    async fn mark(
        &self,
        agent_id: &AgentId,
        chain_hash: &str,
    ) -> Result<OnboardingMarker, MemoryError> {
        let client = self.db.client().await?;
        let rows = query(
            &client,
            &format!("marking {agent_id} onboarded"),
            MARK,
            &[&agent_id.as_uuid(), &chain_hash],
        )
        .await?;
        match rows.first() {
            Some(r) => read(r),
            None => {
                Err(crewlet_store::StoreError::decode(TABLE, "the upsert returned no row").into())
            }
        }
    }
}
