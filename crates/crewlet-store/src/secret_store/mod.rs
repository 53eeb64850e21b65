//! The secret store: `${NAME}` values kept in `secret_values`, each sealed
//! with the bootstrap keyring ([`Keyring`]). Readers load every value once
//! into a [`SecretSnapshot`] and resolve from it first, the environment
//! second. There is no plaintext mode: without a keyring nothing can be
//! stored, and stored rows without a keyring are a startup error.

mod keyring;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use parking_lot::RwLock;

pub use keyring::{Keyring, KeyringError, envelope_key_id};

use crate::StoreError;
use crate::repos::secrets::{SealedSecret, SecretValues};

/// Why a secret store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(transparent)]
    Keyring(#[from] KeyringError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "`{0}` is not a secret name: use letters, digits and `_`, not starting with a digit (the `${{NAME}}` the company refers to)"
    )]
    InvalidName(String),
    #[error(
        "the secret store needs a keyring: add a `secrets` block (active_key_id and keys) to the bootstrap file; `crewlet secrets keygen` makes a key"
    )]
    NoKeyring,
    #[error(
        "the secret store holds {0} secret(s) but the bootstrap file has no `secrets` keyring to open them"
    )]
    RowsWithoutKeyring(usize),
}

/// One stored secret as listings show it: never the value.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SecretInfo {
    pub name: String,
    pub key_id: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
    pub source: String,
}

/// What [`SecretStore::rekey`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RekeyReport {
    /// Sealed again under the active key.
    pub resealed: usize,
    /// Already under the active key.
    pub current: usize,
    /// Changed by someone else meanwhile (their write is kept, and it is
    /// sealed under the active key already).
    pub changed_meanwhile: usize,
}

/// Whether `name` can be a `${NAME}`.
pub fn is_secret_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Sealed rows plus the keyring that opens them.
#[derive(Clone)]
pub struct SecretStore {
    values: Arc<dyn SecretValues>,
    keyring: Option<Arc<Keyring>>,
}

impl fmt::Debug for SecretStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretStore")
            .field("keyring", &self.keyring)
            .finish_non_exhaustive()
    }
}

impl SecretStore {
    pub fn new(values: Arc<dyn SecretValues>, keyring: Option<Arc<Keyring>>) -> Self {
        Self { values, keyring }
    }

    pub fn keyring(&self) -> Option<&Keyring> {
        self.keyring.as_deref()
    }

    fn ring(&self) -> Result<&Keyring, SecretError> {
        self.keyring.as_deref().ok_or(SecretError::NoKeyring)
    }

    /// Stores `value` as `name`, sealed under the active key.
    pub async fn set(
        &self,
        name: &str,
        value: &str,
        updated_by: &str,
        source: &str,
    ) -> Result<SecretInfo, SecretError> {
        if !is_secret_name(name) {
            return Err(SecretError::InvalidName(name.to_owned()));
        }
        let ring = self.ring()?;
        let row = SealedSecret {
            name: name.to_owned(),
            value: ring.seal(name, value)?,
            key_id: ring.active_key_id().to_owned(),
            updated_at: Utc::now(),
            updated_by: updated_by.to_owned(),
            source: source.to_owned(),
        };
        self.values.put(&row).await?;
        Ok(info(&row))
    }

    /// Every stored secret's name and metadata, by name.
    pub async fn list(&self) -> Result<Vec<SecretInfo>, SecretError> {
        Ok(self.values.list().await?.iter().map(info).collect())
    }

    /// `true` when there was such a secret.
    pub async fn remove(&self, name: &str) -> Result<bool, SecretError> {
        Ok(self.values.remove(name).await?)
    }

    /// Every value, opened: what `${NAME}` resolves to. With no keyring an
    /// empty store is fine (the store is unused) and a non-empty one is an
    /// error; a row no key opens is an error naming the secret and key id.
    pub async fn load(&self) -> Result<HashMap<String, String>, SecretError> {
        let rows = self.values.list().await?;
        let Some(ring) = self.keyring.as_deref() else {
            return match rows.len() {
                0 => Ok(HashMap::new()),
                n => Err(SecretError::RowsWithoutKeyring(n)),
            };
        };
        rows.iter()
            .map(|r| Ok((r.name.clone(), ring.open(&r.name, &r.value)?)))
            .collect()
    }

    /// Seals every secret not under the active key again under it (after a
    /// new key was added and made active). Safe while the engine runs: a
    /// row written meanwhile is left as written.
    pub async fn rekey(&self, updated_by: &str) -> Result<RekeyReport, SecretError> {
        let ring = self.ring()?;
        let mut report = RekeyReport::default();
        for row in self.values.list().await? {
            if envelope_key_id(&row.value) == Some(ring.active_key_id()) {
                report.current += 1;
                continue;
            }
            let value = ring.open(&row.name, &row.value)?;
            let resealed = SealedSecret {
                value: ring.seal(&row.name, &value)?,
                key_id: ring.active_key_id().to_owned(),
                updated_at: Utc::now(),
                updated_by: updated_by.to_owned(),
                source: row.source.clone(),
                name: row.name.clone(),
            };
            if self.values.replace(&row.value, &resealed).await? {
                report.resealed += 1;
            } else {
                report.changed_meanwhile += 1;
            }
        }
        Ok(report)
    }
}

fn info(row: &SealedSecret) -> SecretInfo {
    SecretInfo {
        name: row.name.clone(),
        key_id: row.key_id.clone(),
        updated_at: row.updated_at,
        updated_by: row.updated_by.clone(),
        source: row.source.clone(),
    }
}

/// The opened values a process resolves `${NAME}` from, replaced whole when
/// it reloads (at start and when a new company revision activates).
#[derive(Default)]
pub struct SecretSnapshot {
    values: RwLock<Arc<HashMap<String, String>>>,
}

impl fmt::Debug for SecretSnapshot {
    // Names only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.names()).finish()
    }
}

impl SecretSnapshot {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, name: &str) -> Option<String> {
        self.values.read().get(name).cloned()
    }

    pub fn len(&self) -> usize {
        self.values.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sorted names.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.values.read().keys().cloned().collect();
        names.sort();
        names
    }

    pub fn replace(&self, values: HashMap<String, String>) {
        *self.values.write() = Arc::new(values);
    }
}
