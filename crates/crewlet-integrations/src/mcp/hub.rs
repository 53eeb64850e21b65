use std::collections::BTreeMap;
use std::fmt;

use crewlet_core::{Event, EventType};
use serde_json::json;

use super::{McpClient, McpError, McpServerSpec};

/// The servers one role gets of its own, launched with the role's `mcp_env`.
#[derive(Clone, Default)]
pub struct RoleMcpServers {
    /// The role's handle.
    pub role: String,
    pub servers: Vec<McpServerSpec>,
    /// Env vars (stdio) or headers (HTTP) added to each of `servers`.
    pub mcp_env: BTreeMap<String, String>,
}

impl fmt::Debug for RoleMcpServers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoleMcpServers")
            .field("role", &self.role)
            .field("servers", &self.servers)
            .field("mcp_env", &self.mcp_env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// What to start: the company's shared servers and each role's own.
#[derive(Debug, Clone, Default)]
pub struct McpHubPlan {
    pub shared: Vec<McpServerSpec>,
    pub roles: Vec<RoleMcpServers>,
}

/// Whose a server is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum McpScope {
    Shared,
    /// A role's handle.
    Role(String),
}

impl fmt::Display for McpScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpScope::Shared => f.write_str("shared"),
            McpScope::Role(role) => write!(f, "role {role}"),
        }
    }
}

/// A server that did not start; the rest run without it.
#[derive(Debug)]
pub struct McpStartFailure {
    pub scope: McpScope,
    pub server: String,
    pub error: McpError,
}

impl McpStartFailure {
    /// The `mcp_server_failed` event the engine publishes for it.
    pub fn to_event(&self) -> Event {
        let role = match &self.scope {
            McpScope::Shared => None,
            McpScope::Role(r) => Some(r.clone()),
        };
        let mut event = Event::new(EventType::McpServerFailed, "integrations.mcp")
            .with_summary(format!(
                "mcp server {} ({}) skipped: {}",
                self.server, self.scope, self.error
            ))
            .with_tag("mcp_server", self.server.clone())
            .with_payload(json!({
                "server": self.server,
                "scope": if role.is_some() { "role" } else { "shared" },
                "role": role,
                "error": self.error.to_string(),
                "timeout": self.error.is_timeout(),
            }));
        if let Some(role) = role {
            event.agent_role = Some(role);
        }
        event
    }
}

/// The running MCP servers of a company.
#[derive(Debug, Default)]
pub struct McpHub {
    shared: BTreeMap<String, McpClient>,
    roles: BTreeMap<String, BTreeMap<String, McpClient>>,
}

impl McpHub {
    /// Starts every server of the plan concurrently. A server that fails is
    /// returned as a failure and left out; it never stops the others.
    pub async fn start(plan: McpHubPlan) -> (McpHub, Vec<McpStartFailure>) {
        let mut jobs = Vec::new();
        for spec in plan.shared {
            jobs.push((McpScope::Shared, spec));
        }
        for role in plan.roles {
            for spec in &role.servers {
                jobs.push((
                    McpScope::Role(role.role.clone()),
                    spec.for_role(&role.mcp_env),
                ));
            }
        }
        let results = futures::future::join_all(jobs.into_iter().map(|(scope, spec)| async move {
            let result = McpClient::connect(&spec).await;
            (scope, spec.name, result)
        }))
        .await;

        let mut hub = McpHub::default();
        let mut failures = Vec::new();
        for (scope, server, result) in results {
            match result {
                Ok(client) => {
                    let slot = match &scope {
                        McpScope::Shared => &mut hub.shared,
                        McpScope::Role(role) => hub.roles.entry(role.clone()).or_default(),
                    };
                    if let Some(previous) = slot.insert(server.clone(), client) {
                        tracing::warn!(mcp_server = %server, %scope, "two mcp servers share a name; the later one wins");
                        previous.shutdown().await;
                    }
                }
                Err(error) => {
                    tracing::warn!(mcp_server = %server, %scope, %error, "mcp server skipped");
                    failures.push(McpStartFailure {
                        scope,
                        server,
                        error,
                    });
                }
            }
        }
        (hub, failures)
    }

    /// The shared servers, by name.
    pub fn shared(&self) -> &BTreeMap<String, McpClient> {
        &self.shared
    }

    /// A role's own servers, by name (empty for a role without any).
    pub fn role_servers(&self, role: &str) -> impl Iterator<Item = (&str, &McpClient)> {
        self.roles
            .get(role)
            .into_iter()
            .flatten()
            .map(|(name, client)| (name.as_str(), client))
    }

    /// Everything a role's agent may use: the shared servers plus its own,
    /// its own winning where both have a server of the same name.
    pub fn for_role(&self, role: &str) -> BTreeMap<&str, &McpClient> {
        let mut all: BTreeMap<&str, &McpClient> = self
            .shared
            .iter()
            .map(|(name, client)| (name.as_str(), client))
            .collect();
        all.extend(self.role_servers(role));
        all
    }

    pub fn get(&self, scope: &McpScope, name: &str) -> Option<&McpClient> {
        match scope {
            McpScope::Shared => self.shared.get(name),
            McpScope::Role(role) => self.roles.get(role)?.get(name),
        }
    }

    /// Number of running servers.
    pub fn len(&self) -> usize {
        self.shared.len() + self.roles.values().map(BTreeMap::len).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shuts every server down concurrently.
    pub async fn shutdown(self) {
        let clients = self
            .shared
            .into_values()
            .chain(self.roles.into_values().flat_map(BTreeMap::into_values));
        futures::future::join_all(clients.map(|c| async move { c.shutdown().await })).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_event_names_server_scope_and_cause() {
        let failure = McpStartFailure {
            scope: McpScope::Role("writer".into()),
            server: "github".into(),
            error: McpError::StartFailed {
                server: "github".into(),
                reason: "could not run `gh-mcp`: not found".into(),
                stderr: String::new(),
            },
        };
        let e = failure.to_event();
        assert_eq!(e.event_type, EventType::McpServerFailed);
        assert_eq!(e.agent_role.as_deref(), Some("writer"));
        assert_eq!(e.payload["scope"], "role");
        assert!(e.summary.contains("github") && e.summary.contains("role writer"));
        assert!(e.payload["error"].as_str().unwrap().contains("gh-mcp"));
    }

    #[test]
    fn role_debug_hides_env_values() {
        let mut env = BTreeMap::new();
        env.insert("GITHUB_TOKEN".to_string(), "ghp_secret".to_string());
        let r = RoleMcpServers {
            role: "writer".into(),
            servers: vec![],
            mcp_env: env,
        };
        let dbg = format!("{r:?}");
        assert!(dbg.contains("GITHUB_TOKEN") && !dbg.contains("ghp_secret"));
    }

    #[tokio::test]
    async fn empty_plan_starts_nothing() {
        let (hub, failures) = McpHub::start(McpHubPlan::default()).await;
        assert!(hub.is_empty() && failures.is_empty());
        assert!(hub.for_role("x").is_empty());
        hub.shutdown().await;
    }
}
