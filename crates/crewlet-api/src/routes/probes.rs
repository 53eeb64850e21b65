//! `GET /health` and `GET /ready`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use crate::state::ApiState;

/// `GET /health`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: &'static str,
}

/// `GET /ready`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    pub ready: bool,
    /// The active company revision the API has loaded.
    pub revision_id: Option<i64>,
    /// The revision the engine runs (embedded API only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_revision_id: Option<i64>,
    /// True when the API runs inside the engine process.
    pub embedded: bool,
    pub draining: bool,
    /// Why the API is not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Liveness: 200 while the process serves requests.
#[utoipa::path(get, path = "/health", tag = "probes",
    responses((status = 200, description = "alive", body = Health)))]
pub async fn health() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: 503 until a company revision is active (and, embedded, the
/// engine runs it) and while draining.
#[utoipa::path(get, path = "/ready", tag = "probes",
    responses(
        (status = 200, description = "configured and taking work", body = Readiness),
        (status = 503, description = "not configured yet, or draining", body = Readiness)))]
pub async fn ready(State(state): State<ApiState>) -> (StatusCode, Json<Readiness>) {
    let inner = state.inner();
    if state.snapshot().is_none() {
        // Not configured yet: look again now rather than wait for the poll.
        inner.company.refresh().await;
    }
    let draining = state.is_draining();
    let revision_id = state.active_revision_id();
    let engine = inner.engine.as_ref();
    let reason = if draining {
        Some("the api is shutting down".to_owned())
    } else if let Some(engine) = engine {
        (!engine.is_ready()).then(|| "the engine has not started a company yet".to_owned())
    } else if revision_id.is_none() {
        Some(inner.company.last_error().unwrap_or_else(|| {
            "no company revision is active; import one with `crewlet config import` or PUT /config"
                .to_owned()
        }))
    } else {
        None
    };
    let body = Readiness {
        ready: reason.is_none(),
        revision_id,
        engine_revision_id: engine.and_then(|e| e.revision_id()),
        embedded: engine.is_some(),
        draining,
        reason,
    };
    let status = if body.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}
