//! `/config/integrations` and `/config/integrations/{kind}`: the company's
//! connection blocks (`integrations.<kind>`), by kind.

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{Map, Value};

use super::super::records::RevisionRecord;
use super::{Edit, active_document, apply, missing, object_at, read_body};
use crate::auth::AdminAccess;
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::state::ApiState;

/// The kinds the routes take, as the original engine's.
const KINDS: [&str; 7] = [
    "confluence",
    "github",
    "gitlab",
    "jira",
    "mattermost",
    "plane",
    "slack",
];

fn known(kind: &str) -> HttpResult<()> {
    if KINDS.contains(&kind) {
        return Ok(());
    }
    let shown: String = kind.chars().take(100).collect();
    Err(HttpError::new(
        StatusCode::NOT_FOUND,
        "unknown_integration",
        format!(
            "`{shown}` is not an integration; the kinds are {}",
            KINDS.join(", ")
        ),
    ))
}

fn blocks(doc: &Map<String, Value>) -> Option<&Map<String, Value>> {
    doc.get("integrations")?.as_object()
}

/// The kinds the active company configures, sorted.
#[utoipa::path(get, path = "/config/integrations", tag = "config",
    responses(
        (status = 200, description = "the configured kinds", body = Vec<String>),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_integrations(
    _: AdminAccess,
    State(state): State<ApiState>,
) -> HttpResult<Json<Vec<String>>> {
    let doc = active_document(&state).await?;
    let configured = blocks(&doc);
    let kinds = KINDS
        .iter()
        .filter(|k| {
            configured
                .and_then(|b| b.get(**k))
                .is_some_and(|v| !v.is_null())
        })
        .map(|k| (*k).to_owned())
        .collect();
    Ok(Json(kinds))
}

/// One integration block, as stored: secrets are the `${VAR}` references
/// written, never their values.
#[utoipa::path(get, path = "/config/integrations/{kind}", tag = "config",
    params(("kind" = String, Path, description = "`confluence`, `github`, `gitlab`, `jira`, `mattermost`, `plane` or `slack`")),
    responses(
        (status = 200, description = "the block", body = Object),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`unknown_integration`, `not_found` (not configured), `no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_integration(
    _: AdminAccess,
    State(state): State<ApiState>,
    Path(kind): Path<String>,
) -> HttpResult<Json<Value>> {
    known(&kind)?;
    let doc = active_document(&state).await?;
    blocks(&doc)
        .and_then(|b| b.get(&kind))
        .filter(|v| !v.is_null())
        .cloned()
        .map(Json)
        .ok_or_else(|| missing(format!("integration `{kind}`")))
}

/// Sets one integration block: the body replaces `integrations.<kind>`.
#[utoipa::path(put, path = "/config/integrations/{kind}", tag = "config",
    request_body(description = "the block, YAML or JSON (keep secrets as `${VAR}` references)", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("kind" = String, Path, description = "`confluence`, `github`, `gitlab`, `jira`, `mattermost`, `plane` or `slack`"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: `Updated integration '<kind>'`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_body`; `validation_error` (located problems, e.g. Confluence and Plane both on); `not_allowed`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`unknown_integration`", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_integration(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(kind): Path<String>,
    request: Request,
) -> HttpResult<Response> {
    known(&kind)?;
    let (headers, body) = read_body(&state, request).await?;
    apply(&state, &caller, &headers, |doc| {
        object_at(doc, "integrations")?.insert(kind.clone(), Value::Object(body));
        Ok(Edit::new(format!("Updated integration '{kind}'")))
    })
    .await
}

/// Removes one integration block (ours: the original has no delete).
#[utoipa::path(delete, path = "/config/integrations/{kind}", tag = "config",
    params(
        ("kind" = String, Path, description = "`confluence`, `github`, `gitlab`, `jira`, `mattermost`, `plane` or `slack`"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: `Removed integration '<kind>'`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`validation_error`: the company's problems without it (located)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`unknown_integration`; `not_found` (not configured)", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_integration(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(kind): Path<String>,
    headers: HeaderMap,
) -> HttpResult<Response> {
    known(&kind)?;
    apply(&state, &caller, &headers, |doc| {
        let blocks = object_at(doc, "integrations")?;
        match blocks.shift_remove(&kind) {
            None | Some(Value::Null) => Err(missing(format!("integration `{kind}`"))),
            Some(_) => Ok(Edit::removing(
                format!("Removed integration '{kind}'"),
                vec![kind.clone()],
            )),
        }
    })
    .await
}
