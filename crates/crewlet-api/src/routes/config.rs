//! `GET /config`, `PUT /config`, `GET /config/revisions`,
//! `POST /config/revisions/{id}/activate`. Every route needs a token with
//! the `admin` scope. A company written here (or reverted to) must also pass
//! Tier A's `security` block: its MCP programs, `${VAR}` names and outbound
//! hosts, else 400 `not_allowed` and nothing changes.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use crewlet_config::{Company, check_company};
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_queue::topics;
use crewlet_store::{ConfigRevision, NewRevision, StoreError};
use serde::{Deserialize, Serialize};
use tracing::{info, warn};
use utoipa::{IntoParams, ToSchema};

use crate::auth::{AdminAccess, Caller};
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::routes::{body, query_error};
use crate::state::ApiState;

/// Where a PUT body comes from, in problems.
const BODY_SOURCE: &str = "request body";
/// Longest `X-Summary` kept.
const MAX_SUMMARY: usize = 500;
/// Body types `PUT /config` reads (YAML, or JSON which is YAML too).
const BODY_TYPES: [&str; 5] = [
    "application/yaml",
    "application/x-yaml",
    "text/yaml",
    "text/x-yaml",
    "application/json",
];

/// A revision without its payload.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevisionSummary {
    pub revision_id: i64,
    pub parent_revision_id: Option<i64>,
    /// `api:{token id}` for revisions written through the API.
    pub created_by: String,
    /// `api`, `revert`, `cli-import`, ...
    pub source: String,
    pub summary: String,
    pub is_active: bool,
    pub created_at: DateTime<Utc>,
    pub activated_at: Option<DateTime<Utc>>,
    /// The company's `name` in this revision.
    pub company: Option<String>,
}

impl From<&ConfigRevision> for RevisionSummary {
    fn from(r: &ConfigRevision) -> Self {
        Self {
            revision_id: r.revision_id,
            parent_revision_id: r.parent_revision_id,
            created_by: r.created_by.clone(),
            source: r.source.clone(),
            summary: r.summary.clone(),
            is_active: r.is_active,
            created_at: r.created_at,
            activated_at: r.activated_at,
            company: r
                .payload
                .get("name")
                .and_then(|n| n.as_str())
                .map(str::to_owned),
        }
    }
}

/// `GET /config/revisions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevisionList {
    pub revisions: Vec<RevisionSummary>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RevisionsParams {
    /// How many, newest first (default 50); any other value is cut to 1..=500.
    #[param(value_type = Option<i64>, minimum = 0, maximum = 4294967295_u32)]
    pub limit: Option<u32>,
}

fn wants_yaml(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("yaml"))
}

fn etag(revision_id: i64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{revision_id}\""))
        .unwrap_or(HeaderValue::from_static("\"0\""))
}

fn not_configured() -> HttpError {
    HttpError::not_found(
        "no company revision is active; import one with `crewlet config import` or PUT /config",
    )
}

/// `If-Match`: `3`, `"3"`, `W/"3"` or `*`. `Ok(None)` when absent.
fn if_match(headers: &HeaderMap) -> HttpResult<Option<IfMatch>> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| HttpError::bad_request("If-Match is not text"))?
        .trim();
    if text == "*" {
        return Ok(Some(IfMatch::Any));
    }
    let bare = text.trim_start_matches("W/").trim_matches('"');
    bare.parse::<i64>()
        .map(|id| Some(IfMatch::Revision(id)))
        .map_err(|_| {
            HttpError::bad_request(format!(
                "If-Match `{text}` is not a revision id (GET /config answers it in ETag)"
            ))
        })
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

enum IfMatch {
    Any,
    Revision(i64),
}

fn check_precondition(wanted: Option<IfMatch>, active: Option<i64>) -> HttpResult<()> {
    let stale = |want: String| {
        let active = active.map_or_else(|| "none".to_owned(), |a| a.to_string());
        HttpError::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition_failed",
            format!(
                "If-Match names revision {want} but the active revision is {active}; GET /config and retry"
            ),
        )
    };
    match wanted {
        None => Ok(()),
        Some(IfMatch::Any) if active.is_some() => Ok(()),
        Some(IfMatch::Any) => Err(stale("*".into())),
        Some(IfMatch::Revision(id)) if Some(id) == active => Ok(()),
        Some(IfMatch::Revision(id)) => Err(stale(id.to_string())),
    }
}

fn summary(headers: &HeaderMap, default: String) -> String {
    let text = headers
        .get("x-summary")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or(default);
    text.chars().take(MAX_SUMMARY).collect()
}

fn conflict(e: StoreError) -> HttpError {
    match e {
        StoreError::Conflict { .. } => {
            HttpError::new(StatusCode::CONFLICT, "conflict", e.to_string())
        }
        other => other.into(),
    }
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
            "created_by": revision.created_by,
            "source": revision.source,
            "summary": revision.summary,
        }));
    let topic = topics::events(&event.event_type);
    if let Err(e) = state.inner().queue.publish(&topic, &event).await {
        warn!(error = %e, topic, "cannot publish config_revision_activated");
    }
}

fn with_etag(mut response: Response, revision_id: i64) -> Response {
    response
        .headers_mut()
        .insert(header::ETAG, etag(revision_id));
    response
}

/// The active company revision: JSON by default, YAML when `Accept` names
/// YAML. `ETag` carries the revision id for `If-Match`.
#[utoipa::path(get, path = "/config", tag = "config",
    responses(
        (status = 200, description = "the active company (JSON, or YAML with Accept: application/yaml)",
            content((Object = "application/json"), (String = "application/yaml")),
            headers(("ETag" = String, description = "the revision id, quoted"))),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "no active revision", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_config(
    _: AdminAccess,
    State(state): State<ApiState>,
    headers: HeaderMap,
) -> HttpResult<Response> {
    let active = state
        .inner()
        .stores
        .config
        .active()
        .await?
        .ok_or_else(not_configured)?;
    let response = if wants_yaml(&headers) {
        let yaml = serde_saphyr::to_string(&active.payload).map_err(|e| {
            HttpError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "serialize_error",
                format!("cannot write revision {} as yaml: {e}", active.revision_id),
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
        Json(active.payload).into_response()
    };
    Ok(with_etag(response, active.revision_id))
}

/// Replaces the company: validates the YAML (or JSON) body, checks it
/// against Tier A's `security` block (MCP programs, `${VAR}` names, outbound
/// hosts), stores it as a new revision and activates it. `If-Match` must
/// name the active revision (412 otherwise); a concurrent write answers 409.
/// `X-Summary` describes the change. Needs the `admin` scope.
#[utoipa::path(put, path = "/config", tag = "config",
    request_body(description = "the company, YAML or JSON", content(
        (String = "application/yaml"), (Object = "application/json"))),
    params(
        ("If-Match" = Option<String>, Header, nullable = false, pattern = r#"^ *(\*|(W/)?"?[0-9]{1,18}"?) *$"#, description = "the revision the edit is based on: `3`, `\"3\"`, `W/\"3\"` or `*`"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed")),
    responses(
        (status = 200, description = "stored and active", body = RevisionSummary),
        (status = 400, description = "bad YAML or an invalid company (`invalid_config`), or one the `security` block refuses (`not_allowed`): every problem with path and line", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "another write won", body = ErrorBody),
        (status = 412, description = "If-Match is not the active revision", body = ErrorBody),
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
        .map_err(|_| HttpError::bad_request("the request body is not UTF-8 text"))?;
    let company = check_company(BODY_SOURCE, text)
        .map(|(c, _)| c)
        .map_err(|problems| {
            HttpError::new(
                StatusCode::BAD_REQUEST,
                "invalid_config",
                format!(
                    "the company configuration has {} problem{}",
                    problems.len(),
                    if problems.len() == 1 { "" } else { "s" }
                ),
            )
            .with_problems(problems)
        })?;
    check_policy(&state, BODY_SOURCE, Some(text), &company)?;
    let wanted = if_match(&parts.headers)?;
    let configs = &state.inner().stores.config;
    let active = configs.active().await?.map(|r| r.revision_id);
    check_precondition(wanted, active)?;
    let payload = serde_json::to_value(&company).map_err(|e| {
        HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "serialize_error",
            e.to_string(),
        )
    })?;
    let revision = configs
        .create(NewRevision {
            parent_revision_id: active,
            created_by: caller.name(),
            source: "api".into(),
            summary: summary(&parts.headers, "edited through the api".into()),
            payload,
            activate: true,
        })
        .await
        .map_err(conflict)?;
    activated(&state, &revision, &caller).await;
    Ok(with_etag(
        Json(RevisionSummary::from(&revision)).into_response(),
        revision.revision_id,
    ))
}

/// Revisions, newest first, without their payloads.
#[utoipa::path(get, path = "/config/revisions", tag = "config", params(RevisionsParams),
    responses((status = 200, body = RevisionList),
        (status = 400, description = "`limit` is not a number", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn revisions(
    _: AdminAccess,
    State(state): State<ApiState>,
    params: Result<Query<RevisionsParams>, QueryRejection>,
) -> HttpResult<Json<RevisionList>> {
    let Query(p) = params.map_err(query_error)?;
    let limit = p.limit.unwrap_or(50).clamp(1, 500);
    let list = state.inner().stores.config.list(limit).await?;
    Ok(Json(RevisionList {
        revisions: list.iter().map(RevisionSummary::from).collect(),
    }))
}

/// Reverts to an earlier revision: its payload is appended as a new active
/// revision (history stays append-only). Optional `If-Match` as for `PUT`.
#[utoipa::path(post, path = "/config/revisions/{id}/activate", tag = "config",
    params(
        ("id" = i64, Path, description = "the revision to go back to"),
        ("If-Match" = Option<String>, Header, nullable = false, pattern = r#"^ *(\*|(W/)?"?[0-9]{1,18}"?) *$"#, description = "the revision the revert is based on: `3`, `\"3\"`, `W/\"3\"` or `*`"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "why")),
    responses(
        (status = 200, description = "the new active revision", body = RevisionSummary),
        (status = 400, description = "the old revision is not valid any more, or the `security` block refuses it", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody),
        (status = 412, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn activate(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> HttpResult<Response> {
    let id: i64 = id
        .parse()
        .map_err(|_| HttpError::bad_request(format!("revision id `{id}` is not a number")))?;
    let configs = &state.inner().stores.config;
    let target = configs
        .get(id)
        .await?
        .ok_or_else(|| HttpError::not_found(format!("config revision `{id}` not found")))?;
    let company: Company = serde_json::from_value(target.payload.clone()).map_err(|e| {
        HttpError::bad_request(format!("revision {id} is not a company any more: {e}"))
    })?;
    company.validate().map_err(|e| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "invalid_config",
            format!("revision {id} is not valid any more"),
        )
        .with_problems(e.problems().to_vec())
    })?;
    check_policy(&state, &format!("revision {id}"), None, &company)?;
    let active = configs.active().await?.map(|r| r.revision_id);
    check_precondition(if_match(&headers)?, active)?;
    let revision = configs
        .revert(
            id,
            &caller.name(),
            &summary(&headers, format!("revert to revision {id}")),
        )
        .await
        .map_err(conflict)?;
    activated(&state, &revision, &caller).await;
    Ok(with_etag(
        (StatusCode::OK, Json(RevisionSummary::from(&revision))).into_response(),
        revision.revision_id,
    ))
}
