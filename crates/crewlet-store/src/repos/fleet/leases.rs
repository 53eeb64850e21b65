//! Leases (`leases`): a resource held by one process incarnation until a
//! time, with a fencing token.
//!
//! - A free resource, a lapsed one, or one the caller already holds can be
//!   acquired; one held live by another owner cannot.
//! - `epoch` grows by one on every new tenure: a new holder, or the same
//!   holder again after its lease lapsed (its work during the gap was not
//!   covered). Renewing a live lease keeps it.
//! - Releasing expires the row in place and keeps its epoch, so the next
//!   holder's token is always greater than any token handed out before.
//! - Expiry is judged by one clock (PostgreSQL's `now()`; the process's in
//!   memory), never by the callers' clocks.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::db::Database;
use crate::error::StoreError;

/// Prefix of node presence leases (`node:{id}`).
pub const NODE_PREFIX: &str = "node:";
/// Prefix of seat leases (`seat:{handle}`).
pub const SEAT_PREFIX: &str = "seat:";
/// Prefix of company-wide duty leases (`duty:{name}`).
pub const DUTY_PREFIX: &str = "duty:";

/// The lease resource of a seat.
pub fn seat_resource(handle: &str) -> String {
    format!("{SEAT_PREFIX}{handle}")
}

/// One lease row.
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    pub resource: String,
    /// The incarnation holding it (`''` once released).
    pub owner: String,
    /// The fencing token of the current (or last) tenure.
    pub epoch: i64,
    pub expires_at: DateTime<Utc>,
    /// The stable node id of the last holder (a placement hint).
    pub preferred: String,
    /// What the holder says about itself (node presence: roles, labels).
    pub meta: Value,
    pub acquired_at: DateTime<Utc>,
    pub renewed_at: DateTime<Utc>,
    /// Not expired when read.
    pub live: bool,
}

impl Lease {
    /// The fence a holder writes under.
    pub fn fence(&self) -> Fence {
        Fence {
            resource: self.resource.clone(),
            owner: self.owner.clone(),
            epoch: self.epoch,
        }
    }
}

/// One resource to acquire.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseClaim {
    pub resource: String,
    /// The caller's stable node id.
    pub preferred: String,
    pub meta: Value,
}

impl LeaseClaim {
    pub fn new(resource: impl Into<String>, preferred: impl Into<String>) -> Self {
        Self {
            resource: resource.into(),
            preferred: preferred.into(),
            meta: Value::Object(Default::default()),
        }
    }

    pub fn with_meta(mut self, meta: Value) -> Self {
        self.meta = meta;
        self
    }
}

/// A write made on behalf of a held resource: it goes through only while
/// `owner` still holds `resource` live at `epoch`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fence {
    pub resource: String,
    pub owner: String,
    pub epoch: i64,
}

#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Acquires every claim that is free, lapsed or already the caller's
    /// for `ttl`; returns the leases won (in any order). A resource held
    /// live by another owner is left out.
    async fn acquire(
        &self,
        claims: &[LeaseClaim],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<Lease>, StoreError>;

    /// Extends the caller's live leases among `resources` by `ttl` from
    /// now; returns `(resource, epoch)` of those still held. A lease that
    /// lapsed is not renewed (it must be acquired again, with a new epoch).
    async fn renew(
        &self,
        resources: &[String],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<(String, i64)>, StoreError>;

    /// Gives the caller's leases among `resources` up at once (expired in
    /// place, epoch kept); returns how many it held.
    async fn release(&self, resources: &[String], owner: &str) -> Result<u64, StoreError>;

    /// Every lease whose resource starts with `prefix`, live or not,
    /// ordered by resource.
    async fn list(&self, prefix: &str) -> Result<Vec<Lease>, StoreError>;

    /// Whether `fence` still holds: its owner holds the resource live at
    /// its epoch.
    async fn holds(&self, fence: &Fence) -> Result<bool, StoreError>;

    /// Takes every lease `previous` holds (live or not) for `owner`, each
    /// with a new epoch: for a node that knows its own previous
    /// incarnation is dead (restarted on the same host) and need not wait
    /// for the leases to lapse. Returns the leases taken.
    async fn take_over(
        &self,
        previous: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<Lease>, StoreError>;
}

/// Leases of one process.
#[derive(Debug, Default)]
pub struct MemoryLeases {
    rows: Mutex<BTreeMap<String, Lease>>,
}

impl MemoryLeases {
    pub fn new() -> Self {
        Self::default()
    }

    /// [`LeaseStore::holds`] without waiting (for stores of this process
    /// that fence their writes).
    pub fn holds_now(&self, fence: &Fence) -> bool {
        let now = Utc::now();
        self.rows
            .lock()
            .get(&fence.resource)
            .is_some_and(|l| l.owner == fence.owner && l.epoch == fence.epoch && l.expires_at > now)
    }
}

fn until(now: DateTime<Utc>, ttl: Duration) -> DateTime<Utc> {
    now + chrono::Duration::from_std(ttl).unwrap_or(chrono::Duration::MAX)
}

#[async_trait]
impl LeaseStore for MemoryLeases {
    async fn acquire(
        &self,
        claims: &[LeaseClaim],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        if owner.is_empty() {
            return Err(StoreError::invalid("lease owner", "must not be empty"));
        }
        let now = Utc::now();
        let mut rows = self.rows.lock();
        let mut won = Vec::new();
        for claim in claims {
            // Same tenure: its own live lease (kept epoch and start); else a
            // new one, one past the last epoch the resource had.
            let (epoch, acquired_at) = match rows.get(&claim.resource) {
                Some(l) if l.expires_at > now && l.owner != owner => continue,
                Some(l) if l.expires_at > now => (l.epoch, l.acquired_at),
                Some(l) => (l.epoch + 1, now),
                None => (1, now),
            };
            let lease = Lease {
                resource: claim.resource.clone(),
                owner: owner.to_owned(),
                epoch,
                expires_at: until(now, ttl),
                preferred: claim.preferred.clone(),
                meta: claim.meta.clone(),
                acquired_at,
                renewed_at: now,
                live: true,
            };
            rows.insert(claim.resource.clone(), lease.clone());
            won.push(lease);
        }
        Ok(won)
    }

    async fn renew(
        &self,
        resources: &[String],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let now = Utc::now();
        let mut rows = self.rows.lock();
        let mut held = Vec::new();
        for r in resources {
            if let Some(l) = rows.get_mut(r)
                && l.owner == owner
                && l.expires_at > now
            {
                l.expires_at = until(now, ttl);
                l.renewed_at = now;
                held.push((r.clone(), l.epoch));
            }
        }
        Ok(held)
    }

    async fn release(&self, resources: &[String], owner: &str) -> Result<u64, StoreError> {
        let now = Utc::now();
        let mut rows = self.rows.lock();
        let mut n = 0;
        for r in resources {
            if let Some(l) = rows.get_mut(r)
                && l.owner == owner
                && l.expires_at > now
            {
                l.owner.clear();
                l.expires_at = now;
                n += 1;
            }
        }
        Ok(n)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Lease>, StoreError> {
        let now = Utc::now();
        Ok(self
            .rows
            .lock()
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, l)| Lease {
                live: l.expires_at > now && !l.owner.is_empty(),
                ..l.clone()
            })
            .collect())
    }

    async fn holds(&self, fence: &Fence) -> Result<bool, StoreError> {
        Ok(self.holds_now(fence))
    }

    async fn take_over(
        &self,
        previous: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        if previous.is_empty() || owner.is_empty() || previous == owner {
            return Ok(Vec::new());
        }
        let now = Utc::now();
        let mut taken = Vec::new();
        for l in self.rows.lock().values_mut() {
            if l.owner == previous {
                l.owner = owner.to_owned();
                l.epoch += 1;
                l.expires_at = until(now, ttl);
                l.acquired_at = now;
                l.renewed_at = now;
                l.live = true;
                taken.push(l.clone());
            }
        }
        Ok(taken)
    }
}

/// Leases in PostgreSQL, shared by every process of the company.
#[derive(Clone, Debug)]
pub struct PostgresLeases {
    db: Database,
}

impl PostgresLeases {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

const LEASE_COLUMNS: &str = "resource, owner, epoch, expires_at, preferred, meta, acquired_at, \
     renewed_at, (expires_at > clock_timestamp() AND owner <> '') AS live";

fn lease_of(row: &tokio_postgres::Row) -> Result<Lease, StoreError> {
    let get = |e: tokio_postgres::Error| StoreError::decode("leases", crate::describe(&e));
    Ok(Lease {
        resource: row.try_get(0).map_err(get)?,
        owner: row.try_get(1).map_err(get)?,
        epoch: row.try_get(2).map_err(get)?,
        expires_at: row.try_get(3).map_err(get)?,
        preferred: row.try_get(4).map_err(get)?,
        meta: row.try_get(5).map_err(get)?,
        acquired_at: row.try_get(6).map_err(get)?,
        renewed_at: row.try_get(7).map_err(get)?,
        live: row.try_get(8).map_err(get)?,
    })
}

/// Acquires the claims (`$1` resources, `$2` preferred, `$3` meta, sorted
/// by resource so two batches never lock rows in opposite orders) for
/// `$4` owner and `$5` seconds. The conflict update runs only where the
/// row is lapsed or the caller's; a same-owner live row keeps its epoch.
const ACQUIRE: &str = "
INSERT INTO leases AS l (resource, owner, epoch, expires_at, preferred, meta, acquired_at, renewed_at)
SELECT c.r, $4, 1, clock_timestamp() + make_interval(secs => $5), c.p, c.m,
       clock_timestamp(), clock_timestamp()
FROM unnest($1::text[], $2::text[], $3::jsonb[]) AS c(r, p, m)
ORDER BY c.r
ON CONFLICT (resource) DO UPDATE SET
    epoch = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp()
                 THEN l.epoch ELSE l.epoch + 1 END,
    acquired_at = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > clock_timestamp()
                       THEN l.acquired_at ELSE clock_timestamp() END,
    owner = EXCLUDED.owner,
    expires_at = EXCLUDED.expires_at,
    preferred = EXCLUDED.preferred,
    meta = EXCLUDED.meta,
    renewed_at = clock_timestamp()
WHERE l.expires_at <= clock_timestamp() OR l.owner = EXCLUDED.owner OR l.owner = ''
RETURNING resource, owner, epoch, expires_at, preferred, meta, acquired_at, renewed_at, true";

#[async_trait]
impl LeaseStore for PostgresLeases {
    async fn acquire(
        &self,
        claims: &[LeaseClaim],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        if owner.is_empty() {
            return Err(StoreError::invalid("lease owner", "must not be empty"));
        }
        // One row per resource (a statement may not touch a row twice).
        let mut unique: BTreeMap<&str, &LeaseClaim> = BTreeMap::new();
        for c in claims {
            unique.insert(c.resource.as_str(), c);
        }
        if unique.is_empty() {
            return Ok(Vec::new());
        }
        let resources: Vec<&str> = unique.keys().copied().collect();
        let preferred: Vec<&str> = unique.values().map(|c| c.preferred.as_str()).collect();
        let meta: Vec<&Value> = unique.values().map(|c| &c.meta).collect();
        let client = self.db.client().await?;
        let rows = client
            .query(
                ACQUIRE,
                &[&resources, &preferred, &meta, &owner, &ttl.as_secs_f64()],
            )
            .await
            .map_err(crate::query_err("acquiring leases"))?;
        rows.iter().map(lease_of).collect()
    }

    async fn renew(
        &self,
        resources: &[String],
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        if resources.is_empty() {
            return Ok(Vec::new());
        }
        let mut sorted: Vec<&str> = resources.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        sorted.dedup();
        let client = self.db.client().await?;
        let rows = client
            .query(
                "UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => $3),
                        renewed_at = clock_timestamp()
                 WHERE resource = ANY($1) AND owner = $2 AND expires_at > clock_timestamp()
                 RETURNING resource, epoch",
                &[&sorted, &owner, &ttl.as_secs_f64()],
            )
            .await
            .map_err(crate::query_err("renewing leases"))?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0)
                        .map_err(|e| StoreError::decode("leases", crate::describe(&e)))?,
                    r.try_get(1)
                        .map_err(|e| StoreError::decode("leases", crate::describe(&e)))?,
                ))
            })
            .collect()
    }

    async fn release(&self, resources: &[String], owner: &str) -> Result<u64, StoreError> {
        if resources.is_empty() {
            return Ok(0);
        }
        let client = self.db.client().await?;
        client
            .execute(
                "UPDATE leases SET owner = '', expires_at = clock_timestamp()
                 WHERE resource = ANY($1) AND owner = $2 AND expires_at > clock_timestamp()",
                &[&resources, &owner],
            )
            .await
            .map_err(crate::query_err("releasing leases"))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Lease>, StoreError> {
        let client = self.db.client().await?;
        let pattern = format!(
            "{}%",
            prefix
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        let rows = client
            .query(
                &format!(
                    "SELECT {LEASE_COLUMNS} FROM leases WHERE resource LIKE $1 ORDER BY resource"
                ),
                &[&pattern],
            )
            .await
            .map_err(crate::query_err("listing leases"))?;
        rows.iter().map(lease_of).collect()
    }

    async fn holds(&self, fence: &Fence) -> Result<bool, StoreError> {
        let client = self.db.client().await?;
        let row = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM leases WHERE resource = $1 AND owner = $2
                                AND epoch = $3 AND expires_at > clock_timestamp())",
                &[&fence.resource, &fence.owner, &fence.epoch],
            )
            .await
            .map_err(crate::query_err("checking a lease"))?;
        row.try_get(0)
            .map_err(|e| StoreError::decode("leases", crate::describe(&e)))
    }

    async fn take_over(
        &self,
        previous: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Vec<Lease>, StoreError> {
        if previous.is_empty() || owner.is_empty() || previous == owner {
            return Ok(Vec::new());
        }
        let client = self.db.client().await?;
        let rows = client
            .query(
                "UPDATE leases SET owner = $2, epoch = epoch + 1,
                        expires_at = clock_timestamp() + make_interval(secs => $3),
                        acquired_at = clock_timestamp(), renewed_at = clock_timestamp()
                 WHERE owner = $1
                 RETURNING resource, owner, epoch, expires_at, preferred, meta, acquired_at,
                           renewed_at, true",
                &[&previous, &owner, &ttl.as_secs_f64()],
            )
            .await
            .map_err(crate::query_err("taking over leases"))?;
        rows.iter().map(lease_of).collect()
    }
}
