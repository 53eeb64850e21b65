//! Who this process is in a fleet: its stable node id, its incarnation
//! (the id plus a random part, minted at start: the owner of its leases),
//! its roles and labels, and the timing of its leases.

use std::collections::BTreeMap;
use std::time::Duration;

use crewlet_config::{NodeConfig, NodeRole};
use serde_json::{Value, json};

/// The engine's lease protocol: what holding a seat lease obliges a node
/// to do (consult the completion ledger, journal its turns, honour
/// placement). A node never claims while a live lease is held at a lower
/// protocol; see `docs/fleet.md`.
pub const LEASE_PROTOCOL: u32 = 1;

/// This process as a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeIdentity {
    /// Stable across restarts (`node.id`, `CREWLET_NODE_ID`, else the host
    /// name).
    pub id: String,
    /// `{id}:{random}`: the owner of this process's leases.
    pub incarnation: String,
    pub roles: Vec<NodeRole>,
    pub labels: BTreeMap<String, String>,
    pub lease_ttl: Duration,
    pub heartbeat: Duration,
    /// The build (`CARGO_PKG_VERSION`).
    pub version: String,
}

impl NodeIdentity {
    /// From the bootstrap's `node` block, `CREWLET_NODE_ID` (`env`) and the
    /// command line's `--roles` (over the block's).
    pub fn resolve(
        node: Option<&NodeConfig>,
        env: impl Fn(&str) -> Option<String>,
        roles: Option<&[NodeRole]>,
    ) -> Self {
        let defaults = NodeConfig::default();
        let node = node.unwrap_or(&defaults);
        let id = env("CREWLET_NODE_ID")
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .or_else(|| Some(node.id.trim().to_owned()).filter(|v| !v.is_empty()))
            .unwrap_or_else(|| host_name().unwrap_or_else(|| "node-0".into()));
        let mut roles: Vec<NodeRole> = match roles {
            Some(r) if !r.is_empty() => r.to_vec(),
            _ if !node.roles.is_empty() => node.roles.clone(),
            _ => NodeRole::ALL.to_vec(),
        };
        roles.sort_by_key(|r| NodeRole::ALL.iter().position(|a| a == r));
        roles.dedup();
        let incarnation = format!("{id}:{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        Self {
            id,
            incarnation,
            roles,
            labels: node
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            lease_ttl: Duration::from_secs(u64::from(node.lease_ttl_seconds.max(2))),
            heartbeat: Duration::from_secs(u64::from(node.heartbeat_seconds.max(1))),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }

    /// A node of one process (tests, embedding): every role, default timing.
    pub fn local(id: &str) -> Self {
        Self::resolve(
            Some(&NodeConfig {
                id: id.to_owned(),
                ..NodeConfig::default()
            }),
            |_| None,
            None,
        )
    }

    pub fn has(&self, role: NodeRole) -> bool {
        self.roles.contains(&role)
    }

    /// What the node's presence lease says about it.
    pub fn meta(&self, api: Option<&str>) -> Value {
        json!({
            "roles": self.roles.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
            "labels": self.labels,
            "version": self.version,
            "protocol": LEASE_PROTOCOL,
            "incarnation": self.incarnation,
            "api": api,
        })
    }
}

/// `--roles ingress,seats,duties` (also the original's `workers`).
pub fn parse_roles(text: &str) -> Result<Vec<NodeRole>, String> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            NodeRole::parse(s).ok_or_else(|| {
                format!(
                    "unknown node role `{}`: use ingress, seats or duties",
                    s.trim()
                )
            })
        })
        .collect()
}

/// This machine's host name (the kernel's, else `$HOSTNAME`), if known.
pub(crate) fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_names_the_node_and_the_command_line_its_roles() {
        let block = NodeConfig {
            id: "from-file".into(),
            roles: vec![NodeRole::Seats],
            ..NodeConfig::default()
        };
        let env = |k: &str| (k == "CREWLET_NODE_ID").then(|| "pod-2".to_owned());
        let n = NodeIdentity::resolve(Some(&block), env, None);
        assert_eq!(n.id, "pod-2");
        assert!(n.incarnation.starts_with("pod-2:") && n.incarnation.len() == 14);
        assert_eq!(n.roles, vec![NodeRole::Seats]);
        let roles = parse_roles("duties, ingress").unwrap_or_default();
        let n = NodeIdentity::resolve(Some(&block), |_| None, Some(&roles));
        assert_eq!(n.id, "from-file");
        assert_eq!(n.roles, vec![NodeRole::Ingress, NodeRole::Duties]);
        assert_eq!(NodeIdentity::local("x").roles, NodeRole::ALL.to_vec());
        assert!(parse_roles("seats,cooks").is_err());
        assert_eq!(parse_roles("workers"), Ok(vec![NodeRole::Duties]));
        // Two processes of one node id are two owners.
        assert_ne!(
            NodeIdentity::local("x").incarnation,
            NodeIdentity::local("x").incarnation
        );
    }
}
