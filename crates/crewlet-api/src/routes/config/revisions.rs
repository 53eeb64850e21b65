//! The revision history: `GET /config/revisions` (paged records),
//! `GET /config/audit` (recent records in a wrapper) and
//! `GET /config/revisions/{id}` (one revision with its company).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;

use super::records::{RevisionAudit, RevisionDetail, RevisionRecord};
use super::{find, revision_not_found, revision_ref};
use crate::auth::AdminAccess;
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::state::ApiState;

/// `GET /config/revisions` and `/config/audit`: default and largest page.
const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;

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
    params(("id" = String, Path, pattern = "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9]{1,18})$", description = "the revision id (uuid), or its number")),
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
