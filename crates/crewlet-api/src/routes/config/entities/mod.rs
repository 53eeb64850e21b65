//! The per-entity routes (`/config/identity`, `/config/roles/{handle}`,
//! ...): the original engine's convenience edits of the active company.
//! Each write applies one edit to the active revision's document, then goes
//! through the same path as `PUT /config` (`write`): validation exactly
//! like `crewlet validate`, the `security` block, a new active revision
//! (source `api.entity`) and its activation. `If-Match` is honoured as on
//! `PUT /config`; `X-Summary` is optional (a summary of the edit is
//! generated). Reads answer the stored document, `${VAR}` references as
//! written (never expanded).
//!
//! Here: the shared flow. One file an entity kind: `identity`, `sections`
//! (turn engine, learning, embeddings), `providers`, `integrations`,
//! `mcp_servers`, `roles`, `units`; `tree` finds roles and units.

pub(crate) mod budgets;
pub(crate) mod identity;
pub(crate) mod integrations;
pub(crate) mod mcp_servers;
pub(crate) mod providers;
pub(crate) mod roles;
pub(crate) mod sections;
mod top_level;
mod tree;
pub(crate) mod units;

use std::collections::HashSet;

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use crewlet_config::{Company, Problem};
use serde_json::{Map, Value};

use super::input::{BODY_SOURCE, parse_mapping, read_text};
use super::no_active_revision;
use super::precondition::{check_precondition, if_match};
use super::write::{Provenance, checked_company, commit, created, header_summary};
use crate::auth::Caller;
use crate::error::{HttpError, HttpResult};
use crate::state::ApiState;

/// Where the problems of an edited company are: paths are the company's
/// (`units[0].roles[1].llm`), in no text the client sent, so without lines.
const EDITED: &str = "company after the edit";

/// What an edit did: its generated summary, and for a delete the names it
/// removed.
pub(super) struct Edit {
    summary: String,
    removed: Vec<String>,
}

impl Edit {
    fn new(summary: String) -> Self {
        Self {
            summary,
            removed: Vec::new(),
        }
    }

    /// A delete: references to `names` left behind refuse the write.
    fn removing(summary: String, names: Vec<String>) -> Self {
        Self {
            summary,
            removed: names,
        }
    }
}

/// The active company document, for reads: 404 `no_active_revision`.
async fn active_document(state: &ApiState) -> HttpResult<Map<String, Value>> {
    let active = state
        .inner()
        .stores
        .config
        .active()
        .await?
        .ok_or_else(no_active_revision)?;
    Ok(as_document(active.payload))
}

fn as_document(payload: Value) -> Map<String, Value> {
    match payload {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// The body of an entity write: a mapping, YAML or JSON.
async fn read_body(
    state: &ApiState,
    request: Request,
) -> HttpResult<(HeaderMap, Map<String, Value>)> {
    let (headers, text) = read_text(state, request).await?;
    let body = parse_mapping(&text)?;
    Ok((headers, body))
}

fn not_initialised() -> HttpError {
    HttpError::new(
        StatusCode::CONFLICT,
        "company_not_initialised",
        "no company revision is active, so there is nothing to edit",
    )
    .hint("PUT /config first to bootstrap the company.")
}

/// 404 `not_found` for an entity the active company does not have.
fn missing(what: impl std::fmt::Display) -> HttpError {
    HttpError::not_found(format!("{what} not found in the active company")).detail(what.to_string())
}

/// 400 `validation_error` for a body the edit cannot use at all (no
/// `name`, a duplicate), located in the body.
fn body_problem(path: &str, message: String) -> HttpError {
    HttpError::new(StatusCode::BAD_REQUEST, "validation_error", message.clone())
        .detail(format!("{path}: {message}"))
        .with_problems(vec![Problem {
            file: BODY_SOURCE.into(),
            path: path.into(),
            line: None,
            column: None,
            message,
        }])
}

/// A string field of a JSON mapping.
fn text_of<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// The active company's document has `key` of another type than the
/// company's (it was not written by this engine).
fn malformed(key: &str) -> HttpError {
    HttpError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "malformed_revision",
        format!(
            "the active revision's `{key}` is not what a company has there; PUT /config to repair it"
        ),
    )
}

/// The mapping under `key` (created when absent; `null` counts as absent).
fn object_at<'a>(
    doc: &'a mut Map<String, Value>,
    key: &str,
) -> HttpResult<&'a mut Map<String, Value>> {
    let slot = doc.entry(key.to_owned()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut().ok_or_else(|| malformed(key))
}

/// The list under `key` (created when absent; `null` counts as absent).
fn array_at<'a>(doc: &'a mut Map<String, Value>, key: &str) -> HttpResult<&'a mut Vec<Value>> {
    let slot = doc.entry(key.to_owned()).or_insert(Value::Null);
    if slot.is_null() {
        *slot = Value::Array(Vec::new());
    }
    slot.as_array_mut().ok_or_else(|| malformed(key))
}

/// `old` with `body`'s keys over it (the original engine's shallow merge),
/// and the keys whose value changed.
fn merged(old: &Map<String, Value>, body: Map<String, Value>) -> (Map<String, Value>, Vec<String>) {
    let mut out = old.clone();
    let mut changed = Vec::new();
    for (k, v) in body {
        if old.get(&k) != Some(&v) {
            changed.push(k.clone());
        }
        out.insert(k, v);
    }
    (out, changed)
}

/// `Updated role 'CTO' (goal, llm)`.
fn updated(what: &str, changed: &[String]) -> String {
    if changed.is_empty() {
        format!("Updated {what} (no change)")
    } else {
        format!("Updated {what} ({})", changed.join(", "))
    }
}

/// Applies `edit` to the active company and writes the result as a new
/// active revision: 409 `company_not_initialised` when nothing is active,
/// `If-Match` as on `PUT /config`, then the edit's own 400 / 404, then
/// validation, the `security` block and (for a delete) references left
/// behind, each a 400 that changes nothing. 201 with the revision record.
async fn apply<F>(
    state: &ApiState,
    caller: &Caller,
    headers: &HeaderMap,
    edit: F,
) -> HttpResult<Response>
where
    F: FnOnce(&mut Map<String, Value>) -> HttpResult<Edit>,
{
    let active = state
        .inner()
        .stores
        .config
        .active()
        .await?
        .ok_or_else(not_initialised)?;
    let wanted = if_match(headers);
    let your_base = wanted.as_ref().map(|(_, raw)| raw.clone());
    check_precondition(wanted, Some(&active))?;
    let mut doc = as_document(active.payload.clone());
    let done = edit(&mut doc)?;
    let text = serde_json::to_string_pretty(&Value::Object(doc)).map_err(|e| {
        HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "serialize_error",
            e.to_string(),
        )
    })?;
    let company = checked_company(state, EDITED, &text).map_err(unlocated)?;
    if !done.removed.is_empty() {
        still_referenced(&active.payload, &company, &done.removed)?;
    }
    let provenance = Provenance {
        summary: header_summary(headers).unwrap_or(done.summary),
        origin: "api.entity",
        base: Some(&active),
        your_base,
    };
    let revision = commit(state, caller, &company, provenance).await?;
    Ok(created(&revision))
}

/// Problems of an edited company keep their paths and lose their lines
/// (which count lines of a rendering the client never saw).
fn unlocated(mut e: HttpError) -> HttpError {
    if let Some(problems) = e.problems.as_mut() {
        for p in problems {
            p.line = None;
            p.column = None;
        }
    }
    e
}

/// A delete that leaves references to what it removed behind (a seat's
/// `llm`, `mcp_env`, a `lead`, `manages`, `unit: ...`) is refused: the
/// validator reports those as warnings (the original falls back, or
/// ignores them), so a delete compares the company's warnings before and
/// after and refuses those it introduced that name a removed entity.
fn still_referenced(before: &Value, after: &Company, removed: &[String]) -> HttpResult<()> {
    let key = |p: &Problem| (p.path.clone(), p.message.clone());
    let old: HashSet<(String, String)> = serde_json::from_value::<Company>(before.clone())
        .map(|c| c.warnings().iter().map(key).collect())
        .unwrap_or_default();
    let names_one = |message: &str| {
        removed.iter().any(|n| {
            message.contains(&format!("`{n}`")) || message.contains(&format!("`unit: {n}`"))
        })
    };
    let left: Vec<Problem> = after
        .warnings()
        .into_iter()
        .filter(|w| !old.contains(&key(w)) && names_one(&w.message))
        .map(|mut w| {
            w.file = EDITED.into();
            w
        })
        .collect();
    if left.is_empty() {
        return Ok(());
    }
    let detail = left
        .iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect::<Vec<_>>()
        .join("; ");
    Err(HttpError::new(
        StatusCode::BAD_REQUEST,
        "validation_error",
        format!(
            "`{}` is still referenced in {} place{}; change or remove those references first, nothing was changed",
            removed.first().map_or("", String::as_str),
            left.len(),
            if left.len() == 1 { "" } else { "s" }
        ),
    )
    .detail(detail)
    .with_problems(left))
}
