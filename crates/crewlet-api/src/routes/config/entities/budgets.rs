//! `/config/budgets`: the org-wide `token_budget` and `budget_policy`
//! (per-unit and per-role budgets are edited with their unit or role).

use axum::Json;
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::Value;

use super::super::records::RevisionRecord;
use crate::auth::AdminAccess;
use crate::error::{ErrorBody, HttpResult};
use crate::state::ApiState;

const FIELDS: [&str; 2] = ["token_budget", "budget_policy"];

/// The company's budget settings: `token_budget` and `budget_policy`
/// (when set).
#[utoipa::path(get, path = "/config/budgets", tag = "config",
    responses(
        (status = 200, description = "`{token_budget?, budget_policy?}`", body = Object),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 404, description = "`no_active_revision`", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn get_budgets(_: AdminAccess, State(state): State<ApiState>) -> HttpResult<Json<Value>> {
    Ok(Json(super::top_level::read(&state, &FIELDS).await?))
}

/// Sets the budget keys the body has, e.g. `{"token_budget": 20000000}`
/// (the other stays; `null` unsets it). Any other key is refused. Raising a
/// spent cap lets its paused seats work again.
#[utoipa::path(put, path = "/config/budgets", tag = "config",
    request_body(description = "some of `token_budget`, `budget_policy`, YAML or JSON", content(
        (Object = "application/json"), (Object = "application/yaml"))),
    params(
        ("If-Match" = Option<String>, Header, nullable = false, description = "the revision the edit is based on, as for PUT /config"),
        ("X-Summary" = Option<String>, Header, nullable = false, description = "what changed (default: generated, e.g. `Updated budgets (token_budget)`)")),
    responses(
        (status = 201, description = "stored and active", body = RevisionRecord,
            headers(("ETag" = String, description = "the new revision id, quoted"))),
        (status = 400, description = "`invalid_body`; `validation_error` (a key that is not a budget setting, or the company's problems, located)", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `admin` scope", body = ErrorBody),
        (status = 409, description = "`company_not_initialised`; `revision_advanced`", body = ErrorBody),
        (status = 413, description = "the body is over 1 MiB", body = ErrorBody),
        (status = 415, description = "Content-Type is not YAML or JSON", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn put_budgets(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    request: Request,
) -> HttpResult<Response> {
    super::top_level::write(
        &state,
        &caller,
        request,
        &FIELDS,
        "budgets",
        "unit and role budgets are set on the unit or role",
    )
    .await
}
