//! The active company revision as the API uses it: the parsed company, its
//! organization and the webhook secrets (`crewlet_integrations::WebhookSecrets`:
//! each source says where its secrets sit; `${VAR}` expanded from the
//! process environment, only the names Tier A `security.company_env`
//! allows: the lookup given here is already filtered by `ApiBuilder`). Reloaded when the active revision changes, by a
//! background poll, after a write through this API, and on demand when a
//! webhook arrives before any company is known. Each loaded secret is
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

use crate::engine_view::StaticEngineView;

/// Looks up an environment variable (the process environment in production).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// One loaded revision.
pub(crate) struct Snapshot {
    pub revision_id: i64,
    pub activated_at: Option<chrono::DateTime<chrono::Utc>>,
    pub company: Company,
    pub org: Arc<Organization>,
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
    pub fn load(revision: &ConfigRevision, env: &EnvLookup) -> Result<Self, String> {
        let company: Company = serde_json::from_value(revision.payload.clone()).map_err(|e| {
            format!(
                "active company revision {} cannot be read: {e}",
                revision.revision_id
            )
        })?;
        let org = Arc::new(company.organization());
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
            secrets,
            view,
        })
    }
}

/// The API's copy of the active revision.
pub(crate) struct ActiveCompany {
    configs: Arc<dyn ConfigRevisions>,
    env: EnvLookup,
    current: RwLock<Option<Arc<Snapshot>>>,
    last_error: Mutex<Option<String>>,
    last_refresh: Mutex<Option<Instant>>,
    refreshing: tokio::sync::Mutex<()>,
}

impl ActiveCompany {
    pub fn new(configs: Arc<dyn ConfigRevisions>, env: EnvLookup) -> Self {
        Self {
            configs,
            env,
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
        let active = match self.configs.active().await {
            Ok(a) => a,
            Err(e) => {
                warn!(error = %e, "cannot read the active company revision; keeping the one loaded");
                return;
            }
        };
        let Some(revision) = active else {
            *self.current.write() = None;
            return;
        };
        if let Some(cur) = self.get()
            && cur.revision_id == revision.revision_id
            && cur.activated_at == revision.activated_at
        {
            return;
        }
        match Snapshot::load(&revision, &self.env) {
            Ok(s) => {
                info!(
                    revision_id = s.revision_id,
                    company = %s.company.name,
                    seats = s.org.seats().len(),
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
