//! The onboarding markers' in-memory twin.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::Utc;
use crewlet_core::AgentId;
use parking_lot::Mutex;

use crate::error::MemoryError;
use crate::repos::OnboardingMarkers;
use crate::rules::micros;
use crate::types::OnboardingMarker;

/// [`OnboardingMarkers`] in process memory.
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
    async fn get(&self, agent_id: &AgentId) -> Result<Option<OnboardingMarker>, MemoryError> {
        Ok(self.markers.lock().get(agent_id).cloned())
    }

    async fn mark(
        &self,
        agent_id: &AgentId,
        chain_hash: &str,
    ) -> Result<OnboardingMarker, MemoryError> {
        let marker = OnboardingMarker {
            agent_id: *agent_id,
            chain_hash: chain_hash.to_owned(),
            onboarded_at: micros(Utc::now()),
        };
        self.markers.lock().insert(*agent_id, marker.clone());
        Ok(marker)
    }
}
