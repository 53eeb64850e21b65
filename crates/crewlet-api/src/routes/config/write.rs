//! Writing a new company revision, shared by `PUT /config` and the
//! per-entity routes: the summary, validation (exactly `crewlet validate`)
//! and Tier A's `security` block, the store (a lost race is 409
//! `revision_advanced`), activation, and the 201 answer.

use axum::Json;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use crewlet_config::{Company, check_company};
use crewlet_store::{ConfigRevision, NewRevision};

use super::activation::activated;
use super::checks::{check_policy, validation_error};
use super::precondition::lost_race;
use super::records::RevisionRecord;
use super::with_etag;
use crate::auth::Caller;
use crate::error::{HttpError, HttpResult};
use crate::state::ApiState;

/// Longest summary kept.
const MAX_SUMMARY: usize = 500;

pub(super) fn clip(text: &str) -> String {
    text.trim().chars().take(MAX_SUMMARY).collect()
}

/// `X-Summary`, clipped; `None` when absent or blank.
pub(super) fn header_summary(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-summary")
        .map(|v| clip(&String::from_utf8_lossy(v.as_bytes())))
        .filter(|s| !s.is_empty())
}

/// The company `text` describes, validated exactly like `crewlet validate`
/// (400 `validation_error` with every located problem, `source` naming the
/// text) and allowed by the `security` block (400 `not_allowed`).
pub(super) fn checked_company(state: &ApiState, source: &str, text: &str) -> HttpResult<Company> {
    let company = check_company(source, text)
        .map(|(c, _)| c)
        .map_err(validation_error)?;
    check_policy(state, source, Some(text), &company)?;
    Ok(company)
}

/// What a new revision records besides its company.
pub(super) struct Provenance<'a> {
    pub summary: String,
    /// The revision's `source`: `api` (`PUT /config`), `api.entity`.
    pub origin: &'static str,
    /// The revision the edit is based on (the active one, if any): the new
    /// revision's parent; another becoming active first loses the write.
    pub base: Option<&'a ConfigRevision>,
    /// The `If-Match` sent, echoed by a 409.
    pub your_base: Option<String>,
}

/// Stores a checked company as the new active revision and runs what
/// follows an activation (reload, engine, `config_revision_activated`).
pub(super) async fn commit(
    state: &ApiState,
    caller: &Caller,
    company: &Company,
    provenance: Provenance<'_>,
) -> HttpResult<ConfigRevision> {
    let payload = serde_json::to_value(company).map_err(|e| {
        HttpError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "serialize_error",
            e.to_string(),
        )
    })?;
    let created = state
        .inner()
        .stores
        .config
        .create(NewRevision {
            parent_revision_id: provenance.base.map(|r| r.revision_id),
            created_by: caller.name(),
            source: provenance.origin.into(),
            summary: provenance.summary,
            payload,
            activate: true,
        })
        .await;
    let revision = match created {
        Ok(r) => r,
        Err(e) => return Err(lost_race(state, e, provenance.your_base).await),
    };
    activated(state, &revision, caller).await;
    Ok(revision)
}

/// 201 with the new revision's record and its `ETag`.
pub(super) fn created(revision: &ConfigRevision) -> Response {
    with_etag(
        (StatusCode::CREATED, Json(RevisionRecord::from(revision))).into_response(),
        revision,
    )
}
