//! `/config` and `/config/revisions`: the company configuration, with the
//! original engine's contract (uuid revision ids, `X-Summary` required on a
//! full `PUT`, `If-Match` optimistic concurrency answering `409
//! revision_advanced`, `412` when nothing is active yet, `201` on a write,
//! revert, diff and audit) plus ours (`ETag`, `.../activate`, `Accept:
//! application/yaml`). Every route needs a token with the `admin` scope. A
//! company written here (or reverted to) must also pass Tier A's `security`
//! block: its MCP programs, `${VAR}` names and outbound hosts, else 400
//! `not_allowed` and nothing changes.

use std::collections::{BTreeSet, HashMap};

use axum::Json;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, SecondsFormat, Utc};
use crewlet_config::{Company, Problem, check_company};
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_queue::topics;
use crewlet_store::{ConfigRevision, NewRevision, StoreError};
use serde::Serialize;
use serde_json::{Map, Value};
use tracing::{info, warn};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::auth::{AdminAccess, Caller};
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::routes::body;
use crate::state::ApiState;

/// Where a PUT body comes from, in problems.
const BODY_SOURCE: &str = "request body";
/// Longest summary kept.
const MAX_SUMMARY: usize = 500;
/// Body types `PUT /config` reads (YAML, or JSON which is YAML too).
const BODY_TYPES: [&str; 5] = [
    "application/yaml",
    "application/x-yaml",
    "text/yaml",
    "text/x-yaml",
    "application/json",
];
/// `GET /config/revisions` and `/config/audit`: default and largest page.
const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;

/// Times as the original engine writes them (`+00:00`, microseconds).
fn iso(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, false)
}

/// A revision without its payload: the original engine's record
/// (`revision_id` ... `activated_at`), then ours (`revision_number`,
/// `parent_revision_number`, `company`).
#[derive(Debug, Serialize, ToSchema)]
pub struct RevisionRecord {
    /// The revision's id (uuid): what `If-Match`, `ETag` and the
    /// `/config/revisions/{id}` paths take.
    pub revision_id: Uuid,
    pub parent_revision_id: Option<Uuid>,
    /// RFC 3339, `+00:00`.
    pub created_at: String,
    /// `api:{token id}` for revisions written through the API.
    pub created_by: String,
    /// `api` (PUT /config), `api.revert`, `cli-import`, ...
    pub source: String,
    pub summary: String,
    pub is_active: bool,
    pub activated_at: Option<String>,
    /// The revision's number: its place in the history (also accepted
    /// wherever a revision id is).
    pub revision_number: i64,
    pub parent_revision_number: Option<i64>,
    /// The company's `name` in this revision.
    pub company: Option<String>,
}

impl From<&ConfigRevision> for RevisionRecord {
    fn from(r: &ConfigRevision) -> Self {
        Self {
            revision_id: r.uuid,
            parent_revision_id: r.parent_uuid,
            created_at: iso(r.created_at),
            created_by: r.created_by.clone(),
            source: r.source.clone(),
            summary: r.summary.clone(),
            is_active: r.is_active,
            activated_at: r.activated_at.map(iso),
            revision_number: r.revision_id,
            parent_revision_number: r.parent_revision_id,
            company: r
                .payload
                .get("name")
                .and_then(|n| n.as_str())
                .map(str::to_owned),
        }
    }
}

/// `GET /config/revisions/{id}`: the record and the company.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevisionDetail {
    #[serde(flatten)]
    pub record: RevisionRecord,
    /// The company, as stored (JSON).
    #[schema(value_type = Object)]
    pub payload: Value,
}

/// `GET /config/audit`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevisionAudit {
    pub revisions: Vec<RevisionRecord>,
}

/// One change between two revisions.
#[derive(Debug, PartialEq, Serialize, ToSchema)]
pub struct DiffEntry {
    /// `add`, `remove` or `replace`.
    pub op: &'static str,
    /// JSON-pointer-like path, e.g. `/units/0/name` (lists are compared whole).
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub old: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub new: Option<Value>,
}

/// `GET /config/revisions/{id}/diff`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevisionDiff {
    /// The revision compared against (`against`).
    pub from: Uuid,
    /// The revision in the path.
    pub to: Uuid,
    pub changes: Vec<DiffEntry>,
}

fn wants_yaml(headers: &HeaderMap, query: &HashMap<String, String>) -> bool {
    if let Some(format) = query.get("format") {
        return format.eq_ignore_ascii_case("yaml");
    }
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("yaml"))
}

fn etag(revision: &ConfigRevision) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{}\"", revision.uuid))
        .unwrap_or(HeaderValue::from_static("\"0\""))
}

fn with_etag(mut response: Response, revision: &ConfigRevision) -> Response {
    response.headers_mut().insert(header::ETAG, etag(revision));
    response
}

fn no_active_revision() -> HttpError {
    HttpError::new(
        StatusCode::NOT_FOUND,
        "no_active_revision",
        "no company revision is active; import one with `crewlet config import` or PUT /config",
    )
}

fn revision_not_found(id: &str) -> HttpError {
    HttpError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("config revision `{id}` not found"),
    )
}

/// A revision named in a path or query: its uuid, or (ours) its number.
enum RevisionRef {
    Uuid(Uuid),
    Number(i64),
}

fn revision_ref(text: &str, code: &'static str) -> HttpResult<RevisionRef> {
    let text = text.trim();
    if let Ok(uuid) = Uuid::parse_str(text) {
        return Ok(RevisionRef::Uuid(uuid));
    }
    text.parse::<i64>().map(RevisionRef::Number).map_err(|_| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            code,
            format!("`{text}` is not a revision id (a uuid, or a revision number)"),
        )
    })
}

async fn find(state: &ApiState, id: &RevisionRef) -> HttpResult<Option<ConfigRevision>> {
    let configs = &state.inner().stores.config;
    Ok(match id {
        RevisionRef::Uuid(u) => configs.get_by_uuid(*u).await?,
        RevisionRef::Number(n) => configs.get(*n).await?,
    })
}

/// `If-Match`: `none`, `*`, a revision uuid or (ours) number, either
/// optionally quoted as an entity tag (`"…"`, `W/"…"`).
enum IfMatch {
    None,
    Any,
    Uuid(Uuid),
    Number(i64),
    /// Names no revision: never matches.
    Other,
}

fn if_match(headers: &HeaderMap) -> Option<(IfMatch, String)> {
    let value = headers.get(header::IF_MATCH)?;
    let raw = String::from_utf8_lossy(value.as_bytes()).trim().to_owned();
    let bare = raw.trim_start_matches("W/").trim_matches('"').trim();
    let parsed = if bare.eq_ignore_ascii_case("none") {
        IfMatch::None
    } else if bare == "*" {
        IfMatch::Any
    } else if let Ok(u) = Uuid::parse_str(bare) {
        IfMatch::Uuid(u)
    } else if let Ok(n) = bare.parse::<i64>() {
        IfMatch::Number(n)
    } else {
        IfMatch::Other
    };
    Some((parsed, raw))
}

fn revision_advanced(current: Option<&ConfigRevision>, your_base: Option<String>) -> HttpError {
    let mut e = HttpError::new(
        StatusCode::CONFLICT,
        "revision_advanced",
        format!(
            "the active revision is {}, not the one the edit is based on; GET /config and retry",
            current.map_or_else(|| "none".to_owned(), |r| r.uuid.to_string())
        ),
    );
    let extra = e.extra_mut();
    extra.current_revision_id =
        Some(current.map_or(Value::Null, |r| Value::String(r.uuid.to_string())));
    extra.your_base = Some(your_base.map_or(Value::Null, Value::String));
    e
}

/// `If-Match` against the active revision: 409 `revision_advanced` when it
/// names another, 412 when it names one but none is active.
fn check_precondition(
    wanted: Option<(IfMatch, String)>,
    active: Option<&ConfigRevision>,
) -> HttpResult<()> {
    let Some((wanted, raw)) = wanted else {
        return Ok(());
    };
    let Some(active) = active else {
        return match wanted {
            IfMatch::None => Ok(()),
            _ => Err(HttpError::new(
                StatusCode::PRECONDITION_FAILED,
                "if_match_must_be_none_when_unconfigured",
                format!("If-Match `{raw}` names a revision but none is active yet"),
            )
            .hint("send `If-Match: none` (or no If-Match) for the first revision")),
        };
    };
    let matches = match wanted {
        IfMatch::Any => true,
        IfMatch::Uuid(u) => u == active.uuid,
        IfMatch::Number(n) => n == active.revision_id,
        IfMatch::None | IfMatch::Other => false,
    };
    if matches {
        Ok(())
    } else {
        Err(revision_advanced(Some(active), Some(raw)))
    }
}

fn clip(text: &str) -> String {
    text.trim().chars().take(MAX_SUMMARY).collect()
}

fn header_summary(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-summary")
        .map(|v| clip(&String::from_utf8_lossy(v.as_bytes())))
        .filter(|s| !s.is_empty())
}

fn summary_required() -> HttpError {
    HttpError::new(
        StatusCode::BAD_REQUEST,
        "summary_required",
        "PUT /config needs a summary of the change",
    )
    .hint("Full-doc PUT /config requires an audit summary. Pass it in the 'X-Summary' header or a top-level '_summary' key in the body.")
}

fn invalid_body(reason: impl Into<String>) -> HttpError {
    let reason = reason.into();
    HttpError::new(StatusCode::BAD_REQUEST, "invalid_body", reason.clone()).detail(reason)
}

fn validation_error(problems: Vec<Problem>) -> HttpError {
    let detail = problems
        .iter()
        .map(|p| {
            if p.path.is_empty() {
                p.message.clone()
            } else {
                format!("{}: {}", p.path, p.message)
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    HttpError::new(
        StatusCode::BAD_REQUEST,
        "validation_error",
        format!(
            "the company configuration has {} problem{}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        ),
    )
    .detail(detail)
    .with_problems(problems)
}

/// `Content-Type` must be one of [`BODY_TYPES`] (parameters such as
/// `charset` are ignored), else 415. A body without one is read as YAML.
fn check_content_type(headers: &HeaderMap) -> HttpResult<()> {
    let unsupported = |what: String| {
        HttpError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "{what}; PUT /config reads a company as YAML or JSON: send Content-Type {}",
                BODY_TYPES.join(", ")
            ),
        )
    };
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = value
        .to_str()
        .map_err(|_| unsupported("Content-Type is not text".into()))?;
    let essence = text
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if BODY_TYPES.contains(&essence.as_str()) {
        Ok(())
    } else {
        let shown: String = essence.chars().take(100).collect();
        Err(unsupported(format!(
            "Content-Type `{shown}` is not accepted"
        )))
    }
}

/// What Tier A's `security` refuses in `company`, as a 400 with every problem.
fn check_policy(
    state: &ApiState,
    source: &str,
    text: Option<&str>,
    company: &Company,
) -> HttpResult<()> {
    let problems = state
        .inner()
        .security
        .company_problems(source, text, company);
    if problems.is_empty() {
        return Ok(());
    }
    Err(HttpError::new(
        StatusCode::BAD_REQUEST,
        "not_allowed",
        format!(
            "the company asks for {} thing{} the bootstrap file's `security` block does not allow; nothing was changed",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        ),
    )
    .with_problems(problems))
}

/// After a revision became active: reload, tell the engine, publish an event.
async fn activated(state: &ApiState, revision: &ConfigRevision, caller: &Caller) {
    state.reload_company().await;
    if let Some(engine) = &state.inner().engine {
        engine.config_activated(revision.revision_id);
    }
    info!(
        revision_id = revision.revision_id,
        by = %caller.name(),
        source = %revision.source,
        "company revision activated"
    );
    let event = Event::new(EventType::ConfigRevisionActivated, "api.config")
        .with_summary(format!(
            "company revision {} activated ({})",
            revision.revision_id, revision.summary
        ))
        .with_sender(caller.name())
        .with_trace(TraceContext::new_root())
        .with_payload(serde_json::json!({
            "revision_id": revision.revision_id,
            "parent_revision_id": revision.parent_revision_id,
            "revision_uuid": revision.uuid,
            "parent_revision_uuid": revision.parent_uuid,
            "created_by": revision.created_by,
            "source": revision.source,
            "summary": revision.summary,
        }));
    let topic = topics::events(&event.event_type);
    if let Err(e) = state.inner().queue.publish(&topic, &event).await {
        warn!(error = %e, topic, "cannot publish config_revision_activated");
    }
}

/// The 409 of a write that lost a race: the winner is re-read for the body.
async fn lost_race(state: &ApiState, e: StoreError, your_base: Option<String>) -> HttpError {
    match e {
        StoreError::Conflict { .. } => {
            let current = state.inner().stores.config.active().await.ok().flatten();
            revision_advanced(current.as_ref(), your_base)
        }
        other => other.into(),
    }
}

/// The company of an earlier revision, checked as a new write would be.
fn stored_company(state: &ApiState, target: &ConfigRevision) -> HttpResult<Company> {
    let id = target.uuid;
    let company: Company = serde_json::from_value(target.payload.clone()).map_err(|e| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "validation_error",
            format!("revision {id} is not a company any more"),
        )
        .detail(e.to_string())
    })?;
    company
        .validate()
        .map_err(|e| validation_error(e.problems().to_vec()))?;
    check_policy(state, &format!("revision {id}"), None, &company)?;
    Ok(company)
}

/// The active company revision: JSON by default, YAML with `?format=yaml`
/// (or `Accept: application/yaml`). `ETag` carries the revision id.
#[utoipa::path(get, path = "/config", tag = "config",
    params(("format" = Option<String>, Query, description = "`yaml` for YAML; anything else is JSON")),
    responses(
        (status = 200, description = "the active company (JSON, or YAML)",
            content((Object = "application/json"), (String = "application/yaml")),
            headers(("ETag" = String, description = "the revision id, quoted"))),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_config(
    _: AdminAccess,
    State(state): State<ApiState>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> HttpResult<Response> {
    let active = state
        .inner()
        .stores
        .config
        .active()
        .await?
        .ok_or_else(no_active_revision)?;
    let response = if wants_yaml(&headers, &query) {
        let yaml = serde_saphyr::to_string(&active.payload).map_err(|e| {
            HttpError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "serialize_error",
                format!("cannot write revision {} as yaml: {e}", active.uuid),
            )
        })?;
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/yaml"),
            )],
            yaml,
        )
            .into_response()
    } else {
        Json(&active.payload).into_response()
    };
    Ok(with_etag(response, &active))
}

/// The body of a `PUT /config` as a mapping, parsed as YAML (JSON is YAML).
fn parse_body(text: &str) -> HttpResult<Map<String, Value>> {
    if text.trim().is_empty() {
        return Err(invalid_body("empty request body"));
    }
    match serde_saphyr::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(invalid_body("request body must be a mapping")),
        // The company checker locates the syntax error (line, column).
        Err(e) => {
            let mut err = invalid_body(format!("the request body is not YAML or JSON: {e}"));
            if let Err(problems) = check_company(BODY_SOURCE, text) {
                err = err.with_problems(problems);
            }
            Err(err)
        }
    }
}

/// Replaces the company. The summary is required: `X-Summary`, or a
/// top-level `_summary` key in the body (removed before validation). The
/// body (YAML or JSON) is validated, checked against Tier A's `security`
/// block (MCP programs, `${VAR}` names, outbound hosts), stored as a new
/// revision and activated. `If-Match` (optional) names the revision the
/// edit is based on (`none` when nothing is active yet); a stale one, or a
/// concurrent write, answers 409 `revision_advanced`. Needs the `admin` scope.
#[utoipa::path(put, path = "/config", tag = "config",
    request_body(description = "the company, YAML or JSON", content(
        (String = "application/yaml"), (Object = "application/json"))),
    params(
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on: its uuid (also quoted, `W/\"…\"`, or its number), `*`, or `none` when nothing is active yet"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (required unless the body has `_summary`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`summary_required`; `invalid_body` (empty, not a mapping, not YAML/JSON); `validation_error` (every problem with path and line); `not_allowed` (the `security` block refuses it)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "`revision_advanced`: If-Match is stale or another write won (`current_revision_id`, `your_base`)", body = ErrorBody),
        (status = 412, description = "`if_match_must_be_none_when_unconfigured`: If-Match names a revision but none is active", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_config(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    request: Request,
) -> HttpResult<Response> {
    let (parts, raw) = request.into_parts();
    check_content_type(&parts.headers)?;
    let limits = state.inner().limits;
    let bytes = body::read(
        &parts.headers,
        raw,
        limits.config_body_limit,
        limits.body_timeout,
    )
    .await?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| invalid_body("the request body is not UTF-8 text"))?;
    let mut map = parse_body(text)?;
    let body_summary = map.remove("_summary");
    let summary = header_summary(&parts.headers)
        .or_else(|| {
            body_summary
                .as_ref()
                .and_then(Value::as_str)
                .map(clip)
                .filter(|s| !s.is_empty())
        })
        .ok_or_else(summary_required)?;
    let wanted = if_match(&parts.headers);
    let your_base = wanted.as_ref().map(|(_, raw)| raw.clone());
    let configs = &state.inner().stores.config;
    let active = configs.active().await?;
    check_precondition(wanted, active.as_ref())?;
    // Without `_summary` the text is validated as sent, so problems carry
    // its lines; with it, the mapping without the key is (as JSON).
    let stripped;
    let checked = if body_summary.is_some() {
        stripped = serde_json::to_string_pretty(&Value::Object(map)).map_err(|e| {
            HttpError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "serialize_error",
                e.to_string(),
            )
        })?;
        stripped.as_str()
    } else {
        text
    };
    let company = check_company(BODY_SOURCE, checked)
        .map(|(c, _)| c)
        .map_err(validation_error)?;
    check_policy(&state, BODY_SOURCE, Some(checked), &company)?;
    let payload = serde_json::to_value(&company).map_err(|e| {
        HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "serialize_error",
            e.to_string(),
        )
    })?;
    let created = configs
        .create(NewRevision {
            parent_revision_id: active.as_ref().map(|r| r.revision_id),
            created_by: caller.name(),
            source: "api".into(),
            summary,
            payload,
            activate: true,
        })
        .await;
    let revision = match created {
        Ok(r) => r,
        Err(e) => return Err(lost_race(&state, e, your_base).await),
    };
    activated(&state, &revision, &caller).await;
    Ok(with_etag(
        (StatusCode::CREATED, Json(RevisionRecord::from(&revision))).into_response(),
        &revision,
    ))
}

/// `limit` / `offset` of a query string: a non-negative integer, else `None`.
fn non_negative(query: &HashMap<String, String>, name: &str, default: i64) -> Option<i64> {
    match query.get(name) {
        None => Some(default),
        Some(v) => v.trim().parse::<i64>().ok().filter(|n| *n >= 0),
    }
}

/// Revisions, newest first, without their payloads: a JSON array.
#[utoipa::path(get, path = "/config/revisions", tag = "config",
    params(
        ("limit" = Option<i64>, Query, minimum = 0, description = "how many (default 50; more than 500 is cut to 500)"),
        ("offset" = Option<i64>, Query, minimum = 0, description = "how many of the newest to skip (default 0)")),
    responses((status = 200, body = Vec<RevisionRecord>),
        (status = 400, description = "`invalid_pagination`: `limit` or `offset` is not a non-negative integer", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn revisions(
    _: AdminAccess,
    State(state): State<ApiState>,
    Query(query): Query<HashMap<String, String>>,
) -> HttpResult<Json<Vec<RevisionRecord>>> {
    let bad = || {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "invalid_pagination",
            "`limit` and `offset` must be non-negative integers",
        )
    };
    let limit = non_negative(&query, "limit", DEFAULT_PAGE).ok_or_else(bad)?;
    let offset = non_negative(&query, "offset", 0).ok_or_else(bad)?;
    let limit = u32::try_from(limit.min(MAX_PAGE)).unwrap_or(0);
    let offset = u64::try_from(offset).unwrap_or(0);
    let list = state.inner().stores.config.list_page(limit, offset).await?;
    Ok(Json(list.iter().map(RevisionRecord::from).collect()))
}

/// Recent revision records (no payloads), newest first, in a wrapper object.
#[utoipa::path(get, path = "/config/audit", tag = "config",
    params(("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "how many (default 50)")),
    responses((status = 200, body = RevisionAudit),
        (status = 400, description = "`invalid_limit`: `limit` is not 1..=500", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn audit(
    _: AdminAccess,
    State(state): State<ApiState>,
    Query(query): Query<HashMap<String, String>>,
) -> HttpResult<Json<RevisionAudit>> {
    let limit = match query.get("limit") {
        None => Some(DEFAULT_PAGE),
        Some(v) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n)),
    }
    .ok_or_else(|| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "invalid_limit",
            format!("`limit` must be an integer in 1..={MAX_PAGE}"),
        )
    })?;
    let list = state
        .inner()
        .stores
        .config
        .list_page(u32::try_from(limit).unwrap_or(50), 0)
        .await?;
    Ok(Json(RevisionAudit {
        revisions: list.iter().map(RevisionRecord::from).collect(),
    }))
}

/// One revision, with its payload.
#[utoipa::path(get, path = "/config/revisions/{id}", tag = "config",
    params(("id" = String, Path, description = "the revision id (uuid), or its number")),
    responses((status = 200, body = RevisionDetail),
        (status = 400, description = "`invalid_uuid`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn revision(
    _: AdminAccess,
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> HttpResult<Json<RevisionDetail>> {
    let rev = find(&state, &revision_ref(&id, "invalid_uuid")?)
        .await?
        .ok_or_else(|| revision_not_found(&id))?;
    Ok(Json(RevisionDetail {
        record: RevisionRecord::from(&rev),
        payload: rev.payload,
    }))
}

/// `old` -> `new` as `add` / `remove` / `replace` entries, keys sorted;
/// mappings are descended into, anything else is compared whole.
pub(crate) fn structural_diff(old: &Value, new: &Value, path: &str, out: &mut Vec<DiffEntry>) {
    let empty = Map::new();
    let old_map = old.as_object().unwrap_or(&empty);
    let new_map = new.as_object().unwrap_or(&empty);
    let keys: BTreeSet<&String> = old_map.keys().chain(new_map.keys()).collect();
    for key in keys {
        let sub = format!("{path}/{key}");
        match (old_map.get(key), new_map.get(key)) {
            (Some(o), None) => out.push(DiffEntry {
                op: "remove",
                path: sub,
                old: Some(o.clone()),
                new: None,
            }),
            (None, Some(n)) => out.push(DiffEntry {
                op: "add",
                path: sub,
                old: None,
                new: Some(n.clone()),
            }),
            (Some(o), Some(n)) if o.is_object() && n.is_object() => {
                structural_diff(o, n, &sub, out);
            }
            (Some(o), Some(n)) if o != n => out.push(DiffEntry {
                op: "replace",
                path: sub,
                old: Some(o.clone()),
                new: Some(n.clone()),
            }),
            _ => {}
        }
    }
}

/// What changed from `against` (default: the active revision) to `{id}`.
#[utoipa::path(get, path = "/config/revisions/{id}/diff", tag = "config",
    params(
        ("id" = String, Path, description = "the revision id (uuid), or its number"),
        ("against" = Option<String>, Query, description = "`active` (default), or a revision id")),
    responses((status = 200, body = RevisionDiff),
        (status = 400, description = "`invalid_uuid` or `invalid_against_uuid`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`, `no_active_revision` or `against_not_found`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn diff(
    _: AdminAccess,
    State(state): State<ApiState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> HttpResult<Json<RevisionDiff>> {
    let target = find(&state, &revision_ref(&id, "invalid_uuid")?)
        .await?
        .ok_or_else(|| revision_not_found(&id))?;
    let against = query.get("against").map_or("active", String::as_str);
    let base = if against == "active" {
        state
            .inner()
            .stores
            .config
            .active()
            .await?
            .ok_or_else(no_active_revision)?
    } else {
        find(&state, &revision_ref(against, "invalid_against_uuid")?)
            .await?
            .ok_or_else(|| {
                HttpError::new(
                    StatusCode::NOT_FOUND,
                    "against_not_found",
                    format!("config revision `{against}` not found"),
                )
            })?
    };
    let mut changes = Vec::new();
    structural_diff(&base.payload, &target.payload, "", &mut changes);
    Ok(Json(RevisionDiff {
        from: base.uuid,
        to: target.uuid,
        changes,
    }))
}

/// A new active revision whose payload is `{id}`'s (history stays
/// append-only; `source` is `api.revert`).
async fn revert_to(
    state: &ApiState,
    caller: &Caller,
    id: &str,
    headers: &HeaderMap,
) -> HttpResult<ConfigRevision> {
    let target = find(state, &revision_ref(id, "invalid_uuid")?)
        .await?
        .ok_or_else(|| revision_not_found(id))?;
    stored_company(state, &target)?;
    let configs = &state.inner().stores.config;
    let active = configs.active().await?;
    check_precondition(if_match(headers), active.as_ref())?;
    let summary = header_summary(headers).unwrap_or_else(|| format!("revert to {}", target.uuid));
    let revision = configs
        .revert(target.revision_id, &caller.name(), &summary, "api.revert")
        .await
        .map_err(|e| match e {
            StoreError::Conflict { .. } => HttpError::new(
                StatusCode::CONFLICT,
                "revision_advanced",
                e.to_string(),
            )
            .hint("A concurrent writer activated a new revision. Re-read GET /config and retry the revert."),
            other => other.into(),
        })?;
    activated(state, &revision, caller).await;
    Ok(revision)
}

/// Reverts to an earlier revision: its payload becomes a new active
/// revision. `X-Summary` is optional (default `revert to {id}`); `If-Match`
/// (optional, ours) as for `PUT /config`.
#[utoipa::path(post, path = "/config/revisions/{id}/revert", tag = "config",
    params(
        ("id" = String, Path, description = "the revision to go back to: its id (uuid), or its number"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the revert is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "why")),
    responses(
        (status = 201, description = "the new active revision", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_uuid`; `validation_error` (the old revision is not valid any more); `not_allowed` (the `security` block refuses it)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`revision_advanced`", body = ErrorBody),
        (status = 412, description = "`if_match_must_be_none_when_unconfigured`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn revert(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> HttpResult<Response> {
    let revision = revert_to(&state, &caller, &id, &headers).await?;
    Ok(with_etag(
        (StatusCode::CREATED, Json(RevisionRecord::from(&revision))).into_response(),
        &revision,
    ))
}

/// Ours: `revert`, answering 200 (kept for scripts written against it).
#[utoipa::path(post, path = "/config/revisions/{id}/activate", tag = "config",
    params(
        ("id" = String, Path, description = "the revision to go back to: its id (uuid), or its number"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the revert is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "why")),
    responses(
        (status = 200, description = "the new active revision", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_uuid`; `validation_error`; `not_allowed`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`revision_advanced`", body = ErrorBody),
        (status = 412, description = "`if_match_must_be_none_when_unconfigured`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn activate(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> HttpResult<Response> {
    let revision = revert_to(&state, &caller, &id, &headers).await?;
    Ok(with_etag(
        Json(RevisionRecord::from(&revision)).into_response(),
        &revision,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_descends_mappings_and_compares_the_rest_whole() {
        let old = json!({"name": "A", "org": {"lead": "x", "gone": 1}, "units": [1, 2]});
        let new = json!({"name": "B", "org": {"lead": "x", "new": true}, "units": [1]});
        let mut out = Vec::new();
        structural_diff(&old, &new, "", &mut out);
        let shown: Vec<(&str, &str)> = out.iter().map(|d| (d.op, d.path.as_str())).collect();
        assert_eq!(
            shown,
            vec![
                ("replace", "/name"),
                ("remove", "/org/gone"),
                ("add", "/org/new"),
                ("replace", "/units"),
            ]
        );
        assert_eq!(out[1].old, Some(json!(1)));
        assert_eq!(out[2].new, Some(json!(true)));
    }
}
