//! `POST /config/revisions/{id}/revert` and its older name `.../activate`:
//! an earlier revision's company, checked again, becomes a new active
//! revision.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use crewlet_store::{ConfigRevision, StoreError};

use super::activation::activated;
use super::checks::stored_company;
use super::precondition::{check_precondition, if_match};
use super::records::RevisionRecord;
use super::write::header_summary;
use super::{find, revision_not_found, revision_ref, with_etag};
use crate::auth::{AdminAccess, Caller};
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::state::ApiState;

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
        ("id" = String, Path, pattern = "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9]{1,18})$", description = "the revision to go back to: its id (uuid), or its number"),
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
        ("id" = String, Path, pattern = "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9]{1,18})$", description = "the revision to go back to: its id (uuid), or its number"),
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
