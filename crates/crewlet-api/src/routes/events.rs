//! `/events`, `/events/{id}`, `/events/trace/{trace_id}`,
//! `/tokens/breakdown`, `/budgets`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use chrono::{DateTime, Utc};
use crewlet_core::{Category, Event, EventType, TraceId};
use crewlet_store::{BudgetRow, EventPage, EventQuery, TokenBreakdown, UsageRow};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::ReadAccess;
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::routes::query_error;
use crate::state::ApiState;

/// The event envelope (the wire format of `crewlet_core::Event`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Event)]
pub struct EventSchema {
    /// Uuid v7.
    pub id: Uuid,
    #[serde(rename = "type")]
    pub event_type: String,
    pub timestamp: DateTime<Utc>,
    pub source: String,
    pub category: String,
    pub summary: String,
    pub agent_id: Option<String>,
    pub agent_role: Option<String>,
    pub task_id: Option<String>,
    pub channel_id: Option<String>,
    pub sender: Option<String>,
    /// 32 hex digits.
    pub trace_id: Option<String>,
    /// 16 hex digits.
    pub span_id: Option<String>,
    pub parent_span_id: Option<String>,
    pub delegation_depth: u32,
    pub tags: BTreeMap<String, String>,
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
}

/// One page of events, newest first.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = EventPage)]
pub struct EventPageSchema {
    pub events: Vec<EventSchema>,
    /// Pass as `cursor` to get the next (older) page; absent on the last page.
    pub next: Option<String>,
}

/// `GET /events/trace/{trace_id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct TraceEvents {
    pub trace_id: String,
    /// Oldest first, at most 500.
    #[schema(value_type = Vec<EventSchema>)]
    pub events: Vec<Event>,
}

/// `GET /budgets`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Budgets {
    /// Budget ledger rows: `org` first, then `agent:{id}`.
    #[schema(value_type = Vec<Object>)]
    pub budgets: Vec<BudgetRow>,
    /// Lifetime tokens per agent handle.
    #[schema(value_type = Vec<Object>)]
    pub usage: Vec<UsageRow>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsParams {
    /// Event type, e.g. `raw_webhook`, `task_completed`.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub event_type: Option<String>,
    /// Category, e.g. `webhook`, `task`, `system`.
    pub category: Option<String>,
    pub agent_id: Option<String>,
    pub task_id: Option<String>,
    /// Inclusive lower bound, RFC 3339.
    pub since: Option<String>,
    /// Exclusive upper bound, RFC 3339.
    pub until: Option<String>,
    /// Page size: default 50, at most 500.
    pub limit: Option<u32>,
    /// The `next` of the previous page.
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BreakdownParams {
    /// Window in days, 1..=30 (default 1).
    pub since_days: Option<u32>,
}

fn time(name: &str, value: Option<&str>) -> HttpResult<Option<DateTime<Utc>>> {
    value
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    HttpError::bad_request(format!("`{name}` `{v}` is not an RFC 3339 time: {e}"))
                })
        })
        .transpose()
}

/// Stored events, newest first, filtered, keyset-paged.
#[utoipa::path(get, path = "/events", tag = "events", params(EventsParams),
    responses((status = 200, body = EventPageSchema), (status = 400, body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn events(
    _: ReadAccess,
    State(state): State<ApiState>,
    params: Result<Query<EventsParams>, QueryRejection>,
) -> HttpResult<Json<EventPage>> {
    let Query(p) = params.map_err(query_error)?;
    let query = EventQuery {
        event_type: p.event_type.as_deref().map(EventType::parse),
        category: p.category.as_deref().map(Category::parse),
        agent_id: p.agent_id,
        task_id: p.task_id,
        since: time("since", p.since.as_deref())?,
        until: time("until", p.until.as_deref())?,
        limit: p.limit,
        after: p
            .cursor
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(HttpError::from)?,
    };
    Ok(Json(state.inner().stores.events.recent(&query).await?))
}

/// One stored event.
#[utoipa::path(get, path = "/events/{id}", tag = "events",
    params(("id" = String, Path, description = "event id (uuid)")),
    responses((status = 200, body = EventSchema), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn event(
    _: ReadAccess,
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> HttpResult<Json<Event>> {
    let uuid = Uuid::parse_str(&id)
        .map_err(|_| HttpError::bad_request(format!("event id `{id}` is not a uuid")))?;
    state
        .inner()
        .stores
        .events
        .get(uuid)
        .await?
        .map(Json)
        .ok_or_else(|| HttpError::not_found(format!("event `{id}` not found")))
}

/// Every stored event of one trace, oldest first (at most 500).
#[utoipa::path(get, path = "/events/trace/{trace_id}", tag = "events",
    params(("trace_id" = String, Path, description = "W3C trace id, 32 hex digits")),
    responses((status = 200, body = TraceEvents), (status = 400, body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn trace(
    _: ReadAccess,
    State(state): State<ApiState>,
    Path(trace_id): Path<String>,
) -> HttpResult<Json<TraceEvents>> {
    let id: TraceId = trace_id
        .parse()
        .map_err(|e: crewlet_core::TraceParseError| HttpError::bad_request(e.to_string()))?;
    let events = state.inner().stores.events.by_trace(&id).await?;
    Ok(Json(TraceEvents {
        trace_id: id.to_string(),
        events,
    }))
}

/// Where the tokens went over the last `since_days` days: by phase, model,
/// auxiliary worker, agent and turn.
#[utoipa::path(get, path = "/tokens/breakdown", tag = "tokens", params(BreakdownParams),
    responses((status = 200, description = "the rollup", body = Object), (status = 400, body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn token_breakdown(
    _: ReadAccess,
    State(state): State<ApiState>,
    params: Result<Query<BreakdownParams>, QueryRejection>,
) -> HttpResult<Json<TokenBreakdown>> {
    let Query(p) = params.map_err(query_error)?;
    let days = p.since_days.unwrap_or(1);
    Ok(Json(
        state.inner().stores.events.token_breakdown(days).await?,
    ))
}

/// Token budgets (org and per agent) and lifetime usage.
#[utoipa::path(get, path = "/budgets", tag = "tokens",
    responses((status = 200, body = Budgets)),
    security((), ("bearer" = [])))]
pub async fn budgets(_: ReadAccess, State(state): State<ApiState>) -> HttpResult<Json<Budgets>> {
    let ledger = &state.inner().stores.ledger;
    Ok(Json(Budgets {
        budgets: ledger.budgets().await?,
        usage: ledger.usage().await?,
    }))
}
