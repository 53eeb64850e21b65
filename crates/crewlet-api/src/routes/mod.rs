//! Every route, collected with `utoipa-axum` so the OpenAPI document is
//! generated from the same handlers the router serves.

pub(crate) mod agents;
pub(crate) mod body;
pub(crate) mod budgets;
pub(crate) mod config;
pub(crate) mod dashboard;
pub(crate) mod events;
pub(crate) mod fleet;
pub(crate) mod memory;
pub(crate) mod probes;
pub(crate) mod schedules;
pub(crate) mod stream;
pub(crate) mod tasks;
pub(crate) mod webhooks;

use axum::extract::Request;
use axum::extract::rejection::QueryRejection;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowOrigin, CorsLayer};
use tracing::Instrument;
use tracing::field::Empty;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crewlet_integrations::RawWebhook;

use crate::error::{ErrorBody, HttpError, ProblemSchema};
use crate::routes::config::entities as entity;
use crate::state::ApiState;

/// The document's fixed parts; paths are added by the router.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Crewlet API",
        description = "Probes, the org and its agents, what agents remember, events and traces, tokens and budgets, the company configuration, and the webhook receivers. Tokens carry nested scopes: `read` (metadata: seats, states, event types, timings, token figures), `read:content` (content too: prompts, responses, tool arguments and results, memory, task text), `operate` (tasks and budgets, and everything `read:content` reads), `admin` (the company configuration, and everything `operate` does). Anonymous callers read metadata only, and only where `api.auth.allow_anonymous_read` allows it (by default on a loopback listener). Content routes answer `x-crewlet-content: hidden` when they left content out. Writes and `/config` need `Authorization: Bearer <token>`; webhooks are verified by their own signatures.",
        license(name = "Apache-2.0")
    ),
    components(schemas(ErrorBody, ProblemSchema, RawWebhook)),
    modifiers(&BearerAuth),
    tags(
        (name = "probes", description = "liveness and readiness"),
        (name = "org", description = "seats, units, tools"),
        (name = "memory", description = "what agent seats remember"),
        (name = "events", description = "the event store"),
        (name = "tokens", description = "token use and budgets"),
        (name = "fleet", description = "the nodes of the fleet and the seats and duties each holds"),
        (name = "config", description = "the company configuration (token required)"),
        (name = "webhooks", description = "inbound webhooks (no bearer auth; signed by the source)"),
        (name = "meta", description = "this document")
    )
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// This document, as JSON.
#[utoipa::path(get, path = "/openapi.json", tag = "meta",
    responses((status = 200, description = "the OpenAPI 3.1 document", body = Object)))]
async fn openapi_json() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        crate::openapi::json(),
    )
        .into_response()
}

/// Every route with its OpenAPI operation.
pub(crate) fn router() -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(probes::health))
        .routes(routes!(probes::ready))
        .routes(routes!(agents::agents))
        .routes(routes!(agents::agent))
        .routes(routes!(memory::agent_memory))
        .routes(routes!(tasks::post_task))
        .routes(routes!(agents::org))
        .routes(routes!(agents::tools))
        .routes(routes!(events::events))
        .routes(routes!(events::event))
        .routes(routes!(events::trace))
        .routes(routes!(events::token_breakdown))
        .routes(routes!(fleet::fleet))
        .routes(routes!(fleet::drain_node))
        .routes(routes!(budgets::budgets))
        .routes(routes!(budgets::reset_budget))
        .routes(routes!(stream::snapshot))
        .routes(routes!(schedules::schedules))
        .routes(routes!(config::get_config, config::put_config))
        .routes(routes!(config::revisions))
        .routes(routes!(config::audit))
        .routes(routes!(config::revision))
        .routes(routes!(config::diff))
        .routes(routes!(config::revert))
        .routes(routes!(config::activate))
        .routes(routes!(
            entity::budgets::get_budgets,
            entity::budgets::put_budgets
        ))
        .routes(routes!(
            entity::identity::get_identity,
            entity::identity::put_identity
        ))
        .routes(routes!(
            entity::sections::get_turn_engine,
            entity::sections::put_turn_engine
        ))
        .routes(routes!(
            entity::sections::get_learning,
            entity::sections::put_learning
        ))
        .routes(routes!(
            entity::sections::get_embeddings,
            entity::sections::put_embeddings
        ))
        .routes(routes!(entity::providers::list_llm_providers))
        .routes(routes!(
            entity::providers::get_llm_provider,
            entity::providers::put_llm_provider,
            entity::providers::delete_llm_provider
        ))
        .routes(routes!(entity::integrations::list_integrations))
        .routes(routes!(
            entity::integrations::get_integration,
            entity::integrations::put_integration,
            entity::integrations::delete_integration
        ))
        .routes(routes!(
            entity::mcp_servers::list_mcp_servers,
            entity::mcp_servers::post_mcp_server
        ))
        .routes(routes!(
            entity::mcp_servers::get_mcp_server,
            entity::mcp_servers::put_mcp_server,
            entity::mcp_servers::delete_mcp_server
        ))
        .routes(routes!(entity::roles::list_roles, entity::roles::post_role))
        .routes(routes!(
            entity::roles::get_role,
            entity::roles::put_role,
            entity::roles::delete_role
        ))
        .routes(routes!(entity::units::list_units, entity::units::post_unit))
        .routes(routes!(
            entity::units::get_unit,
            entity::units::put_unit,
            entity::units::delete_unit
        ))
        .routes(routes!(webhooks::slack_hook))
        .routes(routes!(webhooks::github_hook))
        .routes(routes!(webhooks::github_hook_for_seat))
        .routes(routes!(webhooks::gitlab_hook))
        .routes(routes!(webhooks::gitlab_hook_for_seat))
        .routes(routes!(webhooks::plane_hook))
        .routes(routes!(webhooks::plane_hook_for_seat))
        .routes(routes!(webhooks::jira_hook))
        .routes(routes!(webhooks::jira_hook_for_seat))
        .routes(routes!(webhooks::confluence_hook))
        .routes(routes!(webhooks::confluence_hook_for_seat))
        .routes(routes!(openapi_json))
}

/// A DEBUG `http` span around every request but the webhooks' (a delivery
/// runs in its own `webhook` span, the root of the trace it starts), so a
/// line logged while serving carries the method and path, and the span the
/// status. Costs nothing unless DEBUG is on for `crewlet` (`--debug`).
pub(crate) async fn request_span(request: Request, next: Next) -> Response {
    if request.uri().path().starts_with("/webhooks/") {
        return next.run(request).await;
    }
    let span = tracing::debug_span!(
        target: "crewlet::http",
        "http",
        otel.name = %request.method(),
        otel.kind = "server",
        method = %request.method(),
        path = request.uri().path(),
        status = Empty,
    );
    if span.is_disabled() {
        return next.run(request).await;
    }
    let response = next.run(request).instrument(span.clone()).await;
    span.record("status", i64::from(response.status().as_u16()));
    response
}

/// A bad query string as a JSON 400.
pub(crate) fn query_error(e: QueryRejection) -> HttpError {
    HttpError::bad_request(format!("bad query string: {}", e.body_text()))
}

pub(crate) async fn fallback(uri: Uri) -> HttpError {
    HttpError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no route for `{}`; GET /openapi.json lists them",
            uri.path()
        ),
    )
}

pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> HttpError {
    HttpError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("`{}` does not accept {method}", uri.path()),
    )
}

/// CORS for `api.auth.allowed_origins`; `None` (same origin only) when empty.
pub(crate) fn cors(origins: &[String]) -> Option<CorsLayer> {
    let list: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| match HeaderValue::from_str(o.trim()) {
            Ok(v) => Some(v),
            Err(_) => {
                tracing::warn!(origin = %o, "ignoring an allowed origin that is not a header value");
                None
            }
        })
        .collect();
    if list.is_empty() {
        return None;
    }
    let origin = if origins.iter().any(|o| o.trim() == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(list)
    };
    Some(
        CorsLayer::new()
            .allow_origin(origin)
            .allow_methods([
                Method::GET,
                Method::PUT,
                Method::POST,
                Method::DELETE,
                Method::OPTIONS,
            ])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                header::ACCEPT,
                header::IF_MATCH,
                header::HeaderName::from_static("x-summary"),
            ])
            .expose_headers([
                header::ETAG,
                header::RETRY_AFTER,
                header::HeaderName::from_static(crate::content::CONTENT_HEADER),
            ]),
    )
}
