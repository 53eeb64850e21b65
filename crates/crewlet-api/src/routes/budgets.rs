//! `GET /budgets` and `POST /budgets/{scope}/reset`: the token budgets of
//! the active company (org, units, seats), what the shared ledger has
//! charged and holds against each, its period and its state.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use crewlet_config::{BudgetPeriod, Company, Organization};
use crewlet_core::{Event, EventType};
use crewlet_store::{BudgetRow, StoreError, UsageRow, agent_scope, unit_scope};
use serde::Serialize;
use tracing::{info, warn};
use utoipa::ToSchema;

use crate::auth::{AdminAccess, ReadAccess};
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::state::ApiState;

/// One budget of `GET /budgets`: the configured cap and the durable counter.
#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetScope {
    /// The cap in the active company; 0 = unlimited.
    pub max_tokens: u64,
    /// Tokens charged against it in the current period (the shared ledger
    /// the engine enforces).
    pub durable_used: u64,
    /// When the counter last moved (RFC 3339), empty if never.
    pub durable_updated_at: String,
    /// The engine run's own meter: always `null` here, the ledger is the
    /// only counter this engine keeps.
    #[schema(value_type = Option<u64>)]
    pub live_used: Option<u64>,
    #[schema(value_type = Option<u64>)]
    pub live_max: Option<u64>,
    /// When a charge was last refused (RFC 3339), empty if none: that, not
    /// `used >= max`, is what exhausted means.
    pub refused_at: String,
    /// Ours: held by model calls in flight (reserve-then-settle).
    pub reserved_tokens: u64,
    /// Ours: `none`, `daily` or `monthly` (`budget_policy.period`).
    pub period: &'static str,
    /// Ours: when the current period started (RFC 3339), empty without one.
    pub period_start: String,
    /// Ours: `ok`, `warning` (past `budget_policy.warn_at` of the cap) or
    /// `exhausted` (a charge was refused this period; the seats spending
    /// from it are paused until it is raised or reset).
    pub state: &'static str,
}

/// One agent seat's budget.
#[derive(Debug, Serialize, ToSchema)]
pub struct SeatBudget {
    pub agent_id: String,
    /// The seat's name.
    pub role: String,
    pub handle: String,
    #[serde(flatten)]
    pub budget: BudgetScope,
}

/// Ours: one unit's budget (units with a `token_budget`).
#[derive(Debug, Serialize, ToSchema)]
pub struct UnitBudget {
    pub unit: String,
    #[serde(flatten)]
    pub budget: BudgetScope,
}

/// `GET /budgets`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Budgets {
    /// False when the ledger could not be read: the zeros below are then
    /// unknown, not nothing spent.
    pub durable: bool,
    pub org: BudgetScope,
    /// Ours: the units that have a budget, in org order.
    pub units: Vec<UnitBudget>,
    /// Every agent seat of the active company (human seats have no budget),
    /// most spent first.
    pub seats: Vec<SeatBudget>,
    /// Ours: the ledger rows, `org` first, then `unit:{name}`, then
    /// `agent:{id}`.
    #[schema(value_type = Vec<Object>)]
    pub budgets: Vec<BudgetRow>,
    /// Ours: lifetime tokens per agent handle.
    #[schema(value_type = Vec<Object>)]
    pub usage: Vec<UsageRow>,
}

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}

/// How a budget's row reads under the active policy, now.
struct Reader {
    period: BudgetPeriod,
    window: Option<DateTime<Utc>>,
    warn_at: f64,
}

impl Reader {
    fn new(company: Option<&Company>, now: DateTime<Utc>) -> Self {
        let policy = company.map(|c| c.budget_policy).unwrap_or_default();
        Self {
            period: policy.period,
            window: policy.period.window(now),
            warn_at: policy.warn_at,
        }
    }

    fn scope(&self, max_tokens: u64, row: Option<&BudgetRow>) -> BudgetScope {
        // A row of an earlier period counts from 0 again (the ledger
        // starts it over at its next charge).
        let stale = |r: &BudgetRow| crewlet_store::new_period(r.period_start, self.window);
        let current = row.filter(|r| !stale(r));
        let used = current.map_or(0, |r| r.used_tokens);
        let refused = current.and_then(|r| r.refused_at);
        #[allow(clippy::cast_precision_loss)]
        let warned = current.is_some_and(|r| r.warned_at.is_some())
            || (max_tokens > 0
                && self.warn_at > 0.0
                && used as f64 >= (max_tokens as f64 * self.warn_at).ceil());
        let state = if refused.is_some() && max_tokens > 0 {
            "exhausted"
        } else if warned {
            "warning"
        } else {
            "ok"
        };
        BudgetScope {
            max_tokens,
            durable_used: used,
            durable_updated_at: row.map(|r| stamp(r.updated_at)).unwrap_or_default(),
            live_used: None,
            live_max: None,
            refused_at: refused.map(stamp).unwrap_or_default(),
            reserved_tokens: row.map_or(0, |r| r.reserved_tokens),
            period: self.period.as_str(),
            period_start: self.window.map(stamp).unwrap_or_default(),
            state,
        }
    }
}

/// Caps from the active company, what the ledger has charged and holds
/// against them in the current period, and each one's state. A ledger that
/// cannot be read is `durable: false`, not an error.
#[utoipa::path(get, path = "/budgets", tag = "tokens",
    responses((status = 200, body = Budgets), (status = 401, body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn budgets(_: ReadAccess, State(state): State<ApiState>) -> HttpResult<Json<Budgets>> {
    let ledger = &state.inner().stores.ledger;
    let (rows, usage, durable) = match futures::try_join!(ledger.budgets(), ledger.usage()) {
        Ok((rows, usage)) => (rows, usage, true),
        Err(e) => {
            warn!(error = %e, "cannot read the token ledger for GET /budgets");
            (Vec::new(), Vec::new(), false)
        }
    };
    let by_scope: HashMap<&str, &BudgetRow> = rows.iter().map(|r| (r.scope.as_str(), r)).collect();
    let snapshot = state.snapshot();
    let company = snapshot.as_ref().map(|s| s.company.clone());
    let reader = Reader::new(company.as_deref(), Utc::now());
    let org_row = by_scope.get(crewlet_store::ORG_SCOPE).copied();
    let org_cap = company
        .as_ref()
        .map(|c| c.token_budget)
        .or_else(|| org_row.map(|r| r.max_tokens))
        .unwrap_or(0);
    let organization = state.view().and_then(|v| v.organization());
    let units = organization
        .as_deref()
        .map(|o| unit_budgets(o, &reader, &by_scope))
        .unwrap_or_default();
    let mut seats: Vec<SeatBudget> = organization
        .as_deref()
        .map(|o| {
            o.agents()
                .map(|seat| {
                    let row = by_scope.get(agent_scope(&seat.agent_id).as_str()).copied();
                    SeatBudget {
                        agent_id: seat.agent_id.to_string(),
                        role: seat.name.clone(),
                        handle: seat.handle.clone(),
                        budget: reader.scope(seat.role.token_budget, row),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    seats.sort_by(|a, b| {
        b.budget
            .durable_used
            .cmp(&a.budget.durable_used)
            .then_with(|| a.role.cmp(&b.role))
    });
    Ok(Json(Budgets {
        durable,
        org: reader.scope(org_cap, org_row),
        units,
        seats,
        budgets: rows,
        usage,
    }))
}

fn unit_budgets(
    org: &Organization,
    reader: &Reader,
    by_scope: &HashMap<&str, &BudgetRow>,
) -> Vec<UnitBudget> {
    org.units()
        .iter()
        .filter(|u| u.token_budget > 0)
        .map(|u| UnitBudget {
            unit: u.name.clone(),
            budget: reader.scope(
                u.token_budget,
                by_scope.get(unit_scope(&u.name).as_str()).copied(),
            ),
        })
        .collect()
}

/// What `POST /budgets/{scope}/reset` did.
#[derive(Debug, Serialize, ToSchema)]
pub struct BudgetReset {
    /// The ledger scope reset: `org`, `unit:{name}` or `agent:{id}`.
    pub scope: String,
}

/// Ours: sets a budget's usage back to 0 and clears its refusal and
/// warning; seats paused by it take work again within seconds. `scope` is
/// `org`, `unit:{name}`, `agent:{id}`, or a seat handle.
#[utoipa::path(post, path = "/budgets/{scope}/reset", tag = "tokens",
    params(("scope" = String, Path, description = "`org`, `unit:{name}`, `agent:{id}` or a seat handle")),
    responses((status = 200, body = BudgetReset),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "no such budget, or nothing charged to it yet", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn reset_budget(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(scope): Path<String>,
) -> HttpResult<Json<BudgetReset>> {
    let key = if scope == crewlet_store::ORG_SCOPE
        || scope.starts_with("unit:")
        || scope.starts_with("agent:")
    {
        scope.clone()
    } else {
        let org = state.view().and_then(|v| v.organization());
        let seat = org
            .as_deref()
            .and_then(|o| o.seat(&scope).map(|s| s.agent_id));
        match seat {
            Some(id) => agent_scope(&id),
            None => {
                return Err(HttpError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!(
                        "`{scope}` is not `org`, `unit:{{name}}`, `agent:{{id}}` or a seat handle"
                    ),
                ));
            }
        }
    };
    match state.inner().stores.ledger.reset(&key).await {
        Ok(()) => {}
        Err(StoreError::NotFound { .. }) => {
            return Err(HttpError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("budget `{key}` has no charges to reset"),
            ));
        }
        Err(StoreError::InvalidInput { reason, .. }) => {
            return Err(HttpError::new(
                StatusCode::BAD_REQUEST,
                "invalid_scope",
                reason,
            ));
        }
        Err(e) => return Err(e.into()),
    }
    info!(scope = %key, by = %caller.name(), "budget reset");
    resume_seats(&state, &key).await;
    Ok(Json(BudgetReset { scope: key }))
}

/// Tells every seat spending from budget `scope` to check its budget now
/// (`seat_control` `resume` on its control topic): a seat paused by it
/// takes work again at once, on whichever engine runs it.
async fn resume_seats(state: &ApiState, scope: &str) {
    let Some(org) = state.view().and_then(|v| v.organization()) else {
        return;
    };
    let handles: Vec<String> = if scope == crewlet_store::ORG_SCOPE {
        org.agents().map(|s| s.handle.clone()).collect()
    } else if let Some(unit) = scope.strip_prefix("unit:") {
        org.units()
            .iter()
            .position(|u| u.name == unit)
            .map(|i| {
                org.seats_under(i)
                    .into_iter()
                    .filter(|s| s.is_agent())
                    .map(|s| s.handle.clone())
                    .collect()
            })
            .unwrap_or_default()
    } else {
        org.agents()
            .filter(|s| agent_scope(&s.agent_id) == scope)
            .map(|s| s.handle.clone())
            .collect()
    };
    let queue = &state.inner().queue;
    for handle in handles {
        let event = Event::new(EventType::SeatControl, "api.budgets")
            .with_summary(format!("resume {handle}: budget `{scope}` reset"))
            .with_agent_handle(handle.as_str())
            .with_payload(serde_json::json!({
                "command": "resume",
                "reason": "budget_reset",
                "scope": scope,
            }));
        let route = crewlet_queue::topics::agent_control(&handle);
        if let Err(e) = queue.publish(&route.topic, &event).await {
            warn!(agent = %handle, error = %e, "cannot tell a seat its budget was reset; it notices on its next check");
        }
    }
}
