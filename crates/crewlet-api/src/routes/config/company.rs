//! `GET /config` (the active company, JSON or YAML) and `PUT /config`
//! (replacing it): the body's type and parsing, the required summary,
//! `If-Match`, validation and the `security` block, then a new active
//! revision.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::input::{BODY_SOURCE, parse_mapping, read_text};
use super::precondition::{check_precondition, if_match};
use super::records::RevisionRecord;
use super::write::{Provenance, checked_company, clip, commit, created, header_summary};
use super::{no_active_revision, with_etag};
use crate::auth::AdminAccess;
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::state::ApiState;

fn wants_yaml(headers: &HeaderMap, query: &HashMap<String, String>) -> bool {
    if let Some(format) = query.get("format") {
        return format.eq_ignore_ascii_case("yaml");
    }
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("yaml"))
}

fn summary_required() -> HttpError {
    HttpError::new(
        StatusCode::BAD_REQUEST,
        "summary_required",
        "PUT /config needs a summary of the change",
    )
    .hint("Full-doc PUT /config requires an audit summary. Pass it in the 'X-Summary' header or a top-level '_summary' key in the body.")
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
    let (headers, text) = read_text(&state, request).await?;
    let mut map = parse_mapping(&text)?;
    let body_summary = map.remove("_summary");
    let summary = header_summary(&headers)
        .or_else(|| {
            body_summary
                .as_ref()
                .and_then(Value::as_str)
                .map(clip)
                .filter(|s| !s.is_empty())
        })
        .ok_or_else(summary_required)?;
    let wanted = if_match(&headers);
    let your_base = wanted.as_ref().map(|(_, raw)| raw.clone());
    let active = state.inner().stores.config.active().await?;
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
        text.as_str()
    };
    let company = checked_company(&state, BODY_SOURCE, checked)?;
    let provenance = Provenance {
        summary,
        origin: "api",
        base: active.as_ref(),
        your_base,
    };
    let revision = commit(&state, &caller, &company, provenance).await?;
    Ok(created(&revision))
}
