//! `/config/llm-providers` and `/config/llm-providers/{key}`: the chat
//! models of `providers.llm`, by key.

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Map, Value};

use super::super::records::RevisionRecord;
use super::{Edit, active_document, apply, missing, object_at, read_body};
use crate::auth::AdminAccess;
use crate::error::{ErrorBody, HttpResult};
use crate::state::ApiState;

fn llm(doc: &Map<String, Value>) -> Option<&Map<String, Value>> {
    doc.get("providers")?.get("llm")?.as_object()
}

/// Every LLM provider's key, sorted.
#[utoipa::path(get, path = "/config/llm-providers", tag = "config",
    responses(
        (status = 200, description = "the keys", body = Vec<String>),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn list_llm_providers(
    _: AdminAccess,
    State(state): State<ApiState>,
) -> HttpResult<Json<Vec<String>>> {
    let doc = active_document(&state).await?;
    let mut keys: Vec<String> = llm(&doc).map_or_else(Vec::new, |m| m.keys().cloned().collect());
    keys.sort();
    Ok(Json(keys))
}

/// One LLM provider, as stored: `api_keys` and other secrets are the
/// `${VAR}` references written, never their values.
#[utoipa::path(get, path = "/config/llm-providers/{key}", tag = "config",
    params(("key" = String, Path, description = "the provider's key in `providers.llm`")),
    responses(
        (status = 200, description = "the provider", body = Object),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`, `no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_llm_provider(
    _: AdminAccess,
    State(state): State<ApiState>,
    Path(key): Path<String>,
) -> HttpResult<Json<Value>> {
    let doc = active_document(&state).await?;
    llm(&doc)
        .and_then(|m| m.get(&key))
        .cloned()
        .map(Json)
        .ok_or_else(|| missing(format!("LLM provider `{key}`")))
}

/// Sets an LLM provider: the body replaces the provider under `key`, or
/// adds it (last).
#[utoipa::path(put, path = "/config/llm-providers/{key}", tag = "config",
    request_body(description = "the provider, YAML or JSON (keep secrets as `${VAR}` references)", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("key" = String, Path, description = "the provider's key in `providers.llm`"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: `Added LLM provider '<key>'` or `Updated LLM provider '<key>'`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_body`; `validation_error` (located problems); `not_allowed` (e.g. a `${VAR}` or host the `security` block does not allow)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_llm_provider(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(key): Path<String>,
    request: Request,
) -> HttpResult<Response> {
    let (headers, body) = read_body(&state, request).await?;
    apply(&state, &caller, &headers, |doc| {
        let llm = object_at(object_at(doc, "providers")?, "llm")?;
        let verb = if llm.contains_key(&key) {
            "Updated"
        } else {
            "Added"
        };
        llm.insert(key.clone(), Value::Object(body));
        Ok(Edit::new(format!("{verb} LLM provider '{key}'")))
    })
    .await
}

/// Removes an LLM provider. Refused (400 `validation_error`) while a seat's
/// `llm` (or `llm_plan`, ...) still names it.
#[utoipa::path(delete, path = "/config/llm-providers/{key}", tag = "config",
    params(
        ("key" = String, Path, description = "the provider's key in `providers.llm`"),
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: `Removed LLM provider '<key>'`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`validation_error`: the provider is still referenced, or the company's problems (located)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_llm_provider(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(key): Path<String>,
    headers: HeaderMap,
) -> HttpResult<Response> {
    apply(&state, &caller, &headers, |doc| {
        let llm = object_at(object_at(doc, "providers")?, "llm")?;
        // `shift_remove`: the first provider is the default one, so the
        // order of the others is kept.
        if llm.shift_remove(&key).is_none() {
            return Err(missing(format!("LLM provider `{key}`")));
        }
        Ok(Edit::removing(
            format!("Removed LLM provider '{key}'"),
            vec![key.clone()],
        ))
    })
    .await
}
