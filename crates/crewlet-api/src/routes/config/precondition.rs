//! `If-Match` optimistic concurrency: parsing the header, checking it
//! against the active revision, and the 409 `revision_advanced` of a stale
//! base or a write that lost a race.

use axum::http::{HeaderMap, StatusCode, header};
use crewlet_store::{ConfigRevision, StoreError};
use serde_json::Value;
use uuid::Uuid;

use crate::error::{HttpError, HttpResult};
use crate::state::ApiState;

/// `If-Match`: `none`, `*`, a revision uuid or (ours) number, either
/// optionally quoted as an entity tag (`"…"`, `W/"…"`).
pub(super) enum IfMatch {
    None,
    Any,
    Uuid(Uuid),
    Number(i64),
    /// Names no revision: never matches.
    Other,
}

pub(super) fn if_match(headers: &HeaderMap) -> Option<(IfMatch, String)> {
    let value = headers.get(header::IF_MATCH)?;
    let raw = String::from_utf8_lossy(value.as_bytes()).trim().to_owned();
    let bare = raw.trim_start_matches("W/").trim_matches('"').trim();
    let parsed = if bare.eq_ignore_ascii_case("none") {
        IfMatch::None
    } else if bare == "*" {
        IfMatch::Any
    } else if let Ok(u) = Uuid::parse_str(bare) {
        IfMatch::Uuid(u)
    } else if let Ok(n) = bare.parse::<i64>() {
        IfMatch::Number(n)
    } else {
        IfMatch::Other
    };
    Some((parsed, raw))
}

fn revision_advanced(current: Option<&ConfigRevision>, your_base: Option<String>) -> HttpError {
    let mut e = HttpError::new(
        StatusCode::CONFLICT,
        "revision_advanced",
        format!(
            "the active revision is {}, not the one the edit is based on; GET /config and retry",
            current.map_or_else(|| "none".to_owned(), |r| r.uuid.to_string())
        ),
    );
    let extra = e.extra_mut();
    extra.current_revision_id =
        Some(current.map_or(Value::Null, |r| Value::String(r.uuid.to_string())));
    extra.your_base = Some(your_base.map_or(Value::Null, Value::String));
    e
}

/// `If-Match` against the active revision: 409 `revision_advanced` when it
/// names another, 412 when it names one but none is active.
pub(super) fn check_precondition(
    wanted: Option<(IfMatch, String)>,
    active: Option<&ConfigRevision>,
) -> HttpResult<()> {
    let Some((wanted, raw)) = wanted else {
        return Ok(());
    };
    let Some(active) = active else {
        return match wanted {
            IfMatch::None => Ok(()),
            _ => Err(HttpError::new(
                StatusCode::PRECONDITION_FAILED,
                "if_match_must_be_none_when_unconfigured",
                format!("If-Match `{raw}` names a revision but none is active yet"),
            )
            .hint("send `If-Match: none` (or no If-Match) for the first revision")),
        };
    };
    let matches = match wanted {
        IfMatch::Any => true,
        IfMatch::Uuid(u) => u == active.uuid,
        IfMatch::Number(n) => n == active.revision_id,
        IfMatch::None | IfMatch::Other => false,
    };
    if matches {
        Ok(())
    } else {
        Err(revision_advanced(Some(active), Some(raw)))
    }
}

/// The 409 of a write that lost a race: the winner is re-read for the body.
pub(super) async fn lost_race(
    state: &ApiState,
    e: StoreError,
    your_base: Option<String>,
) -> HttpError {
    match e {
        StoreError::Conflict { .. } => {
            let current = state.inner().stores.config.active().await.ok().flatten();
            revision_advanced(current.as_ref(), your_base)
        }
        other => other.into(),
    }
}
