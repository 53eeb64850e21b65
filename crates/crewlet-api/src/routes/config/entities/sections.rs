//! The company's one-of-a-kind settings blocks, each read and replaced
//! whole: `/config/turn-engine` (`turn_engine`), `/config/learning`
//! (`learning`) and `/config/embeddings` (`providers.embeddings`).

use axum::Json;
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::{Map, Value};

use super::super::records::RevisionRecord;
use super::{Edit, active_document, apply, malformed, missing, object_at, read_body};
use crate::auth::{AdminAccess, Caller};
use crate::error::{ErrorBody, HttpResult};
use crate::state::ApiState;

/// The block at `path` (keys from the document's root).
fn block<'a>(doc: &'a Map<String, Value>, path: &[&str]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    rest.iter()
        .try_fold(doc.get(*first)?, |v, k| v.get(*k))
        .filter(|v| !v.is_null())
}

async fn read(state: &ApiState, path: &[&str], what: &str) -> HttpResult<Json<Value>> {
    let doc = active_document(state).await?;
    block(&doc, path)
        .cloned()
        .map(Json)
        .ok_or_else(|| missing(what))
}

/// Replaces the block at `path` (its parents created when absent) with `body`.
async fn replace(
    state: &ApiState,
    caller: &Caller,
    request: Request,
    path: &'static [&'static str],
    summary: &'static str,
) -> HttpResult<Response> {
    let (headers, body) = read_body(state, request).await?;
    apply(state, caller, &headers, |doc| {
        let Some((last, parents)) = path.split_last() else {
            return Err(malformed("providers"));
        };
        let mut node = doc;
        for key in parents {
            node = object_at(node, key)?;
        }
        node.insert((*last).to_owned(), Value::Object(body));
        Ok(Edit::new(summary.into()))
    })
    .await
}

const TURN_ENGINE: &[&str] = &["turn_engine"];
const LEARNING: &[&str] = &["learning"];
const EMBEDDINGS: &[&str] = &["providers", "embeddings"];

/// The turn engine's limits (`turn_engine`), every key with its value.
#[utoipa::path(get, path = "/config/turn-engine", tag = "config",
    responses(
        (status = 200, description = "`turn_engine`", body = Object),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_turn_engine(
    _: AdminAccess,
    State(state): State<ApiState>,
) -> HttpResult<Json<Value>> {
    read(&state, TURN_ENGINE, "turn_engine").await
}

/// Replaces `turn_engine`: keys the body leaves out take their defaults.
#[utoipa::path(put, path = "/config/turn-engine", tag = "config",
    request_body(description = "the `turn_engine` block, YAML or JSON", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: `Updated turn_engine`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_body`; `validation_error` (located problems, e.g. `turn_engine.max_tool_rounds`)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_turn_engine(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    request: Request,
) -> HttpResult<Response> {
    replace(&state, &caller, request, TURN_ENGINE, "Updated turn_engine").await
}

/// What agents remember between turns (`learning`), every key with its value.
#[utoipa::path(get, path = "/config/learning", tag = "config",
    responses(
        (status = 200, description = "`learning`", body = Object),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_learning(
    _: AdminAccess,
    State(state): State<ApiState>,
) -> HttpResult<Json<Value>> {
    read(&state, LEARNING, "learning").await
}

/// Replaces `learning`: keys the body leaves out take their defaults.
#[utoipa::path(put, path = "/config/learning", tag = "config",
    request_body(description = "the `learning` block, YAML or JSON", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: `Updated learning`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_body`; `validation_error` (located problems, e.g. `learning.reflect.enabled`)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_learning(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    request: Request,
) -> HttpResult<Response> {
    replace(&state, &caller, request, LEARNING, "Updated learning").await
}

/// The embedding model (`providers.embeddings`), as stored (`${VAR}`
/// references as written).
#[utoipa::path(get, path = "/config/embeddings", tag = "config",
    responses(
        (status = 200, description = "`providers.embeddings`", body = Object),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found` (none configured), `no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_embeddings(
    _: AdminAccess,
    State(state): State<ApiState>,
) -> HttpResult<Json<Value>> {
    read(&state, EMBEDDINGS, "providers.embeddings").await
}

/// Replaces `providers.embeddings`.
#[utoipa::path(put, path = "/config/embeddings", tag = "config",
    request_body(description = "the embedding provider, YAML or JSON (keep secrets as `${VAR}` references)", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: `Updated embeddings`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_body`; `validation_error` (located problems, e.g. `providers.embeddings.dimensions`); `not_allowed`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_embeddings(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    request: Request,
) -> HttpResult<Response> {
    replace(&state, &caller, request, EMBEDDINGS, "Updated embeddings").await
}
