//! Conformance of [`OnboardingMarkers`].

use std::sync::Arc;

use crewlet_core::AgentId;

use super::ok;
use crate::repos::OnboardingMarkers;

pub async fn markers_are_absent_then_marked_then_replaced(repo: Arc<dyn OnboardingMarkers>) {
    let id = AgentId::for_seat("Conformance", "eng");
    assert!(ok(repo.get(&id).await, "get").is_none());
    let m = ok(repo.mark(&id, "chain-1").await, "mark");
    assert_eq!((m.agent_id, m.chain_hash.as_str()), (id, "chain-1"));
    assert_eq!(ok(repo.get(&id).await, "get"), Some(m.clone()));
    let again = ok(repo.mark(&id, "chain-2").await, "mark again");
    assert!(again.onboarded_at >= m.onboarded_at);
    assert_eq!(
        ok(repo.get(&id).await, "get").map(|m| m.chain_hash),
        Some("chain-2".to_owned())
    );
    let other = AgentId::for_seat("Conformance", "pm");
    assert!(ok(repo.get(&other).await, "get other").is_none());
}
