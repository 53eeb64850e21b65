//! Provider quotas (`provider_quotas`): the shared schedule of model calls
//! per provider, following [`QuotaState`] (see `crewlet_core::quota`).
//! PostgreSQL keeps one row per provider and reserves in one statement on
//! the database's clock, so every process draws on the same budget; the
//! memory twin keeps the same state per provider on tokio's clock (paused
//! time in tests moves it).

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use crewlet_core::quota::{
    ProviderQuotas, QuotaError, QuotaLimits, QuotaSlot, QuotaState, wait_until,
};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::db::Database;
use crate::error::describe;

/// Provider quotas in memory: one process's calls only.
#[derive(Debug)]
pub struct MemoryProviderQuotas {
    epoch: Instant,
    rows: Mutex<HashMap<String, QuotaState>>,
}

impl Default for MemoryProviderQuotas {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryProviderQuotas {
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            rows: Mutex::new(HashMap::new()),
        }
    }

    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }
}

#[async_trait]
impl ProviderQuotas for MemoryProviderQuotas {
    async fn reserve(
        &self,
        key: &str,
        limits: &QuotaLimits,
        tokens: u64,
    ) -> Result<QuotaSlot, QuotaError> {
        let now = self.now();
        let starts_at = self
            .rows
            .lock()
            .entry(key.to_owned())
            .or_insert_with(|| QuotaState::at(now))
            .reserve(now, limits, tokens);
        Ok(QuotaSlot {
            wait: wait_until(starts_at, now),
            starts_at,
        })
    }

    async fn settle(&self, key: &str, limits: &QuotaLimits, delta: i64) -> Result<(), QuotaError> {
        if let Some(state) = self.rows.lock().get_mut(key) {
            state.settle(limits, delta);
        }
        Ok(())
    }

    async fn pause(&self, key: &str, pause: Duration) -> Result<(), QuotaError> {
        let now = self.now();
        self.rows
            .lock()
            .entry(key.to_owned())
            .or_insert_with(|| QuotaState::at(now))
            .pause(now + pause.as_secs_f64());
        Ok(())
    }
}

/// Provider quotas in PostgreSQL, shared by every process on the database.
#[derive(Clone, Debug)]
pub struct PostgresProviderQuotas {
    db: Database,
}

impl PostgresProviderQuotas {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn failed(what: &str) -> impl Fn(tokio_postgres::Error) -> QuotaError + '_ {
    move |e| QuotaError(format!("{what}: {}", describe(&e)))
}

/// [`QuotaState::reserve`] in one statement: `$2` the request interval,
/// `$3` the call's token cost and `$4` its burst tolerance, in seconds.
/// The proposed row's `updated_at` is the statement's `now` (read before
/// the row lock: a statement that waited behind another still starts after
/// the other's slot, as `request_tat` has moved). Returns the start and the
/// database's clock as the answer leaves, in epoch seconds.
const RESERVE: &str = "
INSERT INTO provider_quotas AS q (quota_key, request_tat, token_tat, updated_at)
SELECT $1, n + make_interval(secs => $2), n + make_interval(secs => $3), n
FROM (SELECT clock_timestamp() AS n) t
ON CONFLICT (quota_key) DO UPDATE SET
    request_tat = GREATEST(EXCLUDED.updated_at, q.request_tat,
                           q.token_tat - make_interval(secs => $4))
                  + make_interval(secs => $2),
    token_tat = GREATEST(EXCLUDED.updated_at, q.request_tat, q.token_tat)
                + make_interval(secs => $3),
    updated_at = EXCLUDED.updated_at
RETURNING EXTRACT(EPOCH FROM q.request_tat)::float8 - $2,
          EXTRACT(EPOCH FROM clock_timestamp())::float8";

#[async_trait]
impl ProviderQuotas for PostgresProviderQuotas {
    async fn reserve(
        &self,
        key: &str,
        limits: &QuotaLimits,
        tokens: u64,
    ) -> Result<QuotaSlot, QuotaError> {
        let client = self
            .db
            .client()
            .await
            .map_err(|e| QuotaError(e.to_string()))?;
        let interval = limits.request_interval();
        let (cost, tolerance) = limits.token_cost(tokens);
        let row = client
            .query_one(RESERVE, &[&key, &interval, &cost, &tolerance])
            .await
            .map_err(failed("reserving a call"))?;
        let starts_at: f64 = row.try_get(0).map_err(failed("reading a reservation"))?;
        let now: f64 = row.try_get(1).map_err(failed("reading a reservation"))?;
        Ok(QuotaSlot {
            wait: wait_until(starts_at, now),
            starts_at,
        })
    }

    async fn settle(&self, key: &str, limits: &QuotaLimits, delta: i64) -> Result<(), QuotaError> {
        let secs = limits.token_secs(delta);
        if secs == 0.0 {
            return Ok(());
        }
        let client = self
            .db
            .client()
            .await
            .map_err(|e| QuotaError(e.to_string()))?;
        client
            .execute(
                "UPDATE provider_quotas SET token_tat = token_tat + make_interval(secs => $2)
                 WHERE quota_key = $1",
                &[&key, &secs],
            )
            .await
            .map_err(failed("settling a call"))?;
        Ok(())
    }

    async fn pause(&self, key: &str, pause: Duration) -> Result<(), QuotaError> {
        let client = self
            .db
            .client()
            .await
            .map_err(|e| QuotaError(e.to_string()))?;
        client
            .execute(
                "INSERT INTO provider_quotas AS q (quota_key, request_tat, token_tat, updated_at)
                 SELECT $1, n + make_interval(secs => $2), n, n
                 FROM (SELECT clock_timestamp() AS n) t
                 ON CONFLICT (quota_key) DO UPDATE SET
                     request_tat = GREATEST(q.request_tat, EXCLUDED.request_tat),
                     updated_at = EXCLUDED.updated_at",
                &[&key, &pause.as_secs_f64()],
            )
            .await
            .map_err(failed("pausing a provider"))?;
        Ok(())
    }
}
