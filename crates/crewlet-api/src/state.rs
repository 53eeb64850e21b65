//! [`ApiBuilder`] -> [`Api`]: the shared state every handler reads, the
//! router, and the background work (company reload, dedupe GC).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crewlet_config::{ApiConfig, Security, process_env};
use crewlet_memory::MemoryStores;
use crewlet_queue::EventQueue;
use crewlet_store::{ConfigRevisions, EventStore, Stores, TokenLedger, WebhookDeliveries};

use crate::auth::Tokens;
use crate::company::{ActiveCompany, EnvLookup, Snapshot};
use crate::engine_view::EngineView;

/// Request limits and background periods.
#[derive(Debug, Clone, Copy)]
pub struct ApiLimits {
    /// Largest webhook body (default 1 MiB); more answers 413.
    pub webhook_body_limit: usize,
    /// Largest `PUT /config` body (default 1 MiB); more answers 413.
    pub config_body_limit: usize,
    /// Time allowed to receive a request body (default 10 s); more answers 408.
    pub body_timeout: Duration,
    /// How often the active company revision is re-read (default 5 s).
    pub config_poll: Duration,
    /// How often old webhook delivery claims are deleted (default 5 min).
    pub dedupe_gc: Duration,
    /// Time from the first byte of a request to its last header (default
    /// 10 s); a client slower than that is disconnected.
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in flight and no
    /// byte of the next one (default 60 s): fresh and keep-alive connections.
    pub idle_timeout: Duration,
    /// Most connections open at once (default 1000). Lowered at start to
    /// the open-file limit (RLIMIT_NOFILE soft) minus
    /// [`fd_reserve`](Self::fd_reserve). At the cap, the longest-idle
    /// connection is closed to admit a new one; connections with a request
    /// in flight are never closed.
    pub max_connections: usize,
    /// File descriptors kept for everything but client connections (store
    /// and queue clients, LLM and MCP connections, logs): default 128.
    pub fd_reserve: usize,
}

impl ApiLimits {
    /// The defaults with the listener limits of `api.connections`.
    pub fn from_config(config: &ApiConfig) -> Self {
        let c = &config.connections;
        Self {
            header_read_timeout: Duration::from_secs(c.header_read_timeout_seconds.max(1)),
            idle_timeout: Duration::from_secs(c.idle_timeout_seconds.max(1)),
            max_connections: usize::try_from(c.max_connections.max(1)).unwrap_or(usize::MAX),
            ..Self::default()
        }
    }
}

impl Default for ApiLimits {
    fn default() -> Self {
        Self {
            webhook_body_limit: 1024 * 1024,
            config_body_limit: 1024 * 1024,
            body_timeout: Duration::from_secs(10),
            config_poll: Duration::from_secs(5),
            dedupe_gc: Duration::from_secs(300),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1000,
            fd_reserve: 128,
        }
    }
}

/// The repositories the API reads and writes.
#[derive(Clone)]
pub struct ApiStores {
    pub events: Arc<dyn EventStore>,
    pub webhooks: Arc<dyn WebhookDeliveries>,
    pub config: Arc<dyn ConfigRevisions>,
    pub ledger: Arc<dyn TokenLedger>,
    /// The fleet's leases (`GET /fleet`).
    pub leases: Arc<dyn crewlet_store::LeaseStore>,
}

impl From<&Stores> for ApiStores {
    fn from(s: &Stores) -> Self {
        Self {
            events: s.events.clone(),
            webhooks: s.webhooks.clone(),
            config: s.config.clone(),
            ledger: s.ledger.clone(),
            leases: s.leases.clone(),
        }
    }
}

pub(crate) struct Inner {
    pub config: ApiConfig,
    pub tokens: Tokens,
    /// Tier A `security`: what a company written through the API may do.
    pub security: Security,
    pub queue: Arc<dyn EventQueue>,
    pub stores: ApiStores,
    pub engine: Option<Arc<dyn EngineView>>,
    /// What agents remember (`GET /agents/{id}/memory`); `None`: that
    /// route answers 503 with [`memory_missing`](Self::memory_missing).
    pub memory: Option<MemoryStores>,
    /// Why there is no memory, when the process knows better than
    /// [`NO_MEMORY`].
    pub memory_missing: Option<String>,
    pub company: ActiveCompany,
    pub limits: ApiLimits,
    pub draining: AtomicBool,
    /// The live projection and fan-out (`/stream/snapshot`, `/ws/stream`).
    pub live: Arc<crate::live::LiveHub>,
}

/// Why an API built without [`ApiBuilder::memory`] has no memory.
pub(crate) const NO_MEMORY: &str = "this api was started without memory stores: an agent's memory lives in the engine process (its embedded api serves this route) or in PostgreSQL (providers.database) for a standalone api";

/// What every handler shares. Cheap to clone.
#[derive(Clone)]
pub struct ApiState(pub(crate) Arc<Inner>);

impl ApiState {
    pub(crate) fn tokens(&self) -> &Tokens {
        &self.0.tokens
    }

    pub(crate) fn inner(&self) -> &Inner {
        &self.0
    }

    /// The loaded active company revision.
    pub(crate) fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.0.company.get()
    }

    /// The live view (embedded) or the active revision's organization.
    pub(crate) fn view(&self) -> Option<Arc<dyn EngineView>> {
        if let Some(engine) = &self.0.engine {
            return Some(engine.clone());
        }
        self.snapshot()
            .map(|s| s.view.clone() as Arc<dyn EngineView>)
    }

    /// Marks the API as draining: `/ready` answers 503 from now on.
    pub fn set_draining(&self) {
        self.0.draining.store(true, Ordering::Release);
        self.0.live.shutdown();
    }

    pub fn is_draining(&self) -> bool {
        self.0.draining.load(Ordering::Acquire)
            || self.0.engine.as_ref().is_some_and(|e| e.is_draining())
    }

    /// The loaded active revision id, if any.
    pub fn active_revision_id(&self) -> Option<i64> {
        self.snapshot().map(|s| s.revision_id)
    }

    /// Re-reads the active company revision now.
    pub async fn reload_company(&self) {
        self.0.company.refresh().await;
    }
}

/// Builds an [`Api`].
pub struct ApiBuilder {
    config: ApiConfig,
    queue: Arc<dyn EventQueue>,
    stores: ApiStores,
    engine: Option<Arc<dyn EngineView>>,
    secrets: Option<Arc<crewlet_backends::Secrets>>,
    memory: Option<MemoryStores>,
    memory_missing: Option<String>,
    env: EnvLookup,
    security: Security,
    limits: ApiLimits,
}

impl ApiBuilder {
    /// The Tier A `api` section, the queue webhooks are published to, and the
    /// stores. Secrets are expanded from the process environment unless
    /// [`secret_env`](Self::secret_env) says otherwise, and only for the
    /// variables [`security`](Self::security) lets the company read.
    pub fn new(
        config: ApiConfig,
        queue: Arc<dyn EventQueue>,
        stores: impl Into<ApiStores>,
    ) -> Self {
        let limits = ApiLimits::from_config(&config);
        Self {
            config,
            queue,
            stores: stores.into(),
            engine: None,
            secrets: None,
            memory: None,
            memory_missing: None,
            env: Arc::new(process_env),
            security: Security::default(),
            limits,
        }
    }

    /// The engine's live view (when the API is embedded in the engine process).
    pub fn engine(mut self, engine: Arc<dyn EngineView>) -> Self {
        self.engine = Some(engine);
        self
    }

    /// The memory stores `GET /agents/{id}/memory` reads (the engine's own
    /// when embedded; PostgreSQL's when standalone). Without them that
    /// route answers 503.
    pub fn memory(mut self, stores: MemoryStores) -> Self {
        self.memory = Some(stores);
        self.memory_missing = None;
        self
    }

    /// No memory stores, and why (e.g. they failed to open): the reason of
    /// the 503 `GET /agents/{id}/memory` answers.
    pub fn memory_unavailable(mut self, reason: impl Into<String>) -> Self {
        self.memory = None;
        self.memory_missing = Some(reason.into());
        self
    }

    /// Where `${VAR}` references in webhook secrets are looked up.
    pub fn secret_env(
        mut self,
        env: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.env = Arc::new(env);
        self
    }

    /// Tier A `security` (default: [`Security::default`]): checked on every
    /// `PUT /config` and revert, and the filter of every `${VAR}` lookup.
    /// The secret store: the company's `${NAME}` resolve from it before the
    /// environment, and a standalone API reads it again whenever a new
    /// revision activates.
    pub fn secrets(mut self, secrets: Arc<crewlet_backends::Secrets>) -> Self {
        self.secrets = Some(secrets);
        self
    }

    pub fn security(mut self, security: Security) -> Self {
        self.security = security;
        self
    }

    /// Replaces the event store reads go to (e.g. a buffered one).
    pub fn events(mut self, events: Arc<dyn EventStore>) -> Self {
        self.stores.events = events;
        self
    }

    pub fn limits(mut self, limits: ApiLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Loads the active company revision (if any) and builds the router.
    pub async fn build(self) -> crate::Api {
        // The listener's host (set by `prepare_listener` to the address it
        // binds): a host the bootstrap may not serve anonymously on gets no
        // anonymous reads at all, never more than it asked for.
        let anonymous = self
            .config
            .auth
            .anonymous_access(&self.config.host)
            .unwrap_or_else(|reason| {
                tracing::error!("{reason}; anonymous reads are refused");
                crewlet_config::AnonymousAccess::None
            });
        let tokens = Tokens::new(&self.config.auth, anonymous);
        if tokens.is_empty() {
            tracing::warn!(
                "no api tokens configured (api.auth.tokens): /config and every write answer 401"
            );
        }
        crate::auth::Tokens::warn_unscoped(&self.config.auth);
        let env = match &self.secrets {
            Some(secrets) => secrets.lookup(self.env),
            None => self.env,
        };
        let env = self.security.company_lookup(env);
        // With an engine in the process, the engine reloads the secrets.
        let reload = self.secrets.clone().filter(|_| self.engine.is_none());
        let company =
            ActiveCompany::new(self.stores.config.clone(), env, self.engine.clone(), reload);
        // The live stream subscribes here, before the API can answer, so
        // every event published once `build` returns reaches it.
        let live = Arc::new(crate::live::LiveHub::new());
        live.subscribe(self.queue.as_ref()).await;
        let state = ApiState(Arc::new(Inner {
            config: self.config,
            tokens,
            security: self.security,
            queue: self.queue,
            stores: self.stores,
            engine: self.engine,
            memory: self.memory,
            memory_missing: self.memory_missing,
            company,
            limits: self.limits,
            draining: AtomicBool::new(false),
            live,
        }));
        state.reload_company().await;
        crate::Api::new(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listener_limits_come_from_api_connections() {
        let yaml = "connections:\n  header_read_timeout_seconds: 3\n  idle_timeout_seconds: 7\n  max_connections: 50\n";
        let config: ApiConfig = serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}"));
        let limits = ApiLimits::from_config(&config);
        assert_eq!(limits.header_read_timeout, Duration::from_secs(3));
        assert_eq!(limits.idle_timeout, Duration::from_secs(7));
        assert_eq!(limits.max_connections, 50);
        // Everything else keeps its default.
        assert_eq!(
            limits.webhook_body_limit,
            ApiLimits::default().webhook_body_limit
        );
        let defaults = ApiLimits::from_config(&ApiConfig::default());
        assert_eq!(defaults.max_connections, 1000);
        assert_eq!(defaults.header_read_timeout, Duration::from_secs(10));
    }
}
