//! [`EngineOptions`]: how an engine behaves beyond what the company says.

use std::sync::Arc;
use std::time::Duration;

use crate::maintenance::MAINTENANCE_INTERVAL;

/// Looks up an environment variable.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// How an engine behaves beyond what the company says.
#[derive(Clone)]
pub struct EngineOptions {
    /// How long shutdown waits for running turns.
    pub drain_timeout: Duration,
    /// Name of this process in schedule claims.
    pub node_name: String,
    /// Start the company's MCP servers.
    pub start_mcp: bool,
    /// Consume `crewlet.notifications.inbound`.
    pub run_router: bool,
    /// Fire schedules (also needs `scheduling.enabled` in the company).
    pub run_scheduler: bool,
    /// Stream completions so turns publish live `agent_turn_progress`.
    pub stream_progress: bool,
    /// Where `${VAR}` references of providers and MCP servers are looked up.
    /// Default: the process environment, only the names the default Tier A
    /// `security.company_env` allows (`crewlet run` uses the bootstrap's).
    pub env: EnvLookup,
    /// Store upkeep (partitions ahead, webhook claim GC) at boot and then
    /// this often; `None` turns it off. Default 24 h ([`MAINTENANCE_INTERVAL`]).
    pub maintenance_interval: Option<Duration>,
    /// Whether that upkeep deletes old webhook delivery claims. Turn it off
    /// when an API in the same process already does (`crewlet run` does so
    /// when it serves the embedded API).
    pub gc_webhook_deliveries: bool,
    /// How the Mattermost seat sockets reconnect and backfill.
    pub mattermost: crewlet_integrations::mattermost::SocketOptions,
    /// How long a colleague's question waits for an answer before it goes
    /// up the manager chain. Default 15 minutes.
    pub ask_escalate_after: Duration,
    /// Where the tool skills are read from, and how often.
    pub tool_skills: crate::tool_skills::SkillSyncOptions,
    /// This process as a fleet node: the seats it holds by lease and the
    /// duties it may run. `None`: the engine runs every seat and every
    /// duty (one process, tests, embedding).
    pub fleet: Option<FleetHandles>,
    /// Download the catalogue models the company's `type: local` providers
    /// and local embedder name when they are missing (`crewlet run` does,
    /// unless `--offline`). Off by default: a missing model then makes its
    /// provider unavailable with the command that fetches it.
    pub pull_models: bool,
}

/// What an engine of a fleet node works with.
#[derive(Clone, Debug)]
pub struct FleetHandles {
    pub host: Arc<crate::fleet::SeatHost>,
    pub duties: crate::fleet::Duties,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            drain_timeout: Duration::from_secs(30),
            node_name: default_node_name(),
            start_mcp: true,
            run_router: true,
            run_scheduler: true,
            stream_progress: true,
            env: crewlet_config::Security::default().company_process_env(),
            maintenance_interval: Some(MAINTENANCE_INTERVAL),
            gc_webhook_deliveries: true,
            mattermost: Default::default(),
            ask_escalate_after: crate::colleagues::DEFAULT_ESCALATE_AFTER,
            tool_skills: Default::default(),
            fleet: None,
            pull_models: false,
        }
    }
}

impl std::fmt::Debug for EngineOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineOptions")
            .field("drain_timeout", &self.drain_timeout)
            .field("node_name", &self.node_name)
            .field("start_mcp", &self.start_mcp)
            .field("run_router", &self.run_router)
            .field("run_scheduler", &self.run_scheduler)
            .field("stream_progress", &self.stream_progress)
            .field("maintenance_interval", &self.maintenance_interval)
            .field("gc_webhook_deliveries", &self.gc_webhook_deliveries)
            .field("ask_escalate_after", &self.ask_escalate_after)
            .field("tool_skills", &self.tool_skills)
            .field("fleet", &self.fleet)
            .field("pull_models", &self.pull_models)
            .finish_non_exhaustive()
    }
}

fn default_node_name() -> String {
    let host = crate::fleet::identity::host_name().unwrap_or_else(|| "engine".into());
    format!("{host}-{}", std::process::id())
}
