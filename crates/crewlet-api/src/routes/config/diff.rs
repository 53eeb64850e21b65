//! `GET /config/revisions/{id}/diff`: the structural diff between two
//! revisions' companies.

use std::collections::{BTreeSet, HashMap};

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;
use uuid::Uuid;

use super::{find, no_active_revision, revision_not_found, revision_ref};
use crate::auth::AdminAccess;
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::state::ApiState;

/// One change between two revisions.
#[derive(Debug, PartialEq, Serialize, ToSchema)]
pub struct DiffEntry {
    /// `add`, `remove` or `replace`.
    pub op: &'static str,
    /// JSON-pointer-like path, e.g. `/units/0/name` (lists are compared whole).
    pub path: String,
    /// The value before (any JSON value; absent for `add`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<Value>,
    /// The value after (any JSON value; absent for `remove`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<Value>,
}

/// `GET /config/revisions/{id}/diff`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevisionDiff {
    /// The revision compared against (`against`).
    pub from: Uuid,
    /// The revision in the path.
    pub to: Uuid,
    pub changes: Vec<DiffEntry>,
}

/// `old` -> `new` as `add` / `remove` / `replace` entries, keys sorted;
/// mappings are descended into, anything else is compared whole.
pub(crate) fn structural_diff(old: &Value, new: &Value, path: &str, out: &mut Vec<DiffEntry>) {
    let empty = Map::new();
    let old_map = old.as_object().unwrap_or(&empty);
    let new_map = new.as_object().unwrap_or(&empty);
    let keys: BTreeSet<&String> = old_map.keys().chain(new_map.keys()).collect();
    for key in keys {
        let sub = format!("{path}/{key}");
        match (old_map.get(key), new_map.get(key)) {
            (Some(o), None) => out.push(DiffEntry {
                op: "remove",
                path: sub,
                old: Some(o.clone()),
                new: None,
            }),
            (None, Some(n)) => out.push(DiffEntry {
                op: "add",
                path: sub,
                old: None,
                new: Some(n.clone()),
            }),
            (Some(o), Some(n)) if o.is_object() && n.is_object() => {
                structural_diff(o, n, &sub, out);
            }
            (Some(o), Some(n)) if o != n => out.push(DiffEntry {
                op: "replace",
                path: sub,
                old: Some(o.clone()),
                new: Some(n.clone()),
            }),
            _ => {}
        }
    }
}

/// What changed from `against` (default: the active revision) to `{id}`.
#[utoipa::path(get, path = "/config/revisions/{id}/diff", tag = "config",
    params(
        ("id" = String, Path, pattern = "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9]{1,18})$", description = "the revision id (uuid), or its number"),
        ("against" = Option<String>, Query, pattern = "^(active|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9]{1,18})$", description = "`active` (default), or a revision id")),
    responses((status = 200, body = RevisionDiff),
        (status = 400, description = "`invalid_uuid` or `invalid_against_uuid`", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`not_found`, `no_active_revision` or `against_not_found`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn diff(
    _: AdminAccess,
    State(state): State<ApiState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> HttpResult<Json<RevisionDiff>> {
    let target = find(&state, &revision_ref(&id, "invalid_uuid")?)
        .await?
        .ok_or_else(|| revision_not_found(&id))?;
    let against = query.get("against").map_or("active", String::as_str);
    let base = if against == "active" {
        state
            .inner()
            .stores
            .config
            .active()
            .await?
            .ok_or_else(no_active_revision)?
    } else {
        find(&state, &revision_ref(against, "invalid_against_uuid")?)
            .await?
            .ok_or_else(|| {
                HttpError::new(
                    StatusCode::NOT_FOUND,
                    "against_not_found",
                    format!("config revision `{against}` not found"),
                )
            })?
    };
    let mut changes = Vec::new();
    structural_diff(&base.payload, &target.payload, "", &mut changes);
    Ok(Json(RevisionDiff {
        from: base.uuid,
        to: target.uuid,
        changes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_descends_mappings_and_compares_the_rest_whole() {
        let old = json!({"name": "A", "org": {"lead": "x", "gone": 1}, "units": [1, 2]});
        let new = json!({"name": "B", "org": {"lead": "x", "new": true}, "units": [1]});
        let mut out = Vec::new();
        structural_diff(&old, &new, "", &mut out);
        let shown: Vec<(&str, &str)> = out.iter().map(|d| (d.op, d.path.as_str())).collect();
        assert_eq!(
            shown,
            vec![
                ("replace", "/name"),
                ("remove", "/org/gone"),
                ("add", "/org/new"),
                ("replace", "/units"),
            ]
        );
        assert_eq!(out[1].old, Some(json!(1)));
        assert_eq!(out[2].new, Some(json!(true)));
    }
}
