//! The secret store as a process uses it: the keyring from the bootstrap
//! file's `secrets` block, every stored value opened into a snapshot at start
//! and again when a new company revision activates, and the company's
//! `${NAME}` resolved from that snapshot first, the environment second.
//!
//! `security.company_env` governs every `${NAME}` alike: a stored name the
//! policy does not allow stays unreadable to the company.

use std::sync::Arc;

use crewlet_config::{Bootstrap, Lookup};
use crewlet_store::{Keyring, SecretSnapshot, SecretStore, Stores};
use tracing::{info, warn};

use crate::BackendError;

/// The keyring of `bootstrap`, if it has one.
pub fn keyring(bootstrap: &Bootstrap) -> Result<Option<Arc<Keyring>>, BackendError> {
    let Some(secrets) = &bootstrap.secrets else {
        return Ok(None);
    };
    if secrets.keys.is_empty() && secrets.active_key_id.is_empty() {
        return Ok(None);
    }
    let keys = secrets
        .keys
        .iter()
        .map(|k| (k.id.clone(), k.material.clone()));
    let ring =
        Keyring::new(&secrets.active_key_id, keys).map_err(crewlet_store::SecretError::from)?;
    Ok(Some(Arc::new(ring)))
}

/// The secret store of `bootstrap` over `stores`.
pub fn secret_store(bootstrap: &Bootstrap, stores: &Stores) -> Result<SecretStore, BackendError> {
    Ok(SecretStore::new(
        stores.secrets.clone(),
        keyring(bootstrap)?,
    ))
}

/// A process's opened secrets.
#[derive(Debug)]
pub struct Secrets {
    store: SecretStore,
    snapshot: Arc<SecretSnapshot>,
}

impl Secrets {
    /// Opens every stored value. A wrong or missing key, or stored values
    /// without a keyring, is an error naming the key id: the process must
    /// not start on half its credentials.
    pub async fn open(bootstrap: &Bootstrap, stores: &Stores) -> Result<Arc<Self>, BackendError> {
        let secrets = Arc::new(Self {
            store: secret_store(bootstrap, stores)?,
            snapshot: Arc::new(SecretSnapshot::new()),
        });
        secrets.reload().await?;
        Ok(secrets)
    }

    /// Reads every value again. On error the previous snapshot stays.
    pub async fn reload(&self) -> Result<usize, BackendError> {
        let values = self.store.load().await.map_err(BackendError::from)?;
        // Never in a log line or an exported span from now on.
        crewlet_telemetry::register_secrets(values.values().cloned());
        let mut shadowed: Vec<&str> = values
            .iter()
            .filter(|(name, value)| {
                crewlet_config::process_env(name).is_some_and(|env| env != **value)
            })
            .map(|(name, _)| name.as_str())
            .collect();
        if !shadowed.is_empty() {
            shadowed.sort_unstable();
            warn!(
                event = "secret_shadowed_env",
                names = %shadowed.join(", "),
                "the secret store and the environment disagree on these names; the store wins (remove the stale exports)"
            );
        }
        let n = values.len();
        if n > 0 {
            info!(secrets = n, "secret store loaded");
        }
        self.snapshot.replace(values);
        Ok(n)
    }

    pub fn snapshot(&self) -> &Arc<SecretSnapshot> {
        &self.snapshot
    }

    /// `env` with the stored secrets in front of it (filter the result with
    /// [`crewlet_config::Security::company_lookup`]).
    pub fn lookup(&self, env: Lookup) -> Lookup {
        let snapshot = self.snapshot.clone();
        Arc::new(move |name: &str| snapshot.get(name).or_else(|| env(name)))
    }
}
