//! [`TokenLedger`] in PostgreSQL.

use async_trait::async_trait;

use chrono::{DateTime, Utc};

use super::{
    BudgetCharge, BudgetRefusal, BudgetRow, BudgetType, BudgetWarning, ChargeOutcome,
    ReservationId, ReserveOutcome, ScopeCap, TokenLedger, UsageRow, scope_kind,
};
use crate::db::Database;
use crate::error::{StoreError, describe, query_err};
use crate::sql::{from_i64, to_i64};

/// The ledger in PostgreSQL (`token_budget_usage`, `token_usage`).
#[derive(Clone, Debug)]
pub struct PostgresTokenLedger {
    db: Database,
}

impl PostgresTokenLedger {
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

const ENSURE_SCOPE: &str = "INSERT INTO token_budget_usage (scope, agent_handle, max_tokens)
     VALUES ($1, $2::text, $3::int8)
     ON CONFLICT (scope) DO NOTHING";

/// A row whose period started before `$2` starts over (used, refusal and
/// warning cleared); `$2` null: no period.
const START_PERIOD: &str = "UPDATE token_budget_usage
     SET used_tokens = 0, refused_at = NULL, warned_at = NULL, period_start = $2,
         updated_at = now()
     WHERE scope = $1 AND $2::timestamptz IS NOT NULL
       AND (period_start IS NULL OR period_start < $2::timestamptz)";

/// `$5` picks the counter: false adds to used, true to held.
const APPLY_SCOPE: &str = "UPDATE token_budget_usage
     SET used_tokens = used_tokens + CASE WHEN $5::bool THEN 0 ELSE $2::int8 END,
         reserved_tokens = reserved_tokens + CASE WHEN $5::bool THEN $2::int8 ELSE 0 END,
         max_tokens = $3::int8,
         agent_handle = coalesce($4::text, agent_handle),
         updated_at = now()
     WHERE scope = $1
       AND ($3::int8 = 0 OR used_tokens + reserved_tokens + $2::int8 <= $3::int8)
     RETURNING used_tokens";

const REFUSED_SCOPE: &str = "UPDATE token_budget_usage
     SET refused_at = now(), max_tokens = $2::int8
     WHERE scope = $1
     RETURNING used_tokens, reserved_tokens";

/// Ends a hold: `$2` held tokens go, `$3` are charged.
const FINISH_SCOPE: &str = "UPDATE token_budget_usage
     SET reserved_tokens = greatest(reserved_tokens - $2::int8, 0),
         used_tokens = used_tokens + $3::int8,
         updated_at = now()
     WHERE scope = $1";

/// Claims the scope's warning for this period when used reached `$2`
/// (the threshold in tokens); a row comes back only to the one claimer.
const CLAIM_WARNING: &str = "UPDATE token_budget_usage
     SET warned_at = now()
     WHERE scope = $1 AND warned_at IS NULL AND max_tokens > 0 AND used_tokens >= $2::int8
     RETURNING used_tokens, max_tokens";

impl PostgresTokenLedger {
    /// Checks `charge` against every scope and, when all fit, adds it to
    /// their used (`hold` none) or held tokens, in one transaction; with
    /// `hold`, also records reservation `id`.
    async fn apply(
        &self,
        charge: &BudgetCharge,
        hold: Option<uuid::Uuid>,
    ) -> Result<Option<BudgetRefusal>, StoreError> {
        let tokens = to_i64("tokens", charge.tokens)?;
        let scopes = charge.scopes();
        let maxes: Vec<i64> = scopes
            .iter()
            .map(|c| to_i64("budget", c.max))
            .collect::<Result<_, _>>()?;
        let handle_of =
            |c: &ScopeCap| (c.kind == BudgetType::Agent).then_some(charge.agent_handle.as_str());
        let mut client = self.db.client().await?;
        // Every row exists afterwards, charged or not, so /budgets shows them.
        for (cap, max) in scopes.iter().zip(&maxes) {
            let handle = handle_of(cap);
            client
                .execute(ENSURE_SCOPE, &[&cap.scope, &handle, max])
                .await
                .map_err(query_err(format!("creating budget scope `{}`", cap.scope)))?;
        }
        let tx = client
            .transaction()
            .await
            .map_err(query_err("starting a budget charge"))?;
        let held = hold.is_some();
        let mut refused = None;
        // In `scopes` order (org, units, agent): every charge locks in the
        // same order, so concurrent charges cannot deadlock.
        for (cap, max) in scopes.iter().zip(&maxes) {
            tx.execute(START_PERIOD, &[&cap.scope, &charge.window])
                .await
                .map_err(query_err(format!(
                    "starting a budget period on `{}`",
                    cap.scope
                )))?;
            let handle = handle_of(cap);
            let row = tx
                .query_opt(APPLY_SCOPE, &[&cap.scope, &tokens, max, &handle, &held])
                .await
                .map_err(query_err(format!("charging budget scope `{}`", cap.scope)))?;
            if row.is_none() {
                refused = Some((cap, *max));
                break;
            }
        }
        let Some((cap, max)) = refused else {
            if let Some(id) = hold {
                let names: Vec<&str> = scopes.iter().map(|c| c.scope.as_str()).collect();
                tx.execute(
                    "INSERT INTO budget_reservations (id, scopes, tokens, warn_at)
                     VALUES ($1, $2, $3, $4)",
                    &[&id, &names, &tokens, &charge.warn_at],
                )
                .await
                .map_err(query_err("recording a budget reservation"))?;
            }
            tx.commit()
                .await
                .map_err(query_err("committing a budget charge"))?;
            return Ok(None);
        };
        // Nothing is charged: roll back, then stamp the refusal on its own
        // (a new period started above is started again by the next charge).
        tx.rollback()
            .await
            .map_err(query_err("rolling back a refused budget charge"))?;
        let row = client
            .query_opt(REFUSED_SCOPE, &[&cap.scope, &max])
            .await
            .map_err(query_err(format!("recording a refusal on `{}`", cap.scope)))?;
        let d = |e: tokio_postgres::Error| StoreError::decode("token_budget_usage", describe(&e));
        let (used, reserved) = match row {
            Some(r) => (
                from_i64("used_tokens", r.try_get(0).map_err(d)?)?,
                from_i64("reserved_tokens", r.try_get(1).map_err(d)?)?,
            ),
            None => (0, 0),
        };
        Ok(Some(BudgetRefusal {
            budget_type: cap.kind,
            used_tokens: used,
            max_tokens: cap.max,
            reserved_tokens: reserved,
            unit: cap.scope.strip_prefix("unit:").map(str::to_owned),
        }))
    }

    /// Ends reservation `id`, charging `actual`, in one transaction; the
    /// warnings it claims.
    async fn finish(&self, id: uuid::Uuid, actual: u64) -> Result<Vec<BudgetWarning>, StoreError> {
        let actual = to_i64("tokens", actual)?;
        let mut client = self.db.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(query_err("starting a budget settlement"))?;
        let row = tx
            .query_opt(
                "DELETE FROM budget_reservations WHERE id = $1 RETURNING scopes, tokens, warn_at",
                &[&id],
            )
            .await
            .map_err(query_err("ending a budget reservation"))?
            .ok_or_else(|| StoreError::not_found("budget reservation", id))?;
        let d = |e: tokio_postgres::Error| StoreError::decode("budget_reservations", describe(&e));
        let scopes: Vec<String> = row.try_get(0).map_err(d)?;
        let held: i64 = row.try_get(1).map_err(d)?;
        let warn_at: f64 = row.try_get(2).map_err(d)?;
        let mut warnings = Vec::new();
        // In the order they were taken (org first), like charges.
        for scope in &scopes {
            tx.execute(FINISH_SCOPE, &[scope, &held, &actual])
                .await
                .map_err(query_err(format!("settling budget scope `{scope}`")))?;
            if actual == 0 || warn_at.is_nan() || warn_at <= 0.0 {
                continue;
            }
            let max: Option<i64> = tx
                .query_opt(
                    "SELECT max_tokens FROM token_budget_usage WHERE scope = $1",
                    &[scope],
                )
                .await
                .map_err(query_err(format!("reading budget scope `{scope}`")))?
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(d)?;
            let Some(threshold) = max.and_then(|m| warn_threshold(m, warn_at)) else {
                continue;
            };
            if let Some(r) = tx
                .query_opt(CLAIM_WARNING, &[scope, &threshold])
                .await
                .map_err(query_err(format!("claiming the warning of `{scope}`")))?
            {
                let (budget_type, _) = scope_kind(scope)?;
                warnings.push(BudgetWarning {
                    scope: scope.clone(),
                    budget_type,
                    used_tokens: from_i64("used_tokens", r.try_get(0).map_err(d)?)?,
                    max_tokens: from_i64("max_tokens", r.try_get(1).map_err(d)?)?,
                });
            }
        }
        tx.commit()
            .await
            .map_err(query_err("committing a budget settlement"))?;
        Ok(warnings)
    }
}

/// The tokens at which a cap of `max` warns at fraction `warn_at`.
fn warn_threshold(max: i64, warn_at: f64) -> Option<i64> {
    if max <= 0 || warn_at.is_nan() || warn_at <= 0.0 {
        return None;
    }
    // Caps are far below 2^53; the cast back saturates.
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    Some((max as f64 * warn_at).ceil() as i64)
}

const ROW_COLUMNS: &str = "scope, agent_handle, used_tokens, max_tokens, refused_at, updated_at,
     reserved_tokens, period_start, warned_at";

fn budget_row(r: &tokio_postgres::Row) -> Result<BudgetRow, StoreError> {
    let d = |e: tokio_postgres::Error| StoreError::decode("token_budget_usage", describe(&e));
    let scope: String = r.try_get(0).map_err(d)?;
    let (budget_type, agent_id) = scope_kind(&scope)?;
    Ok(BudgetRow {
        budget_type,
        agent_id,
        agent_handle: r.try_get(1).map_err(d)?,
        used_tokens: from_i64("used_tokens", r.try_get(2).map_err(d)?)?,
        reserved_tokens: from_i64("reserved_tokens", r.try_get(6).map_err(d)?)?,
        max_tokens: from_i64("max_tokens", r.try_get(3).map_err(d)?)?,
        refused_at: r.try_get(4).map_err(d)?,
        updated_at: r.try_get(5).map_err(d)?,
        period_start: r.try_get(7).map_err(d)?,
        warned_at: r.try_get(8).map_err(d)?,
        scope,
    })
}

#[async_trait]
impl TokenLedger for PostgresTokenLedger {
    async fn charge(&self, charge: &BudgetCharge) -> Result<ChargeOutcome, StoreError> {
        Ok(match self.apply(charge, None).await? {
            None => ChargeOutcome::Charged,
            Some(refusal) => ChargeOutcome::Refused(refusal),
        })
    }

    async fn reserve(&self, charge: &BudgetCharge) -> Result<ReserveOutcome, StoreError> {
        let id = uuid::Uuid::new_v4();
        Ok(match self.apply(charge, Some(id)).await? {
            None => ReserveOutcome::Reserved(ReservationId(id)),
            Some(refusal) => ReserveOutcome::Refused(refusal),
        })
    }

    async fn settle(
        &self,
        id: ReservationId,
        actual: u64,
    ) -> Result<Vec<BudgetWarning>, StoreError> {
        self.finish(id.0, actual).await
    }

    async fn release(&self, id: ReservationId) -> Result<(), StoreError> {
        self.finish(id.0, 0).await.map(drop)
    }

    async fn scope_rows(&self, scopes: &[String]) -> Result<Vec<BudgetRow>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                &format!("SELECT {ROW_COLUMNS} FROM token_budget_usage WHERE scope = ANY($1)"),
                &[&scopes],
            )
            .await
            .map_err(query_err("reading budget scopes"))?;
        rows.iter().map(budget_row).collect()
    }

    async fn release_stale(&self, before: DateTime<Utc>) -> Result<usize, StoreError> {
        let client = self.db.client().await?;
        let ids: Vec<uuid::Uuid> = client
            .query(
                "SELECT id FROM budget_reservations WHERE created_at < $1",
                &[&before],
            )
            .await
            .map_err(query_err("reading stale budget reservations"))?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()
            .map_err(|e| StoreError::decode("budget_reservations", describe(&e)))?;
        drop(client);
        let mut released = 0;
        for id in ids {
            match self.finish(id, 0).await {
                Ok(_) => released += 1,
                // Settled meanwhile by its own process.
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(released)
    }

    async fn record_usage(&self, agent_handle: &str, tokens: u64) -> Result<(), StoreError> {
        let tokens = to_i64("tokens", tokens)?;
        let client = self.db.client().await?;
        client
            .execute(
                "INSERT INTO token_usage (agent_handle, tokens_used) VALUES ($1, $2)
                 ON CONFLICT (agent_handle) DO UPDATE
                 SET tokens_used = token_usage.tokens_used + EXCLUDED.tokens_used,
                     updated_at = now()",
                &[&agent_handle, &tokens],
            )
            .await
            .map_err(query_err(format!(
                "recording token usage of `{agent_handle}`"
            )))?;
        Ok(())
    }

    async fn budgets(&self) -> Result<Vec<BudgetRow>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {ROW_COLUMNS} FROM token_budget_usage
                     ORDER BY scope <> 'org', scope LIKE 'agent:%', scope"
                ),
                &[],
            )
            .await
            .map_err(query_err("reading budgets"))?;
        rows.iter().map(budget_row).collect()
    }

    async fn reset(&self, scope: &str) -> Result<(), StoreError> {
        scope_kind(scope)?;
        let client = self.db.client().await?;
        let n = client
            .execute(
                "UPDATE token_budget_usage
                 SET used_tokens = 0, refused_at = NULL, warned_at = NULL, updated_at = now()
                 WHERE scope = $1",
                &[&scope],
            )
            .await
            .map_err(query_err(format!("resetting budget scope `{scope}`")))?;
        if n == 0 {
            return Err(StoreError::not_found("budget scope", scope));
        }
        Ok(())
    }

    async fn usage(&self) -> Result<Vec<UsageRow>, StoreError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT agent_handle, tokens_used, updated_at FROM token_usage ORDER BY agent_handle",
                &[],
            )
            .await
            .map_err(query_err("reading token usage"))?;
        rows.iter()
            .map(|r| {
                let d = |e: tokio_postgres::Error| StoreError::decode("token_usage", describe(&e));
                Ok(UsageRow {
                    agent_handle: r.try_get(0).map_err(d)?,
                    tokens_used: from_i64("tokens_used", r.try_get(1).map_err(d)?)?,
                    updated_at: r.try_get(2).map_err(d)?,
                })
            })
            .collect()
    }
}
