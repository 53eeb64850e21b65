//! `/events`, `/events/{id}`, `/events/trace/{trace_id}`,
//! `/tokens/breakdown`.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use crewlet_config::Organization;
use crewlet_core::{Category, Event, EventType, TraceId};
use crewlet_store::{
    BreakdownQuery, Cursor, DEFAULT_RECENT_TURNS, EventPage, EventQuery, MAX_BREAKDOWN_DAYS,
    MAX_TURNS_IN_BREAKDOWN, TokenBreakdown,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::ReadAccess;
use crate::content;
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
    /// Left out for a caller without `read:content` when it quotes content
    /// (a task's text, a memory preview, a search query).
    #[serde(default)]
    pub summary: Option<String>,
    pub agent_id: Option<String>,
    pub agent_role: Option<String>,
    pub task_id: Option<String>,
    pub channel_id: Option<String>,
    pub sender: Option<String>,
    /// 32 lower-case hex digits.
    #[schema(pattern = r"^[0-9a-f]{32}$")]
    pub trace_id: Option<String>,
    /// 16 lower-case hex digits.
    #[schema(pattern = r"^[0-9a-f]{16}$")]
    pub span_id: Option<String>,
    #[schema(pattern = r"^[0-9a-f]{16}$")]
    pub parent_span_id: Option<String>,
    pub delegation_depth: u32,
    /// Omitted when empty.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Omitted when null. Without `read:content` its content fields
    /// (prompts, responses, task text, tool results, ...) are left out, or
    /// the whole payload for a type whose fields are not known; see
    /// docs/api.md, "Metadata and content".
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
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
    #[param(format = DateTime)]
    pub since: Option<String>,
    /// Exclusive upper bound, RFC 3339.
    #[param(format = DateTime)]
    pub until: Option<String>,
    /// Page size: default 50, 1 to 500.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The `next` of the previous page: `{unix micros}_{event id, 32 hex digits}`.
    #[param(pattern = r"^-?[0-9]{1,16}_[0-9a-f]{32}$")]
    pub cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BreakdownParams {
    /// Window in days, an integer (default 7); cut to 1..=30, and a value
    /// that is not an integer is the default (as the original engine does,
    /// so any text is accepted).
    #[param(value_type = Option<String>)]
    pub since_days: Option<String>,
    /// Only this agent role (as the phase events name it).
    pub agent_role: Option<String>,
    /// Longest `by_turn`, an integer (default 50); cut to 1..=500, and a
    /// value that is not an integer is the default (any text is accepted).
    #[param(value_type = Option<String>)]
    pub recent_turns: Option<String>,
}

/// `GET /tokens/breakdown` default window.
const DEFAULT_BREAKDOWN_DAYS: u32 = 7;

/// An integer parameter cut into `lo..=hi`; the default when absent or not an integer.
fn clamped(value: Option<&str>, default: u32, lo: u32, hi: u32) -> u32 {
    value
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map_or(default, |n| {
            u32::try_from(n.clamp(i64::from(lo), i64::from(hi))).unwrap_or(default)
        })
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

/// The largest `limit` (the store's page size cap).
const MAX_PAGE_SIZE: u32 = 500;

/// `limit`: 1..=500, else 400.
fn page_size(limit: Option<u32>) -> HttpResult<Option<u32>> {
    match limit {
        Some(n) if !(1..=MAX_PAGE_SIZE).contains(&n) => Err(HttpError::bad_request(format!(
            "`limit` {n} is not between 1 and {MAX_PAGE_SIZE}"
        ))),
        other => Ok(other),
    }
}

/// `cursor`: exactly the shape a page's `next` has (`{micros}_{32 hex}`),
/// with micros of at most 16 digits, so every cursor the document allows
/// is in range.
fn cursor(value: Option<&str>) -> HttpResult<Option<Cursor>> {
    let Some(v) = value else { return Ok(None) };
    let bad = || {
        HttpError::bad_request(format!(
            "`cursor` `{v}` is not a page's `next` (`{{unix micros}}_{{32 hex digits}}`)"
        ))
    };
    let (micros, id) = v.split_once('_').ok_or_else(bad)?;
    let digits = micros.strip_prefix('-').unwrap_or(micros);
    let shaped = (1..=16).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
        && id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !shaped {
        return Err(bad());
    }
    v.parse().map(Some).map_err(|_| bad())
}

/// The answer of a content route: `value` as JSON with the
/// `x-crewlet-content` header, its content left out unless `shown`.
pub(crate) fn answer(
    value: impl serde::Serialize,
    shown: bool,
    strip: impl FnOnce(&mut serde_json::Value),
) -> Response {
    if shown {
        return (content::header(true), Json(value)).into_response();
    }
    let mut v = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
    strip(&mut v);
    (content::header(false), Json(v)).into_response()
}

fn strip_events(list: Option<&mut serde_json::Value>) {
    if let Some(serde_json::Value::Array(events)) = list {
        events.iter_mut().for_each(content::strip_event_value);
    }
}

/// Stored events, newest first, filtered, keyset-paged. Without
/// `read:content` the content fields of each event are left out
/// (`x-crewlet-content: hidden`).
#[utoipa::path(get, path = "/events", tag = "events", params(EventsParams),
    responses((status = 200, body = EventPageSchema,
            headers(("x-crewlet-content" = String, description = "`hidden`: content fields were left out (the caller lacks `read:content`); `shown`: nothing was"))),
        (status = 400, description = "a bad filter, limit or cursor", body = ErrorBody),
        (status = 401, body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn events(
    ReadAccess(caller): ReadAccess,
    State(state): State<ApiState>,
    params: Result<Query<EventsParams>, QueryRejection>,
) -> HttpResult<Response> {
    let Query(p) = params.map_err(query_error)?;
    let query = EventQuery {
        event_type: p.event_type.as_deref().map(EventType::parse),
        category: p.category.as_deref().map(Category::parse),
        agent_id: p.agent_id,
        task_id: p.task_id,
        since: time("since", p.since.as_deref())?,
        until: time("until", p.until.as_deref())?,
        limit: page_size(p.limit)?,
        after: cursor(p.cursor.as_deref())?,
    };
    let page: EventPage = state.inner().stores.events.recent(&query).await?;
    Ok(answer(page, caller.content, |v| {
        strip_events(v.get_mut("events"))
    }))
}

/// One stored event (its content left out without `read:content`).
#[utoipa::path(get, path = "/events/{id}", tag = "events",
    params(("id" = String, Path, format = Uuid, description = "event id (uuid)")),
    responses((status = 200, body = EventSchema,
            headers(("x-crewlet-content" = String, description = "`hidden`: content fields were left out; `shown`: nothing was"))),
        (status = 400, description = "not a uuid", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn event(
    ReadAccess(caller): ReadAccess,
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> HttpResult<Response> {
    let uuid = Uuid::parse_str(&id)
        .map_err(|_| HttpError::bad_request(format!("event id `{id}` is not a uuid")))?;
    let event = state
        .inner()
        .stores
        .events
        .get(uuid)
        .await?
        .ok_or_else(|| HttpError::not_found(format!("event `{id}` not found")))?;
    Ok(answer(event, caller.content, content::strip_event_value))
}

/// Every stored event of one trace, oldest first (at most 500); content
/// left out without `read:content`.
#[utoipa::path(get, path = "/events/trace/{trace_id}", tag = "events",
    params(("trace_id" = String, Path, pattern = r"^(?!0{32})[0-9a-f]{32}$",
        description = "W3C trace id: 32 lower-case hex digits, not all zero")),
    responses((status = 200, body = TraceEvents,
            headers(("x-crewlet-content" = String, description = "`hidden`: content fields were left out; `shown`: nothing was"))),
        (status = 400, description = "not a trace id", body = ErrorBody),
        (status = 401, body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn trace(
    ReadAccess(caller): ReadAccess,
    State(state): State<ApiState>,
    Path(trace_id): Path<String>,
) -> HttpResult<Response> {
    let id: TraceId = trace_id
        .parse()
        .map_err(|e: crewlet_core::TraceParseError| HttpError::bad_request(e.to_string()))?;
    let events = state.inner().stores.events.by_trace(&id).await?;
    let body = TraceEvents {
        trace_id: id.to_string(),
        events,
    };
    Ok(answer(body, caller.content, |v| {
        strip_events(v.get_mut("events"))
    }))
}

/// The seat an event's agent id or role names.
fn seat_handle(org: Option<&Organization>, agent_id: &str, role: &str) -> String {
    let Some(org) = org else {
        return String::new();
    };
    org.seats()
        .iter()
        .find(|s| !agent_id.is_empty() && s.agent_id.to_string() == agent_id)
        .or_else(|| org.seat(role))
        .or_else(|| org.seats().iter().find(|s| s.name == role))
        .map(|s| s.handle.clone())
        .unwrap_or_default()
}

/// Where the tokens went over the last `since_days` days (of one
/// `agent_role`, or all): by phase, model, auxiliary worker, agent role and
/// (the `recent_turns` latest) turn. `aggregated_through` is the latest
/// event counted.
#[utoipa::path(get, path = "/tokens/breakdown", tag = "tokens", params(BreakdownParams),
    responses((status = 200, description = "the rollup", body = Object),
        (status = 400, description = "a malformed query string", body = ErrorBody),
        (status = 401, body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn token_breakdown(
    _: ReadAccess,
    State(state): State<ApiState>,
    params: Result<Query<BreakdownParams>, QueryRejection>,
) -> HttpResult<Json<TokenBreakdown>> {
    let Query(p) = params.map_err(query_error)?;
    let query = BreakdownQuery {
        since_days: clamped(
            p.since_days.as_deref(),
            DEFAULT_BREAKDOWN_DAYS,
            1,
            MAX_BREAKDOWN_DAYS,
        ),
        agent_role: p.agent_role.filter(|r| !r.is_empty()),
        recent_turns: clamped(
            p.recent_turns.as_deref(),
            DEFAULT_RECENT_TURNS,
            1,
            MAX_TURNS_IN_BREAKDOWN,
        ),
    };
    let mut b = state.inner().stores.events.token_breakdown(&query).await?;
    let org = state.view().and_then(|v| v.organization());
    for a in &mut b.by_agent {
        a.handle = seat_handle(org.as_deref(), &a.agent_id, &a.role);
    }
    for t in &mut b.by_turn {
        t.handle = seat_handle(org.as_deref(), &t.agent_id, &t.role);
    }
    Ok(Json(b))
}
