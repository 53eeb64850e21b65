//! Company-wide duties (the scheduler's tick, store maintenance with the
//! learning consolidation) run on one node at a time: each tick, a node
//! with the `duties` role claims `duty:{name}` (a lease, renewed by the
//! same claim next tick) and runs the tick only if it holds it. A node
//! that dies lets the lease lapse and a peer takes the duty at its next
//! tick. A claim that fails (the database is down) skips the tick:
//! unknown ownership is not ownership.

use std::sync::Arc;

use crewlet_config::NodeRole;
use crewlet_store::{DUTY_PREFIX, LeaseClaim, LeaseStore};
use tracing::{debug, warn};

use super::identity::NodeIdentity;

/// The scheduler's tick.
pub const SCHEDULER: &str = "scheduler";
/// Store upkeep, retention and the learning consolidation.
pub const MAINTENANCE: &str = "maintenance";

/// Claims duties for this node.
#[derive(Clone)]
pub struct Duties {
    identity: NodeIdentity,
    leases: Arc<dyn LeaseStore>,
}

impl std::fmt::Debug for Duties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Duties")
            .field("node", &self.identity.id)
            .finish_non_exhaustive()
    }
}

impl Duties {
    pub fn new(identity: NodeIdentity, leases: Arc<dyn LeaseStore>) -> Self {
        Self { identity, leases }
    }

    /// Whether this node runs duty `name` this tick.
    pub async fn hold(&self, name: &str) -> bool {
        if !self.identity.has(NodeRole::Duties) {
            return false;
        }
        let claim = LeaseClaim::new(format!("{DUTY_PREFIX}{name}"), self.identity.id.clone());
        match self
            .leases
            .acquire(
                &[claim],
                &self.identity.incarnation,
                self.identity.lease_ttl,
            )
            .await
        {
            Ok(won) if !won.is_empty() => true,
            Ok(_) => {
                debug!(duty = name, "duty held by another node this tick");
                false
            }
            Err(e) => {
                warn!(duty = name, error = %e, "cannot claim a duty; the tick is skipped");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewlet_store::MemoryLeases;

    #[tokio::test]
    async fn one_node_holds_a_duty_and_a_node_without_the_role_never_does() {
        let leases: Arc<dyn LeaseStore> = Arc::new(MemoryLeases::new());
        let a = Duties::new(NodeIdentity::local("a"), leases.clone());
        let b = Duties::new(NodeIdentity::local("b"), leases.clone());
        assert!(a.hold(SCHEDULER).await);
        assert!(
            a.hold(SCHEDULER).await,
            "the holder keeps it tick after tick"
        );
        assert!(!b.hold(SCHEDULER).await);
        assert!(b.hold(MAINTENANCE).await, "duties are held one by one");
        let mut ingress = NodeIdentity::local("c");
        ingress.roles = vec![NodeRole::Ingress];
        let c = Duties::new(ingress, leases);
        assert!(!c.hold("anything").await);
    }
}
