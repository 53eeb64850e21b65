//! `/config/mcp-servers` and `/config/mcp-servers/{name}`: the company's
//! MCP tool servers, by name.

use std::collections::BTreeSet;

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Map, Value};

use super::super::records::RevisionRecord;
use super::{
    Edit, active_document, apply, array_at, body_problem, malformed, merged, missing, read_body,
    text_of, updated,
};
use crate::auth::AdminAccess;
use crate::error::{ErrorBody, HttpResult};
use crate::state::ApiState;

const KEY: &str = "mcp_servers";

fn position(servers: &[Value], name: &str) -> Option<usize> {
    servers
        .iter()
        .position(|s| text_of(s, "name") == Some(name))
}

fn servers(doc: &Map<String, Value>) -> &[Value] {
    doc.get(KEY)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Every MCP server's name, sorted.
#[utoipa::path(get, path = "/config/mcp-servers", tag = "config",
    responses(
        (status = 200, description = "the names", body = Vec<String>),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_mcp_servers(
    _: AdminAccess,
    State(state): State<ApiState>,
) -> HttpResult<Json<Vec<String>>> {
    let doc = active_document(&state).await?;
    let names: BTreeSet<String> = servers(&doc)
        .iter()
        .filter_map(|s| text_of(s, "name").map(str::to_owned))
        .collect();
    Ok(Json(names.into_iter().collect()))
}

/// One MCP server, as stored (`${VAR}` references as written).
#[utoipa::path(get, path = "/config/mcp-servers/{name}", tag = "config",
    params(("name" = String, Path, description = "the server's name")),
    responses(
        (status = 200, description = "the server", body = Object),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`, `no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_mcp_server(
    _: AdminAccess,
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> HttpResult<Json<Value>> {
    let doc = active_document(&state).await?;
    let list = servers(&doc);
    let i = position(list, &name).ok_or_else(|| missing(format!("MCP server `{name}`")))?;
    Ok(Json(list[i].clone()))
}

/// Adds an MCP server. The body needs a `name` no server has.
#[utoipa::path(post, path = "/config/mcp-servers", tag = "config",
    request_body(description = "the server, YAML or JSON", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: `Added MCP server '<name>'`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_body`; `validation_error` (no `name`, a name in use, or the company's problems, located); `not_allowed` (e.g. a program `security.mcp_commands` does not list)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn post_mcp_server(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    request: Request,
) -> HttpResult<Response> {
    let (headers, body) = read_body(&state, request).await?;
    apply(&state, &caller, &headers, |doc| {
        let Some(name) = body.get("name").and_then(Value::as_str).map(str::to_owned) else {
            return Err(body_problem("name", "an MCP server needs a `name`".into()));
        };
        let list = array_at(doc, KEY)?;
        if position(list, &name).is_some() {
            return Err(body_problem(
                "name",
                format!(
                    "MCP server `{name}` already exists; PUT /config/mcp-servers/{name} changes it"
                ),
            ));
        }
        list.push(Value::Object(body));
        Ok(Edit::new(format!("Added MCP server '{name}'")))
    })
    .await
}

/// Changes an MCP server: the body's keys replace the server's (the others
/// stay); `name` stays the path's. A name no server has adds one (ours).
#[utoipa::path(put, path = "/config/mcp-servers/{name}", tag = "config",
    request_body(description = "keys of the server to set, YAML or JSON", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("name" = String, Path, description = "the server's name"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: generated, e.g. `Updated MCP server 'tavily' (env)`)")),
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
pub async fn put_mcp_server(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(name): Path<String>,
    request: Request,
) -> HttpResult<Response> {
    let (headers, mut body) = read_body(&state, request).await?;
    body.insert("name".into(), Value::String(name.clone()));
    apply(&state, &caller, &headers, |doc| {
        let list = array_at(doc, KEY)?;
        let Some(i) = position(list, &name) else {
            list.push(Value::Object(body));
            return Ok(Edit::new(format!("Added MCP server '{name}'")));
        };
        let old = list[i].as_object().ok_or_else(|| malformed(KEY))?;
        let (new, changed) = merged(old, body);
        list[i] = Value::Object(new);
        Ok(Edit::new(updated(
            &format!("MCP server '{name}'"),
            &changed,
        )))
    })
    .await
}

/// Removes an MCP server. Refused (400 `validation_error`) while a seat
/// lists it in `mcp_servers` or has credentials for it in `mcp_env`.
#[utoipa::path(delete, path = "/config/mcp-servers/{name}", tag = "config",
    params(
        ("name" = String, Path, description = "the server's name"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: `Removed MCP server '<name>'`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`validation_error`: the server is still referenced, or the company's problems (located)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_mcp_server(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> HttpResult<Response> {
    apply(&state, &caller, &headers, |doc| {
        let list = array_at(doc, KEY)?;
        let i = position(list, &name).ok_or_else(|| missing(format!("MCP server `{name}`")))?;
        list.remove(i);
        Ok(Edit::removing(
            format!("Removed MCP server '{name}'"),
            vec![name.clone()],
        ))
    })
    .await
}
