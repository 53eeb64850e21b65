//! `/agents`, `/agents/{id}`, `/org`, `/tools`.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use crewlet_config::{Organization, SeatKind};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::ReadAccess;
use crate::engine_view::{AgentView, EngineView, ToolView};
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::routes::query_error;
use crate::state::ApiState;

/// `GET /tools`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolList {
    pub live: bool,
    /// The seat asked for, if any.
    pub handle: Option<String>,
    pub tools: Vec<ToolView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ToolsParams {
    /// Only the tools of this seat.
    pub handle: Option<String>,
}

/// `GET /org`: the organization as a tree.
#[derive(Debug, Serialize, ToSchema)]
pub struct OrgView {
    pub company: String,
    pub revision_id: Option<i64>,
    /// Handles of the org-wide roles (no unit).
    pub roles: Vec<String>,
    /// Top-level units, each with its sub-units.
    pub units: Vec<UnitView>,
    /// Every seat.
    pub seats: Vec<SeatView>,
}

/// A unit and its sub-units.
#[derive(Debug, Serialize, ToSchema)]
pub struct UnitView {
    pub name: String,
    /// The unit's `type`.
    pub kind: String,
    pub path: Vec<String>,
    /// Handle of the effective lead.
    pub lead: Option<String>,
    /// True when the lead comes from a parent unit.
    pub lead_inherited: bool,
    /// Handles of the unit's own seats.
    pub seats: Vec<String>,
    #[schema(no_recursion)]
    pub children: Vec<UnitView>,
}

/// A seat with its place in the org chart.
#[derive(Debug, Serialize, ToSchema)]
pub struct SeatView {
    pub id: String,
    pub handle: String,
    pub name: String,
    /// `agent` or `human`.
    pub kind: String,
    pub unit_path: Vec<String>,
    pub manager: Option<String>,
    /// Managers from the nearest up.
    pub manager_chain: Vec<String>,
    pub reports: Vec<String>,
}

pub(crate) fn not_configured() -> HttpError {
    HttpError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "not_configured",
        "no company revision is active yet; import one with `crewlet config import` or PUT /config",
    )
    .retry_after(15)
}

/// The view to answer from; 503 until a company runs (embedded: until the
/// engine runs one, so `/agents` and `/tools` never answer an empty list
/// that only means "not started yet").
fn view(state: &ApiState) -> HttpResult<Arc<dyn EngineView>> {
    state
        .view()
        .filter(|v| v.organization().is_some())
        .ok_or_else(not_configured)
}

/// A seat as a caller without `read:content` sees it: its running task's
/// text left out.
fn without_content(mut agent: AgentView) -> AgentView {
    if let Some(task) = agent.current_task.as_mut() {
        task.summary.clear();
    }
    agent
}

/// Every agent seat (human seats are only in `/org`), as a JSON array, with
/// live state when the API runs inside the engine; `[]` before a company is
/// active. The running task's text (`current_task.summary`) needs
/// `read:content`.
#[utoipa::path(get, path = "/agents", tag = "org",
    responses(
        (status = 200, body = Vec<AgentView>,
            headers(("x-crewlet-content" = String, description = "`hidden`: content fields were left out (the caller lacks `read:content`); `shown`: nothing was"))),
        (status = 401, body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn agents(ReadAccess(caller): ReadAccess, State(state): State<ApiState>) -> Response {
    let agents: Vec<AgentView> = state
        .view()
        .map(|v| v.agents())
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a.kind != "human")
        .map(|a| {
            if caller.content {
                a
            } else {
                without_content(a)
            }
        })
        .collect();
    (crate::content::header(caller.content), Json(agents)).into_response()
}

pub(crate) fn agent_not_found(id: &str) -> HttpError {
    HttpError::new(
        StatusCode::NOT_FOUND,
        "Agent not found",
        format!("no agent seat with id or handle `{id}`"),
    )
}

/// One agent seat, by agent id (or, ours, handle).
#[utoipa::path(get, path = "/agents/{id}", tag = "org",
    params(("id" = String, Path, description = "agent id (uuid) or handle")),
    responses(
        (status = 200, body = AgentView,
            headers(("x-crewlet-content" = String, description = "`hidden`: content fields were left out; `shown`: nothing was"))),
        (status = 401, body = ErrorBody),
        (status = 404, description = "`Agent not found` (also before a company is active, and for human seats)", body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn agent(
    ReadAccess(caller): ReadAccess,
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> HttpResult<Response> {
    let agent = state
        .view()
        .and_then(|v| v.agent(&id))
        .filter(|a| a.kind != "human")
        .ok_or_else(|| agent_not_found(&id))?;
    let agent = if caller.content {
        agent
    } else {
        without_content(agent)
    };
    Ok((crate::content::header(caller.content), Json(agent)).into_response())
}

/// Tools of every seat, or of one (`?handle=`). Known only inside the engine
/// process: the standalone API answers an empty list with `live: false`.
#[utoipa::path(get, path = "/tools", tag = "org", params(ToolsParams),
    responses(
        (status = 200, body = ToolList),
        (status = 400, description = "a bad query string", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "no seat with that handle", body = ErrorBody),
        (status = 503, description = "no company yet (Retry-After: 15)", body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn tools(
    _: ReadAccess,
    State(state): State<ApiState>,
    params: Result<Query<ToolsParams>, QueryRejection>,
) -> HttpResult<Json<ToolList>> {
    let Query(params) = params.map_err(query_error)?;
    let view = view(&state)?;
    if let Some(h) = &params.handle
        && view.agent(h).is_none()
    {
        return Err(HttpError::not_found(format!("no seat with handle `{h}`")));
    }
    Ok(Json(ToolList {
        live: view.is_live(),
        tools: view.tools(params.handle.as_deref()),
        handle: params.handle,
    }))
}

/// The org chart: units (nested), leads, seats and managers.
#[utoipa::path(get, path = "/org", tag = "org",
    responses(
        (status = 200, body = OrgView),
        (status = 401, body = ErrorBody),
        (status = 503, description = "no company yet (Retry-After: 15)", body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn org(_: ReadAccess, State(state): State<ApiState>) -> HttpResult<Json<OrgView>> {
    let view = view(&state)?;
    let org = view.organization().ok_or_else(not_configured)?;
    Ok(Json(org_view(&org, state.active_revision_id())))
}

fn unit_view(org: &Organization, index: usize) -> Option<UnitView> {
    let u = org.units().get(index)?;
    Some(UnitView {
        name: u.name.clone(),
        kind: u.kind.clone(),
        path: u.path.clone(),
        lead: u.lead.clone(),
        lead_inherited: u.lead_inherited,
        seats: u.seats.clone(),
        children: u
            .children
            .iter()
            .filter_map(|&c| unit_view(org, c))
            .collect(),
    })
}

pub(crate) fn org_view(org: &Organization, revision_id: Option<i64>) -> OrgView {
    OrgView {
        company: org.company().to_owned(),
        revision_id,
        roles: org
            .seats()
            .iter()
            .filter(|s| s.unit.is_none())
            .map(|s| s.handle.clone())
            .collect(),
        units: org
            .units()
            .iter()
            .enumerate()
            .filter(|(_, u)| u.parent.is_none())
            .filter_map(|(i, _)| unit_view(org, i))
            .collect(),
        seats: org
            .seats()
            .iter()
            .map(|s| SeatView {
                id: s.agent_id.to_string(),
                handle: s.handle.clone(),
                name: s.name.clone(),
                kind: match s.kind {
                    SeatKind::Agent => "agent".into(),
                    SeatKind::Human => "human".into(),
                },
                unit_path: s.unit_path.clone(),
                manager: s.manager.clone(),
                manager_chain: s.manager_chain.to_vec(),
                reports: s.reports.clone(),
            })
            .collect(),
    }
}
