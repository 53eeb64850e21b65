//! The active company revision as the API uses it: the parsed company, its
//! organization and the webhook secrets (`crewlet_integrations::WebhookSecrets`:
//! each source says where its secrets sit; `${VAR}` expanded from the
//! process environment, only the names Tier A `security.company_env`
//! allows: the lookup given here is already filtered by `ApiBuilder`). Reloaded when the active revision changes, by a
//! background poll, after a write through this API, and on demand when a
//! webhook arrives before any company is known. When an engine in this
//! process runs the same revision, its parsed company and organization are
//! shared rather than parsed a second time. Each loaded secret is
//! registered with `crewlet_telemetry::register_secret`, so no log line or
//! exported span shows it.

use parking_lot::{Mutex, RwLock};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crewlet_config::{Company, Organization};
use crewlet_integrations::WebhookSecrets;
use crewlet_store::{ConfigRevision, ConfigRevisions};
use tracing::{info, warn};

use crate::engine_view::{EngineView, RunningCompany, StaticEngineView};

/// Looks up an environment variable (the process environment in production).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// One loaded revision.
pub(crate) struct Snapshot {
    pub revision_id: i64,
    pub activated_at: Option<chrono::DateTime<chrono::Utc>>,
    pub company: Arc<Company>,
    pub org: Arc<Organization>,
    /// Whether `company` and `org` are the engine's own copies.
    shared: bool,
    pub secrets: WebhookSecrets,
    pub view: Arc<StaticEngineView>,
}

impl fmt::Debug for Snapshot {
    // The company may hold literal secrets: never print it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("revision_id", &self.revision_id)
            .field("company", &self.company.name)
            .finish_non_exhaustive()
    }
}

impl Snapshot {
    pub fn load(
        revision: &ConfigRevision,
        env: &EnvLookup,
        engine: Option<RunningCompany>,
    ) -> Result<Self, String> {
        let (company, org, shared) = match engine {
            Some(running) if running.revision_id == revision.revision_id => {
                (running.company, running.org, true)
            }
            _ => {
                let company: Company =
                    serde_json::from_value(revision.payload.clone()).map_err(|e| {
                        format!(
                            "active company revision {} cannot be read: {e}",
                            revision.revision_id
                        )
                    })?;
                let org = Arc::new(company.organization());
                (Arc::new(company), org, false)
            }
        };
        // Where each secret sits is the source's knowledge (`WebhookSource::secrets`).
        let secrets = WebhookSecrets::from_company(&company, &org, |name| env(name));
        // Never in a log line or an exported span from now on.
        crewlet_telemetry::register_secrets(secrets.values());
        let view = Arc::new(StaticEngineView::new(
            Some(org.clone()),
            Some(revision.revision_id),
        ));
        Ok(Self {
            revision_id: revision.revision_id,
            activated_at: revision.activated_at,
            company,
            org,
            shared,
            secrets,
            view,
        })
    }
}

/// The API's copy of the active revision.
pub(crate) struct ActiveCompany {
    configs: Arc<dyn ConfigRevisions>,
    env: EnvLookup,
    /// The engine in this process, if any.
    engine: Option<Arc<dyn EngineView>>,
    /// Read again before a new revision is loaded (standalone API).
    secrets: Option<Arc<crewlet_backends::Secrets>>,
    current: RwLock<Option<Arc<Snapshot>>>,
    last_error: Mutex<Option<String>>,
    last_refresh: Mutex<Option<Instant>>,
    refreshing: tokio::sync::Mutex<()>,
}

impl ActiveCompany {
    pub fn new(
        configs: Arc<dyn ConfigRevisions>,
        env: EnvLookup,
        engine: Option<Arc<dyn EngineView>>,
        secrets: Option<Arc<crewlet_backends::Secrets>>,
    ) -> Self {
        Self {
            configs,
            env,
            engine,
            secrets,
            current: RwLock::new(None),
            last_error: Mutex::new(None),
            last_refresh: Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    pub fn get(&self) -> Option<Arc<Snapshot>> {
        self.current.read().clone()
    }

    /// Why the active revision could not be loaded, if it could not.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    /// Reads the active revision and reloads when it changed.
    pub async fn refresh(&self) {
        let _one = self.refreshing.lock().await;
        *self.last_refresh.lock() = Some(Instant::now());
        let unreadable = |e: &dyn fmt::Display| {
            warn!(error = %e, "cannot read the active company revision; keeping the one loaded");
        };
        // The key first: the company itself is read only when it changed.
        let key = match self.configs.active_key().await {
            Ok(Some(key)) => key,
            Ok(None) => {
                *self.current.write() = None;
                return;
            }
            Err(e) => return unreadable(&e),
        };
        let running = self.engine.as_ref().and_then(|e| e.running());
        let engine_runs_it = running
            .as_ref()
            .is_some_and(|r| r.revision_id == key.revision_id);
        if let Some(cur) = self.get()
            && cur.revision_id == key.revision_id
            && cur.activated_at == key.activated_at
            // Loaded before the engine started on it: adopt the engine's copy.
            && (cur.shared || !engine_runs_it)
        {
            return;
        }
        let revision = match self.configs.active().await {
            Ok(Some(revision)) => revision,
            Ok(None) => {
                *self.current.write() = None;
                return;
            }
            Err(e) => return unreadable(&e),
        };
        if let Some(secrets) = &self.secrets
            && let Err(e) = secrets.reload().await
        {
            warn!(error = %e, "cannot read the secret store; keeping the secrets loaded before");
        }
        match Snapshot::load(&revision, &self.env, running) {
            Ok(s) => {
                info!(
                    revision_id = s.revision_id,
                    company = %s.company.name,
                    seats = s.org.seats().len(),
                    shared_with_engine = s.shared,
                    "company revision loaded"
                );
                *self.last_error.lock() = None;
                *self.current.write() = Some(Arc::new(s));
            }
            Err(e) => {
                warn!(error = %e, "keeping the previously loaded company revision");
                *self.last_error.lock() = Some(e);
            }
        }
    }

    /// [`refresh`](Self::refresh) unless one ran within `min_gap`.
    pub async fn refresh_if_older(&self, min_gap: Duration) {
        let recent = self
            .last_refresh
            .lock()
            .is_some_and(|t| t.elapsed() < min_gap);
        if !recent {
            self.refresh().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_view::{AgentView, ToolView};
    use crewlet_store::{MemoryConfigRevisions, NewRevision};

    /// An engine that runs whatever it is told to.
    #[derive(Default)]
    struct FakeEngine(Mutex<Option<RunningCompany>>);

    impl EngineView for FakeEngine {
        fn agents(&self) -> Vec<AgentView> {
            Vec::new()
        }
        fn tools(&self, _handle: Option<&str>) -> Vec<ToolView> {
            Vec::new()
        }
        fn is_ready(&self) -> bool {
            true
        }
        fn is_draining(&self) -> bool {
            false
        }
        fn organization(&self) -> Option<Arc<Organization>> {
            self.0.lock().as_ref().map(|r| r.org.clone())
        }
        fn running(&self) -> Option<RunningCompany> {
            self.0.lock().clone()
        }
    }

    const YAML: &str = "name: Acme\nroles:\n  - name: Eng\n    handle: eng\n";

    #[tokio::test]
    async fn the_engines_company_is_shared_once_it_runs_the_active_revision() {
        let configs = Arc::new(MemoryConfigRevisions::new());
        let company = Company::from_yaml("t", YAML).unwrap_or_else(|e| panic!("{e}"));
        let payload = serde_json::to_value(&company).unwrap_or_else(|e| panic!("{e}"));
        let revision = configs
            .create(NewRevision {
                parent_revision_id: None,
                created_by: "t".into(),
                source: "test".into(),
                summary: "first".into(),
                payload,
                activate: true,
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let engine = Arc::new(FakeEngine::default());
        let env: EnvLookup = Arc::new(|_| None);
        let active = ActiveCompany::new(configs, env, Some(engine.clone()), None);

        // Before the engine starts: the API reads its own copy.
        active.refresh().await;
        let own = active.get().unwrap_or_else(|| panic!("no snapshot"));
        assert!(!own.shared);
        assert_eq!(own.org.seats().len(), 1);

        // The engine runs another revision: nothing to share.
        let other = RunningCompany {
            revision_id: revision.revision_id + 1,
            company: Arc::new(company.clone()),
            org: Arc::new(company.organization()),
        };
        *engine.0.lock() = Some(other);
        active.refresh().await;
        let still = active.get().unwrap_or_else(|| panic!("no snapshot"));
        assert!(Arc::ptr_eq(&still, &own));

        // Once it runs the active one, its copies replace the API's.
        let running = RunningCompany {
            revision_id: revision.revision_id,
            company: Arc::new(company.clone()),
            org: Arc::new(company.organization()),
        };
        *engine.0.lock() = Some(running.clone());
        active.refresh().await;
        let shared = active.get().unwrap_or_else(|| panic!("no snapshot"));
        assert!(shared.shared);
        assert!(Arc::ptr_eq(&shared.org, &running.org));
        assert!(Arc::ptr_eq(&shared.company, &running.company));
        assert_eq!(shared.revision_id, revision.revision_id);

        // And a later poll keeps it.
        active.refresh().await;
        let again = active.get().unwrap_or_else(|| panic!("no snapshot"));
        assert!(Arc::ptr_eq(&again, &shared));
    }
}
