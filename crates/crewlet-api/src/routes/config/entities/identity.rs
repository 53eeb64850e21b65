//! `/config/identity`: the company's `name`, `mission`, `vision` and
//! `policies`.

use axum::Json;
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::Value;

use super::super::records::RevisionRecord;
use crate::auth::AdminAccess;
use crate::error::{ErrorBody, HttpResult};
use crate::state::ApiState;

const FIELDS: [&str; 4] = ["name", "mission", "vision", "policies"];

/// The company's identity: `name`, `mission` and `vision` (when set),
/// `policies`.
#[utoipa::path(get, path = "/config/identity", tag = "config",
    responses(
        (status = 200, description = "`{name, mission?, vision?, policies}`", body = Object),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_identity(
    _: AdminAccess,
    State(state): State<ApiState>,
) -> HttpResult<Json<Value>> {
    Ok(Json(super::top_level::read(&state, &FIELDS).await?))
}

/// Sets the identity keys the body has (the others stay; `null` unsets
/// `mission` or `vision`). Any other key is refused.
#[utoipa::path(put, path = "/config/identity", tag = "config",
    request_body(description = "some of `name`, `mission`, `vision`, `policies`, YAML or JSON", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: generated, e.g. `Updated identity (mission, vision)`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_body`; `validation_error` (a key that is not identity, or the company's problems, located)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_identity(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    request: Request,
) -> HttpResult<Response> {
    super::top_level::write(
        &state,
        &caller,
        request,
        &FIELDS,
        "identity",
        "PUT /config changes the rest",
    )
    .await
}
