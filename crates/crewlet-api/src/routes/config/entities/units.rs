//! `/config/units` and `/config/units/{name}`: org units at any depth, by
//! name.

use std::collections::BTreeSet;

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::Value;

use super::super::records::RevisionRecord;
use super::tree::{find_unit, subtree_names, unit_slot, units};
use super::{
    Edit, active_document, apply, array_at, body_problem, malformed, merged, missing, read_body,
    text_of, updated,
};
use crate::auth::AdminAccess;
use crate::error::{ErrorBody, HttpResult};
use crate::state::ApiState;

/// Every unit's name, at any depth, sorted.
#[utoipa::path(get, path = "/config/units", tag = "config",
    responses(
        (status = 200, description = "the names", body = Vec<String>),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_units(
    _: AdminAccess,
    State(state): State<ApiState>,
) -> HttpResult<Json<Vec<String>>> {
    let doc = active_document(&state).await?;
    let names: BTreeSet<String> = units(&doc)
        .into_iter()
        .filter_map(|(_, u)| text_of(u, "name").map(str::to_owned))
        .collect();
    Ok(Json(names.into_iter().collect()))
}

/// One unit with its roles and sub-units, as stored.
#[utoipa::path(get, path = "/config/units/{name}", tag = "config",
    params(("name" = String, Path, description = "the unit's name (at any depth)")),
    responses(
        (status = 200, description = "the unit", body = Object),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`, `no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_unit(
    _: AdminAccess,
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> HttpResult<Json<Value>> {
    let mut doc = active_document(&state).await?;
    let path = find_unit(&doc, &name).ok_or_else(|| missing(format!("unit `{name}`")))?;
    let (list, index) = unit_slot(&mut doc, &path).ok_or_else(|| malformed("units"))?;
    let unit = list.get_mut(index).ok_or_else(|| malformed("units"))?;
    Ok(Json(unit.take()))
}

/// Adds a top-level unit (with its `roles` and `children`). The body needs
/// a `name` no top-level unit has.
#[utoipa::path(post, path = "/config/units", tag = "config",
    request_body(description = "the unit, YAML or JSON", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: generated, e.g. `Added unit 'QA'`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_body`; `validation_error` (no `name`, a name in use, or the company's problems, located); `not_allowed`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn post_unit(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    request: Request,
) -> HttpResult<Response> {
    let (headers, body) = read_body(&state, request).await?;
    apply(&state, &caller, &headers, |doc| {
        let Some(name) = body.get("name").and_then(Value::as_str).map(str::to_owned) else {
            return Err(body_problem("name", "a unit needs a `name`".into()));
        };
        let top = array_at(doc, "units")?;
        if top
            .iter()
            .any(|u| text_of(u, "name") == Some(name.as_str()))
        {
            return Err(body_problem(
                "name",
                format!("unit `{name}` already exists; PUT /config/units/{name} changes it"),
            ));
        }
        top.push(Value::Object(body));
        Ok(Edit::new(format!("Added unit '{name}'")))
    })
    .await
}

/// Changes a unit at any depth: the body's keys replace the unit's (its
/// `roles` and `children` are replaced whole when given); `name` stays the
/// path's. A name no unit has adds a top-level unit (ours).
#[utoipa::path(put, path = "/config/units/{name}", tag = "config",
    request_body(description = "keys of the unit to set, YAML or JSON", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("name" = String, Path, description = "the unit's name (at any depth)"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: generated, e.g. `Updated unit 'Core' (lead)`)")),
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
pub async fn put_unit(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(name): Path<String>,
    request: Request,
) -> HttpResult<Response> {
    let (headers, mut body) = read_body(&state, request).await?;
    body.insert("name".into(), Value::String(name.clone()));
    apply(&state, &caller, &headers, |doc| {
        let Some(path) = find_unit(doc, &name) else {
            array_at(doc, "units")?.push(Value::Object(body));
            return Ok(Edit::new(format!("Added unit '{name}'")));
        };
        let (list, index) = unit_slot(doc, &path).ok_or_else(|| malformed("units"))?;
        let unit = list.get_mut(index).ok_or_else(|| malformed("units"))?;
        let old = unit.as_object().ok_or_else(|| malformed("units"))?;
        let (new, changed) = merged(old, body);
        *unit = Value::Object(new);
        Ok(Edit::new(updated(&format!("unit '{name}'"), &changed)))
    })
    .await
}

/// Removes a unit with its roles and sub-units. Refused (400
/// `validation_error`) while a `lead`, `manages` or `unit:` elsewhere
/// still names it or one of its roles.
#[utoipa::path(delete, path = "/config/units/{name}", tag = "config",
    params(
        ("name" = String, Path, description = "the unit's name (at any depth)"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: `Removed unit '<name>'`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`validation_error`: the unit or one of its roles is still referenced, or the company's problems (located)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_unit(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> HttpResult<Response> {
    apply(&state, &caller, &headers, |doc| {
        let path = find_unit(doc, &name).ok_or_else(|| missing(format!("unit `{name}`")))?;
        let (list, index) = unit_slot(doc, &path).ok_or_else(|| malformed("units"))?;
        if index >= list.len() {
            return Err(malformed("units"));
        }
        let unit = list.remove(index);
        Ok(Edit::removing(
            format!("Removed unit '{name}'"),
            subtree_names(&unit),
        ))
    })
    .await
}
