//! `/config` and `/config/revisions`: the company configuration, with the
//! original engine's contract (uuid revision ids, `X-Summary` required on a
//! full `PUT`, `If-Match` optimistic concurrency answering `409
//! revision_advanced`, `412` when nothing is active yet, `201` on a write,
//! revert, diff and audit) plus ours (`ETag`, `.../activate`, `Accept:
//! application/yaml`). Every route needs a token with the `admin` scope. A
//! company written here (or reverted to) must also pass Tier A's `security`
//! block: its MCP programs, `${VAR}` names and outbound hosts, else 400
//! `not_allowed` and nothing changes.
//!
//! One file a concept: `records` (what a revision looks like on the
//! wire), `input` (reading a YAML or JSON body), `company` (`GET` / `PUT
//! /config`), `precondition` (`If-Match`), `checks` (validation and the
//! `security` block), `write` (a new revision: checked, stored, activated),
//! `activation` (what follows a new active revision), `revisions`
//! (listing, one revision, audit), `revert` (revert and activate), `diff`
//! (the structural diff) and `entities` (the per-entity routes, which
//! write through `write` too). Here: naming a revision and its `ETag`.

mod activation;
mod checks;
mod company;
mod diff;
pub(crate) mod entities;
mod input;
mod precondition;
mod records;
mod revert;
mod revisions;
mod write;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use crewlet_store::ConfigRevision;
use uuid::Uuid;

use crate::error::{HttpError, HttpResult};
use crate::state::ApiState;

pub use company::{__path_get_config, __path_put_config, get_config, put_config};
pub use diff::{__path_diff, diff};
pub use revert::{__path_activate, __path_revert, activate, revert};
pub use revisions::{__path_audit, __path_revision, __path_revisions, audit, revision, revisions};

fn etag(revision: &ConfigRevision) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{}\"", revision.uuid))
        .unwrap_or(HeaderValue::from_static("\"0\""))
}

fn with_etag(mut response: Response, revision: &ConfigRevision) -> Response {
    response.headers_mut().insert(header::ETAG, etag(revision));
    response
}

fn no_active_revision() -> HttpError {
    HttpError::new(
        StatusCode::NOT_FOUND,
        "no_active_revision",
        "no company revision is active; import one with `crewlet config import` or PUT /config",
    )
}

fn revision_not_found(id: &str) -> HttpError {
    HttpError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("config revision `{id}` not found"),
    )
}

/// A revision named in a path or query: its uuid, or (ours) its number.
enum RevisionRef {
    Uuid(Uuid),
    Number(i64),
}

fn revision_ref(text: &str, code: &'static str) -> HttpResult<RevisionRef> {
    let text = text.trim();
    if let Ok(uuid) = Uuid::parse_str(text) {
        return Ok(RevisionRef::Uuid(uuid));
    }
    text.parse::<i64>().map(RevisionRef::Number).map_err(|_| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            code,
            format!("`{text}` is not a revision id (a uuid, or a revision number)"),
        )
    })
}

async fn find(state: &ApiState, id: &RevisionRef) -> HttpResult<Option<ConfigRevision>> {
    let configs = &state.inner().stores.config;
    Ok(match id {
        RevisionRef::Uuid(u) => configs.get_by_uuid(*u).await?,
        RevisionRef::Number(n) => configs.get(*n).await?,
    })
}
