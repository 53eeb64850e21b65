//! Versioned company configuration (`company_config`): append-only revisions,
//! exactly one active, optimistic concurrency on the parent revision (the
//! API's `If-Match`).

use parking_lot::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::db::Database;
use crate::error::{StoreError, describe, query_err, sqlstate};

/// One stored revision of the company YAML (as JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigRevision {
    /// The revision's number: its order in the history, the engine's name for it.
    pub revision_id: i64,
    /// The revision this one was edited from (`None` for the first import).
    pub parent_revision_id: Option<i64>,
    /// The revision's uuid: its name on the HTTP API (`revision_id` there).
    pub uuid: Uuid,
    /// The parent's uuid.
    pub parent_uuid: Option<Uuid>,
    pub created_by: String,
    /// Where it came from, e.g. `cli-import`, `api`, `revert`.
    pub source: String,
    pub summary: String,
    pub payload: serde_json::Value,
    pub is_active: bool,
    pub created_at: DateTime<Utc>,
    pub activated_at: Option<DateTime<Utc>>,
}

/// Which revision is active and since when: enough for a poller to tell
/// whether the configuration changed without reading the company itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveKey {
    pub revision_id: i64,
    pub activated_at: Option<DateTime<Utc>>,
}

impl ConfigRevision {
    /// This revision's [`ActiveKey`].
    pub fn key(&self) -> ActiveKey {
        ActiveKey {
            revision_id: self.revision_id,
            activated_at: self.activated_at,
        }
    }
}

/// A revision to append.
#[derive(Clone, Debug, PartialEq)]
pub struct NewRevision {
    /// Must equal the active revision (`None` when nothing is active yet), or
    /// the create is a [`StoreError::Conflict`]: someone else changed the
    /// configuration since the caller read it.
    pub parent_revision_id: Option<i64>,
    pub created_by: String,
    pub source: String,
    pub summary: String,
    pub payload: serde_json::Value,
    /// Make it the active revision at once.
    pub activate: bool,
}

/// The `what` of every conflict this repository raises.
pub const CONFIG_CONFLICT: &str = "company config revision";

fn stale(expected: Option<i64>, active: Option<i64>) -> StoreError {
    let show = |r: Option<i64>| r.map_or_else(|| "none".to_owned(), |r| r.to_string());
    StoreError::Conflict {
        what: CONFIG_CONFLICT.to_owned(),
        reason: format!(
            "the parent revision is {} but the active revision is {}; reload and retry",
            show(expected),
            show(active)
        ),
    }
}

#[async_trait]
pub trait ConfigRevisions: Send + Sync {
    /// Appends a revision, checking its parent against the active one.
    async fn create(&self, new: NewRevision) -> Result<ConfigRevision, StoreError>;
    /// The active revision, if any.
    async fn active(&self) -> Result<Option<ConfigRevision>, StoreError>;
    /// The active revision's key, without its payload (what pollers read).
    async fn active_key(&self) -> Result<Option<ActiveKey>, StoreError>;
    async fn get(&self, revision_id: i64) -> Result<Option<ConfigRevision>, StoreError>;
    /// The revision with this uuid.
    async fn get_by_uuid(&self, uuid: Uuid) -> Result<Option<ConfigRevision>, StoreError>;
    /// Newest first, at most `limit`.
    async fn list(&self, limit: u32) -> Result<Vec<ConfigRevision>, StoreError>;
    /// Newest first, at most `limit`, skipping the `offset` newest.
    async fn list_page(&self, limit: u32, offset: u64) -> Result<Vec<ConfigRevision>, StoreError>;
    /// Makes an existing revision the active one.
    async fn activate(&self, revision_id: i64) -> Result<ConfigRevision, StoreError>;
    /// Appends a copy of `revision_id`'s payload as a new active revision
    /// (history stays append-only), parented on the current active one, with
    /// `source` (the API writes `api.revert`).
    async fn revert(
        &self,
        revision_id: i64,
        created_by: &str,
        summary: &str,
        source: &str,
    ) -> Result<ConfigRevision, StoreError>;
}

/// Company configuration revisions in memory.
///
/// Each payload is kept as compact JSON text and parsed on read: a parsed
/// company of a few thousand seats takes about 25 times the memory of its
/// text, and readers are few (pollers read [`ConfigRevisions::active_key`]).
#[derive(Debug, Default)]
pub struct MemoryConfigRevisions {
    revisions: Mutex<Vec<Stored>>,
}

/// A revision as the memory store keeps it: `meta.payload` is `Null`.
#[derive(Debug)]
struct Stored {
    meta: ConfigRevision,
    payload: Box<str>,
}

impl Stored {
    fn revision(&self) -> Result<ConfigRevision, StoreError> {
        let payload = serde_json::from_str(&self.payload)
            .map_err(|e| StoreError::decode("company_config", e))?;
        Ok(ConfigRevision {
            payload,
            ..self.meta.clone()
        })
    }
}

impl MemoryConfigRevisions {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Vec<Stored>> {
        self.revisions.lock()
    }

    fn find(
        &self,
        pick: impl Fn(&ConfigRevision) -> bool,
    ) -> Result<Option<ConfigRevision>, StoreError> {
        self.lock()
            .iter()
            .find(|r| pick(&r.meta))
            .map(Stored::revision)
            .transpose()
    }
}

/// Makes `revision_id` the active one; `None` when there is no such revision.
fn activate_in(revisions: &mut [Stored], revision_id: i64) -> Option<&Stored> {
    if !revisions.iter().any(|r| r.meta.revision_id == revision_id) {
        return None;
    }
    let now = Utc::now();
    for r in revisions.iter_mut() {
        let meta = &mut r.meta;
        if meta.revision_id == revision_id {
            if !meta.is_active {
                meta.is_active = true;
                meta.activated_at = Some(now);
            }
        } else {
            meta.is_active = false;
        }
    }
    revisions.iter().find(|r| r.meta.revision_id == revision_id)
}

#[async_trait]
impl ConfigRevisions for MemoryConfigRevisions {
    async fn create(&self, new: NewRevision) -> Result<ConfigRevision, StoreError> {
        let payload = serde_json::to_string(&new.payload)
            .map_err(|e| StoreError::decode("company_config", e))?
            .into_boxed_str();
        let mut revisions = self.lock();
        let active = revisions
            .iter()
            .find(|r| r.meta.is_active)
            .map(|r| r.meta.revision_id);
        if new.parent_revision_id != active {
            return Err(stale(new.parent_revision_id, active));
        }
        let revision_id = revisions.last().map_or(1, |r| r.meta.revision_id + 1);
        let parent_uuid = new
            .parent_revision_id
            .and_then(|p| revisions.iter().find(|r| r.meta.revision_id == p))
            .map(|r| r.meta.uuid);
        revisions.push(Stored {
            meta: ConfigRevision {
                revision_id,
                parent_revision_id: new.parent_revision_id,
                uuid: Uuid::new_v4(),
                parent_uuid,
                created_by: new.created_by,
                source: new.source,
                summary: new.summary,
                payload: serde_json::Value::Null,
                is_active: false,
                created_at: Utc::now(),
                activated_at: None,
            },
            payload,
        });
        let created = if new.activate {
            activate_in(&mut revisions, revision_id)
        } else {
            revisions.last()
        };
        created
            .ok_or_else(|| StoreError::not_found("config revision", revision_id))?
            .revision()
    }

    async fn active(&self) -> Result<Option<ConfigRevision>, StoreError> {
        self.find(|r| r.is_active)
    }

    async fn active_key(&self) -> Result<Option<ActiveKey>, StoreError> {
        Ok(self
            .lock()
            .iter()
            .find(|r| r.meta.is_active)
            .map(|r| r.meta.key()))
    }

    async fn get(&self, revision_id: i64) -> Result<Option<ConfigRevision>, StoreError> {
        self.find(|r| r.revision_id == revision_id)
    }

    async fn get_by_uuid(&self, uuid: Uuid) -> Result<Option<ConfigRevision>, StoreError> {
        self.find(|r| r.uuid == uuid)
    }

    async fn list(&self, limit: u32) -> Result<Vec<ConfigRevision>, StoreError> {
        self.list_page(limit, 0).await
    }

    async fn list_page(&self, limit: u32, offset: u64) -> Result<Vec<ConfigRevision>, StoreError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        self.lock()
            .iter()
            .rev()
            .skip(offset)
            .take(limit)
            .map(Stored::revision)
            .collect()
    }

    async fn activate(&self, revision_id: i64) -> Result<ConfigRevision, StoreError> {
        activate_in(&mut self.lock(), revision_id)
            .ok_or_else(|| StoreError::not_found("config revision", revision_id))?
            .revision()
    }

    async fn revert(
        &self,
        revision_id: i64,
        created_by: &str,
        summary: &str,
        source: &str,
    ) -> Result<ConfigRevision, StoreError> {
        let (payload, active) = {
            let revisions = self.lock();
            let target = revisions
                .iter()
                .find(|r| r.meta.revision_id == revision_id)
                .ok_or_else(|| StoreError::not_found("config revision", revision_id))?;
            let active = revisions
                .iter()
                .find(|r| r.meta.is_active)
                .map(|r| r.meta.revision_id);
            (target.revision()?.payload, active)
        };
        self.create(NewRevision {
            parent_revision_id: active,
            created_by: created_by.to_owned(),
            source: source.to_owned(),
            summary: summary.to_owned(),
            payload,
            activate: true,
        })
        .await
    }
}

/// Company configuration revisions in PostgreSQL.
#[derive(Clone, Debug)]
pub struct PostgresConfigRevisions {
    db: Database,
}

impl PostgresConfigRevisions {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

/// Serializes writers of `company_config` ("crewlet\0c").
const CONFIG_LOCK_KEY: i64 = 0x6372_6577_6c65_7463;

/// The columns [`read_revision`] reads, from `company_config` as `c`; the
/// parent's uuid comes from a scalar subquery on the same table.
const COLUMNS: &str = "c.revision_id, c.parent_revision_id, c.created_by, c.source, c.summary,
     c.payload, c.is_active, c.created_at, c.activated_at, c.revision_uuid,
     (SELECT p.revision_uuid FROM company_config p WHERE p.revision_id = c.parent_revision_id)";

fn read_revision(r: &tokio_postgres::Row) -> Result<ConfigRevision, StoreError> {
    let d = |e: tokio_postgres::Error| StoreError::decode("company_config", describe(&e));
    Ok(ConfigRevision {
        revision_id: r.try_get(0).map_err(d)?,
        parent_revision_id: r.try_get(1).map_err(d)?,
        created_by: r.try_get(2).map_err(d)?,
        source: r.try_get(3).map_err(d)?,
        summary: r.try_get(4).map_err(d)?,
        payload: r.try_get(5).map_err(d)?,
        is_active: r.try_get(6).map_err(d)?,
        created_at: r.try_get(7).map_err(d)?,
        activated_at: r.try_get(8).map_err(d)?,
        uuid: r.try_get(9).map_err(d)?,
        parent_uuid: r.try_get(10).map_err(d)?,
    })
}

async fn activate_tx(
    tx: &deadpool_postgres::Transaction<'_>,
    revision_id: i64,
) -> Result<ConfigRevision, StoreError> {
    let exists = tx
        .query_opt(
            "SELECT 1 FROM company_config WHERE revision_id = $1",
            &[&revision_id],
        )
        .await
        .map_err(query_err("reading a config revision"))?;
    if exists.is_none() {
        return Err(StoreError::not_found("config revision", revision_id));
    }
    tx.execute(
        "UPDATE company_config SET is_active = false WHERE is_active AND revision_id <> $1",
        &[&revision_id],
    )
    .await
    .map_err(query_err("deactivating the active config revision"))?;
    let row = tx
        .query_one(
            &format!(
                "UPDATE company_config AS c
                 SET is_active = true, activated_at = CASE WHEN c.is_active THEN c.activated_at ELSE now() END
                 WHERE c.revision_id = $1
                 RETURNING {COLUMNS}"
            ),
            &[&revision_id],
        )
        .await
        .map_err(query_err("activating a config revision"))?;
    read_revision(&row)
}

impl PostgresConfigRevisions {
    async fn create_inner(
        &self,
        new: &NewRevision,
        revert_of: Option<i64>,
    ) -> Result<ConfigRevision, StoreError> {
        let mut client = self.db.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(query_err("starting a config revision"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CONFIG_LOCK_KEY])
            .await
            .map_err(query_err("locking company_config"))?;
        let active: Option<i64> = tx
            .query_opt(
                "SELECT revision_id FROM company_config WHERE is_active",
                &[],
            )
            .await
            .map_err(query_err("reading the active config revision"))?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(|e| StoreError::decode("company_config", describe(&e)))?;
        let (parent, payload) = match revert_of {
            Some(target) => {
                let row = tx
                    .query_opt(
                        "SELECT payload FROM company_config WHERE revision_id = $1",
                        &[&target],
                    )
                    .await
                    .map_err(query_err("reading a config revision"))?
                    .ok_or_else(|| StoreError::not_found("config revision", target))?;
                let payload: serde_json::Value = row
                    .try_get(0)
                    .map_err(|e| StoreError::decode("company_config", describe(&e)))?;
                (active, payload)
            }
            None => {
                if new.parent_revision_id != active {
                    return Err(stale(new.parent_revision_id, active));
                }
                (new.parent_revision_id, new.payload.clone())
            }
        };
        let row = tx
            .query_one(
                &format!(
                    "INSERT INTO company_config AS c (parent_revision_id, created_by, source, summary, payload)
                     VALUES ($1, $2, $3, $4, $5)
                     RETURNING {COLUMNS}"
                ),
                &[&parent, &new.created_by, &new.source, &new.summary, &payload],
            )
            .await
            .map_err(query_err("inserting a config revision"))?;
        let mut created = read_revision(&row)?;
        if new.activate {
            created = activate_tx(&tx, created.revision_id).await?;
        }
        tx.commit().await.map_err(|e| {
            if sqlstate(&e) == Some("23505") {
                stale(new.parent_revision_id, None)
            } else {
                query_err("committing a config revision")(e)
            }
        })?;
        Ok(created)
    }
}

#[async_trait]
impl ConfigRevisions for PostgresConfigRevisions {
    async fn create(&self, new: NewRevision) -> Result<ConfigRevision, StoreError> {
        self.create_inner(&new, None).await
    }

    async fn active(&self) -> Result<Option<ConfigRevision>, StoreError> {
        let client = self.db.client().await?;
        client
            .query_opt(
                &format!("SELECT {COLUMNS} FROM company_config c WHERE c.is_active"),
                &[],
            )
            .await
            .map_err(query_err("reading the active config revision"))?
            .map(|r| read_revision(&r))
            .transpose()
    }

    async fn active_key(&self) -> Result<Option<ActiveKey>, StoreError> {
        let client = self.db.client().await?;
        let row = client
            .query_opt(
                "SELECT revision_id, activated_at FROM company_config WHERE is_active",
                &[],
            )
            .await
            .map_err(query_err("reading the active config revision"))?;
        let d = |e: tokio_postgres::Error| StoreError::decode("company_config", describe(&e));
        row.map(|r| {
            Ok(ActiveKey {
                revision_id: r.try_get(0).map_err(d)?,
                activated_at: r.try_get(1).map_err(d)?,
            })
        })
        .transpose()
    }

    async fn get(&self, revision_id: i64) -> Result<Option<ConfigRevision>, StoreError> {
        let client = self.db.client().await?;
        client
            .query_opt(
                &format!("SELECT {COLUMNS} FROM company_config c WHERE c.revision_id = $1"),
                &[&revision_id],
            )
            .await
            .map_err(query_err("reading a config revision"))?
            .map(|r| read_revision(&r))
            .transpose()
    }

    async fn get_by_uuid(&self, uuid: Uuid) -> Result<Option<ConfigRevision>, StoreError> {
        let client = self.db.client().await?;
        client
            .query_opt(
                &format!("SELECT {COLUMNS} FROM company_config c WHERE c.revision_uuid = $1"),
                &[&uuid],
            )
            .await
            .map_err(query_err("reading a config revision"))?
            .map(|r| read_revision(&r))
            .transpose()
    }

    async fn list(&self, limit: u32) -> Result<Vec<ConfigRevision>, StoreError> {
        self.list_page(limit, 0).await
    }

    async fn list_page(&self, limit: u32, offset: u64) -> Result<Vec<ConfigRevision>, StoreError> {
        let client = self.db.client().await?;
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        let rows = client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM company_config c
                     ORDER BY c.revision_id DESC LIMIT $1 OFFSET $2"
                ),
                &[&i64::from(limit), &offset],
            )
            .await
            .map_err(query_err("listing config revisions"))?;
        rows.iter().map(read_revision).collect()
    }

    async fn activate(&self, revision_id: i64) -> Result<ConfigRevision, StoreError> {
        let mut client = self.db.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(query_err("starting a config activation"))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CONFIG_LOCK_KEY])
            .await
            .map_err(query_err("locking company_config"))?;
        let activated = activate_tx(&tx, revision_id).await?;
        tx.commit()
            .await
            .map_err(query_err("committing a config activation"))?;
        Ok(activated)
    }

    async fn revert(
        &self,
        revision_id: i64,
        created_by: &str,
        summary: &str,
        source: &str,
    ) -> Result<ConfigRevision, StoreError> {
        let new = NewRevision {
            parent_revision_id: None,
            created_by: created_by.to_owned(),
            source: source.to_owned(),
            summary: summary.to_owned(),
            payload: serde_json::Value::Null,
            activate: true,
        };
        self.create_inner(&new, Some(revision_id)).await
    }
}
