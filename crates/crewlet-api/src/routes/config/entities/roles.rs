//! `/config/roles` and `/config/roles/{handle}`: seats, org-wide or in any
//! unit, by handle (or the handle derived from the name).

use std::collections::BTreeSet;

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use crewlet_config::derive_handle;
use serde_json::Value;

use super::super::records::RevisionRecord;
use super::tree::{find_role, list_in, role_handle, role_mut, roles};
use super::{
    Edit, active_document, apply, array_at, body_problem, malformed, merged, missing, read_body,
    text_of, updated,
};
use crate::auth::AdminAccess;
use crate::error::{ErrorBody, HttpResult};
use crate::state::ApiState;

fn label(role: &Value) -> String {
    text_of(role, "name").map_or_else(|| role_handle(role), str::to_owned)
}

/// Every role's handle, org-wide and in units, sorted.
#[utoipa::path(get, path = "/config/roles", tag = "config",
    responses(
        (status = 200, description = "the handles", body = Vec<String>),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_roles(
    _: AdminAccess,
    State(state): State<ApiState>,
) -> HttpResult<Json<Vec<String>>> {
    let doc = active_document(&state).await?;
    let handles: BTreeSet<String> = roles(&doc)
        .into_iter()
        .map(|(_, r)| role_handle(r))
        .filter(|h| !h.is_empty())
        .collect();
    Ok(Json(handles.into_iter().collect()))
}

/// One role, as stored (`${VAR}` references as written).
#[utoipa::path(get, path = "/config/roles/{handle}", tag = "config",
    params(("handle" = String, Path, description = "the role's handle, or the handle its name derives to")),
    responses(
        (status = 200, description = "the role", body = Object),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`, `no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_role(
    _: AdminAccess,
    State(state): State<ApiState>,
    Path(handle): Path<String>,
) -> HttpResult<Json<Value>> {
    let mut doc = active_document(&state).await?;
    let place = find_role(&doc, &handle).ok_or_else(|| missing(format!("role `{handle}`")))?;
    let role = role_mut(&mut doc, &place).ok_or_else(|| missing(format!("role `{handle}`")))?;
    Ok(Json(role.take()))
}

/// Adds an org-wide role (`unit: <name>` places it in a unit). The body
/// needs a `name`; a handle another role has is refused.
#[utoipa::path(post, path = "/config/roles", tag = "config",
    request_body(description = "the role, YAML or JSON", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: generated, e.g. `Added role 'QA'`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_body`; `validation_error` (no `name`, a handle in use, or the company's problems, located); `not_allowed`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn post_role(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    request: Request,
) -> HttpResult<Response> {
    let (headers, body) = read_body(&state, request).await?;
    apply(&state, &caller, &headers, |doc| {
        let Some(name) = body.get("name").and_then(Value::as_str).map(str::to_owned) else {
            return Err(body_problem("name", "a role needs a `name`".into()));
        };
        let handle = match body.get("handle").and_then(Value::as_str) {
            Some(h) if !h.is_empty() => h.to_owned(),
            _ => derive_handle(&name),
        };
        if find_role(doc, &handle).is_some() {
            return Err(body_problem(
                "handle",
                format!("role `{handle}` already exists; PUT /config/roles/{handle} changes it"),
            ));
        }
        array_at(doc, "roles")?.push(Value::Object(body));
        Ok(Edit::new(format!("Added role '{name}'")))
    })
    .await
}

/// Changes a role: the body's keys replace the role's (the others stay).
/// A handle no role has adds an org-wide role with that handle (ours).
#[utoipa::path(put, path = "/config/roles/{handle}", tag = "config",
    request_body(description = "keys of the role to set, YAML or JSON", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("handle" = String, Path, description = "the role's handle, or the handle its name derives to"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: generated, e.g. `Updated role 'CTO' (goal)`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_body`; `validation_error` (located problems); `not_allowed`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_role(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(handle): Path<String>,
    request: Request,
) -> HttpResult<Response> {
    let (headers, mut body) = read_body(&state, request).await?;
    apply(&state, &caller, &headers, |doc| {
        if let Some(place) = find_role(doc, &handle) {
            let role = role_mut(doc, &place).ok_or_else(|| malformed("roles"))?;
            let old = role.as_object().ok_or_else(|| malformed("roles"))?;
            let (new, changed) = merged(old, body);
            *role = Value::Object(new);
            return Ok(Edit::new(updated(
                &format!("role '{}'", label(role)),
                &changed,
            )));
        }
        match body.get("handle").and_then(Value::as_str) {
            Some(h) if !h.is_empty() && h != handle => {
                return Err(body_problem(
                    "handle",
                    format!("`handle` is `{h}` but the path names role `{handle}`"),
                ));
            }
            Some(h) if !h.is_empty() => {}
            _ => {
                let derived = body.get("name").and_then(Value::as_str).map(derive_handle);
                if derived.as_deref() != Some(handle.as_str()) {
                    body.insert("handle".into(), Value::String(handle.clone()));
                }
            }
        }
        let role = Value::Object(body);
        let summary = format!("Added role '{}'", label(&role));
        array_at(doc, "roles")?.push(role);
        Ok(Edit::new(summary))
    })
    .await
}

/// Removes a role. Refused (400 `validation_error`) while a `lead`,
/// `manages` or schedule still names it.
#[utoipa::path(delete, path = "/config/roles/{handle}", tag = "config",
    params(
        ("handle" = String, Path, description = "the role's handle, or the handle its name derives to"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: `Removed role '<name>'`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`validation_error`: the role is still referenced, or the company's problems (located)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_role(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(handle): Path<String>,
    headers: HeaderMap,
) -> HttpResult<Response> {
    apply(&state, &caller, &headers, |doc| {
        let place = find_role(doc, &handle).ok_or_else(|| missing(format!("role `{handle}`")))?;
        let list = list_in(doc, &place.unit, "roles").ok_or_else(|| malformed("roles"))?;
        if place.index >= list.len() {
            return Err(malformed("roles"));
        }
        let role = list.remove(place.index);
        let mut names = vec![role_handle(&role)];
        names.extend(text_of(&role, "name").map(str::to_owned));
        Ok(Edit::removing(
            format!("Removed role '{}'", label(&role)),
            names,
        ))
    })
    .await
}
