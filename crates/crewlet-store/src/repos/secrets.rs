//! Sealed secrets (`secret_values`): one row per `${NAME}`. This layer keeps
//! envelopes only; sealing and opening them is [`crate::SecretStore`]'s.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use parking_lot::Mutex;

use crate::db::Database;
use crate::error::{StoreError, describe, query_err};

/// One stored secret, sealed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedSecret {
    pub name: String,
    /// The envelope (`enc:v1:<key_id>:...`), never the value.
    pub value: String,
    /// The key that sealed it.
    pub key_id: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
    /// Who wrote it: `cli`, a provisioner, ...
    pub source: String,
}

#[async_trait]
pub trait SecretValues: Send + Sync {
    /// Inserts or replaces `secret.name`.
    async fn put(&self, secret: &SealedSecret) -> Result<(), StoreError>;
    /// Replaces `secret.name` only while its envelope is still `expected`
    /// (a re-key that lost a race with a write leaves the write alone).
    /// `true` when it replaced.
    async fn replace(&self, expected: &str, secret: &SealedSecret) -> Result<bool, StoreError>;
    async fn get(&self, name: &str) -> Result<Option<SealedSecret>, StoreError>;
    /// Every secret, by name.
    async fn list(&self) -> Result<Vec<SealedSecret>, StoreError>;
    /// `true` when there was one.
    async fn remove(&self, name: &str) -> Result<bool, StoreError>;
}

/// Sealed secrets in memory (tests, and a process without a database).
#[derive(Debug, Default)]
pub struct MemorySecretValues {
    rows: Mutex<BTreeMap<String, SealedSecret>>,
}

impl MemorySecretValues {
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl SecretValues for MemorySecretValues {
    async fn put(&self, secret: &SealedSecret) -> Result<(), StoreError> {
        self.rows.lock().insert(secret.name.clone(), secret.clone());
        Ok(())
    }

    async fn replace(&self, expected: &str, secret: &SealedSecret) -> Result<bool, StoreError> {
        let mut rows = self.rows.lock();
        match rows.get_mut(&secret.name) {
            Some(row) if row.value == expected => {
                *row = secret.clone();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn get(&self, name: &str) -> Result<Option<SealedSecret>, StoreError> {
        Ok(self.rows.lock().get(name).cloned())
    }

    async fn list(&self) -> Result<Vec<SealedSecret>, StoreError> {
        Ok(self.rows.lock().values().cloned().collect())
    }

    async fn remove(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self.rows.lock().remove(name).is_some())
    }
}

/// Sealed secrets in PostgreSQL.
#[derive(Clone, Debug)]
pub struct PostgresSecretValues {
    db: Database,
}

impl PostgresSecretValues {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

const COLUMNS: &str = "name, value, key_id, updated_at, updated_by, source";

fn read(r: &tokio_postgres::Row) -> Result<SealedSecret, StoreError> {
    let d = |e: tokio_postgres::Error| StoreError::decode("secret_values", describe(&e));
    Ok(SealedSecret {
        name: r.try_get(0).map_err(d)?,
        value: r.try_get(1).map_err(d)?,
        key_id: r.try_get(2).map_err(d)?,
        updated_at: r.try_get(3).map_err(d)?,
        updated_by: r.try_get(4).map_err(d)?,
        source: r.try_get(5).map_err(d)?,
    })
}

#[async_trait]
impl SecretValues for PostgresSecretValues {
    async fn put(&self, s: &SealedSecret) -> Result<(), StoreError> {
        let client = self.db.client().await?;
        client
            .execute(
                "INSERT INTO secret_values (name, value, key_id, updated_at, updated_by, source)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value,
                     key_id = EXCLUDED.key_id, updated_at = EXCLUDED.updated_at,
                     updated_by = EXCLUDED.updated_by, source = EXCLUDED.source",
                &[
                    &s.name,
                    &s.value,
                    &s.key_id,
                    &s.updated_at,
                    &s.updated_by,
                    &s.source,
                ],
            )
            .await
            .map_err(query_err(format!("storing the secret `{}`", s.name)))?;
        Ok(())
    }

    async fn replace(&self, expected: &str, s: &SealedSecret) -> Result<bool, StoreError> {
        let client = self.db.client().await?;
        let n = client
            .execute(
                "UPDATE secret_values SET value = $2, key_id = $3, updated_at = $4,
                     updated_by = $5, source = $6
                 WHERE name = $1 AND value = $7",
                &[
                    &s.name,
                    &s.value,
                    &s.key_id,
                    &s.updated_at,
                    &s.updated_by,
                    &s.source,
                    &expected,
                ],
            )
            .await
            .map_err(query_err(format!("re-sealing the secret `{}`", s.name)))?;
        Ok(n == 1)
    }

    async fn get(&self, name: &str) -> Result<Option<SealedSecret>, StoreError> {
        let client = self.db.client().await?;
        client
            .query_opt(
                &format!("SELECT {COLUMNS} FROM secret_values WHERE name = $1"),
                &[&name],
            )
            .await
            .map_err(query_err("reading a secret"))?
            .map(|r| read(&r))
            .transpose()
    }

    async fn list(&self) -> Result<Vec<SealedSecret>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                &format!("SELECT {COLUMNS} FROM secret_values ORDER BY name"),
                &[],
            )
            .await
            .map_err(query_err("listing secrets"))?;
        rows.iter().map(read).collect()
    }

    async fn remove(&self, name: &str) -> Result<bool, StoreError> {
        let client = self.db.client().await?;
        let n = client
            .execute("DELETE FROM secret_values WHERE name = $1", &[&name])
            .await
            .map_err(query_err(format!("removing the secret `{name}`")))?;
        Ok(n == 1)
    }
}
