//! `/webhooks/{source}`: verify, dedupe, publish. Never behind bearer auth:
//! each source proves itself with its own signature or token.
//!
//! Status codes (`docs/api.md`, "Webhooks"): no company yet -> 503 + `Retry-After: 15`;
//! missing secret -> 503 + `Retry-After: 300`; bad signature -> 401; bad
//! JSON -> 400; body over the cap -> 413; accepted -> 202 (Slack: 200);
//! a repeated delivery -> 200/202 with `{"duplicate": true}`, nothing published.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use crewlet_integrations::webhook::dedupe::{self, Admission, ClaimStore};
use crewlet_integrations::{
    Inbound, RawWebhook, Source, WebhookError, WebhookRequest, WebhookSource,
};
use crewlet_queue::topics;
use crewlet_store::{StoreError, WebhookDeliveries};
use serde::Serialize;
use tracing::{Instrument, Span, debug, warn};
use utoipa::ToSchema;

use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::routes::body;
use crate::state::ApiState;

/// The answer to an accepted (or ignored, or repeated) webhook.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookAccepted {
    /// True when the delivery was published for routing.
    pub accepted: bool,
    /// True for a delivery already seen: nothing was published.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// Why a verified delivery was not routed (a ping, an unsupported event).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignored: Option<String>,
    /// The published `raw_webhook` event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// The trace the event starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// Slack's `url_verification` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct SlackChallenge {
    pub challenge: String,
}

fn not_configured() -> HttpError {
    HttpError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "not_configured",
        "no company revision is active yet; the webhook will be accepted once one is imported",
    )
    .retry_after(15)
}

fn webhook_error(e: &WebhookError) -> HttpError {
    let status = StatusCode::from_u16(e.status_code()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut err = HttpError::new(status, e.code(), e.to_string());
    err.retry_after = e.retry_after_secs();
    err
}

/// The headers that identify a delivery (each source's
/// [`kept_headers`](WebhookSource::kept_headers)), never a credential.
fn kept_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    crewlet_integrations::webhook::kept_headers()
        .filter_map(|name| {
            let v = headers.get(name)?.to_str().ok()?;
            Some((name.to_owned(), v.to_owned()))
        })
        .collect()
}

/// `(status, body)` of a verified delivery: the source's accepted status
/// (200 for Slack, 202 otherwise).
fn ok(source: &dyn WebhookSource, body: WebhookAccepted) -> Response {
    let status = StatusCode::from_u16(source.accepted_status()).unwrap_or(StatusCode::ACCEPTED);
    (status, Json(body)).into_response()
}

/// The API's webhook-delivery store as the dedupe policy sees it.
struct Deliveries<'a>(&'a dyn WebhookDeliveries);

impl ClaimStore for Deliveries<'_> {
    type Error = StoreError;

    async fn claim(&self, source: &str, key: &str) -> Result<bool, StoreError> {
        self.0.claim(source, key).await
    }

    async fn is_claimed(&self, source: &str, key: &str) -> Result<bool, StoreError> {
        self.0.is_claimed(source, key).await
    }

    async fn release(&self, source: &str, key: &str) -> Result<(), StoreError> {
        self.0.release(source, key).await
    }
}

/// One delivery, in its `webhook {source}` span: the root of the trace the
/// delivery starts (whatever span the server runs in), and the span whose
/// ids the `raw_webhook` event carries.
async fn handle(
    state: ApiState,
    source: Source,
    handle: Option<String>,
    request: Request,
) -> HttpResult<Response> {
    let span = crewlet_telemetry::webhook_span(source.as_str());
    if !span.is_disabled()
        && let Err(e) = crewlet_telemetry::detach_from_trace(&span)
    {
        debug!(error = %e, "webhook span not made a trace root");
    }
    receive_delivery(state, source, handle, request, &span)
        .instrument(span.clone())
        .await
}

async fn receive_delivery(
    state: ApiState,
    source: Source,
    handle: Option<String>,
    request: Request,
    span: &Span,
) -> HttpResult<Response> {
    let inner = state.inner();
    let snapshot = match state.snapshot() {
        Some(s) => s,
        None => {
            inner
                .company
                .refresh_if_older(std::time::Duration::from_secs(1))
                .await;
            state.snapshot().ok_or_else(not_configured)?
        }
    };
    if let Some(h) = &handle
        && snapshot.org.seat(h).is_none()
    {
        return Err(HttpError::not_found(format!(
            "no seat with handle `{h}` in company revision {}",
            snapshot.revision_id
        )));
    }
    let hook = source.webhook();
    // Slack retries a 503 for ever: a seat that has no Slack app has no
    // Slack route at all.
    if let Some(h) = &handle {
        hook.seat_route(&snapshot.secrets, h)
            .map_err(HttpError::not_found)?;
    }
    let (parts, raw) = request.into_parts();
    let limits = inner.limits;
    let bytes = body::read(
        &parts.headers,
        raw,
        limits.webhook_body_limit,
        limits.body_timeout,
    )
    .await?;
    let request = WebhookRequest {
        headers: &parts.headers,
        body: &bytes,
        handle: handle.as_deref(),
        now: Utc::now(),
    };
    let inbound = hook.receive(request, &snapshot.secrets).map_err(|e| {
        let err = webhook_error(&e);
        if err.status.is_server_error() {
            warn!(source = %source, reason = %err.reason, "webhook refused");
        } else {
            debug!(source = %source, reason = %err.reason, "webhook refused");
        }
        err
    })?;
    let notification = match inbound {
        Inbound::Challenge(challenge) => {
            return Ok((StatusCode::OK, Json(SlackChallenge { challenge })).into_response());
        }
        Inbound::Ignored { reason, .. } => {
            debug!(source = %source, %reason, "webhook verified, not routed");
            return Ok(ok(
                hook,
                WebhookAccepted {
                    accepted: false,
                    duplicate: false,
                    ignored: Some(reason),
                    event_id: None,
                    trace_id: None,
                },
            ));
        }
        Inbound::Notification(n) => n,
    };
    let replay_key = crewlet_integrations::webhook::replay_key(source, &parts.headers, &bytes)
        .filter(|k| *k != notification.delivery_key);
    let source_name = source.as_str().to_owned();
    let keys: Vec<String> = std::iter::once(notification.delivery_key.clone())
        .chain(replay_key.clone())
        .collect();
    span.record("delivery_id", notification.delivery_key.as_str());
    span.record("event_type", notification.kind.as_str());
    // `webhook_span` has no `handle` field; the seat goes on this line (and
    // on the span's events in exported traces).
    debug!(source = %source, handle = handle.as_deref(), delivery = %notification.delivery_key, kind = %notification.kind, "webhook verified");
    let deliveries = Deliveries(inner.stores.webhooks.as_ref());
    let (claim, deferred) = match dedupe::admit(&deliveries, &source_name, &keys).await {
        Admission::Duplicate { replay } => {
            debug!(source = %source, delivery = %notification.delivery_key, replay, "duplicate webhook delivery");
            return Ok(ok(
                hook,
                WebhookAccepted {
                    accepted: false,
                    duplicate: true,
                    ignored: None,
                    event_id: None,
                    trace_id: None,
                },
            ));
        }
        Admission::New(claim) => (claim, false),
        Admission::Deferred(nothing) => (nothing, true),
    };
    // Stamped in the webhook span: its trace id and span id are the span's.
    let raw = RawWebhook::new(
        *notification,
        handle,
        kept_headers(&parts.headers),
        replay_key,
        deferred,
    );
    let event = crewlet_telemetry::stamp(raw.event());
    let (event_id, trace_id) = (event.id, event.trace_id);
    let published = claim
        .publish(
            inner
                .queue
                .publish_shared(topics::NOTIFICATIONS_INBOUND, Arc::new(event)),
        )
        .await;
    match published {
        // Marks the claims published: a retry is a duplicate from now on.
        Ok(published) => published.confirm().await,
        Err(failed) => {
            // The claims were given back so the sender's retry is accepted,
            // by this process or any other API process on the same database.
            for release in &failed.unreleased {
                warn!(source = %source, error = %release, "cannot release the webhook claim; its retry will look like a duplicate for 5 minutes");
            }
            let e = failed.error;
            warn!(source = %source, error = %e, "cannot publish webhook");
            return Err(HttpError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "queue_unavailable",
                format!("the webhook was verified but could not be queued: {e}"),
            )
            .retry_after(5));
        }
    }
    Ok(ok(
        hook,
        WebhookAccepted {
            accepted: true,
            duplicate: false,
            ignored: None,
            event_id: Some(event_id.to_string()),
            trace_id: trace_id.map(|t| t.to_string()),
        },
    ))
}

macro_rules! webhook_routes {
    ($($source:expr, $name:ident, $for_seat:ident, $path:tt, $seat_path:tt, $doc:literal;)*) => {$(
        #[doc = $doc]
        #[utoipa::path(post, path = $path, tag = "webhooks",
            request_body(content = Object, content_type = "application/json"),
            responses(
                (status = 202, description = "verified and published (or ignored, or a duplicate)", body = WebhookAccepted),
                (status = 400, description = "bad JSON or a missing header", body = ErrorBody),
                (status = 401, description = "bad or missing signature", body = ErrorBody),
                (status = 413, description = "body over 1 MiB", body = ErrorBody),
                (status = 503, description = "no company yet (Retry-After: 15) or no secret configured (Retry-After: 300)", body = ErrorBody)),
            security(()))]
        pub async fn $name(State(state): State<ApiState>, request: Request) -> HttpResult<Response> {
            handle(state, $source, None, request).await
        }

        #[doc = $doc]
        /// The handle targets a seat (the router's first choice).
        #[utoipa::path(post, path = $seat_path, tag = "webhooks",
            params(("handle" = String, Path, description = "the seat to route to")),
            request_body(content = Object, content_type = "application/json"),
            responses(
                (status = 202, description = "verified and published (or ignored, or a duplicate)", body = WebhookAccepted),
                (status = 400, body = ErrorBody),
                (status = 401, body = ErrorBody),
                (status = 404, description = "no such seat", body = ErrorBody),
                (status = 413, body = ErrorBody),
                (status = 503, body = ErrorBody)),
            security(()))]
        pub async fn $for_seat(
            State(state): State<ApiState>,
            Path(seat): Path<String>,
            request: Request,
        ) -> HttpResult<Response> {
            handle(state, $source, Some(seat), request).await
        }
    )*};
}

webhook_routes! {
    Source::Github, github_hook, github_hook_for_seat, "/webhooks/github", "/webhooks/github/{handle}",
        "GitHub: `X-Hub-Signature-256` with `integrations.github.webhook_secret`; dedupe on `X-GitHub-Delivery`.";
    Source::Gitlab, gitlab_hook, gitlab_hook_for_seat, "/webhooks/gitlab", "/webhooks/gitlab/{handle}",
        "GitLab: `X-Gitlab-Token` (`integrations.gitlab.webhook_token`) or a Standard Webhooks signature (`signing_secret`); dedupe on the event UUID.";
    Source::Plane, plane_hook, plane_hook_for_seat, "/webhooks/plane", "/webhooks/plane/{handle}",
        "Plane: `X-Plane-Signature` (hex HMAC of the body) with `integrations.plane.webhook_secret`.";
    Source::Jira, jira_hook, jira_hook_for_seat, "/webhooks/jira", "/webhooks/jira/{handle}",
        "Jira: `X-Hub-Signature: sha256=` with `integrations.jira.webhook_secret`.";
    Source::Confluence, confluence_hook, confluence_hook_for_seat, "/webhooks/confluence", "/webhooks/confluence/{handle}",
        "Confluence: `X-Hub-Signature: sha256=` with `integrations.confluence.webhook_secret`.";
}

/// Slack, one app per seat: v0 signature with the seat's
/// `integrations.slack.signing_secret`; `url_verification` answered;
/// dedupe on `event_id`; accepted -> 200.
#[utoipa::path(post, path = "/webhooks/slack/{handle}", tag = "webhooks",
    params(("handle" = String, Path, description = "the seat whose Slack app this is")),
    request_body(content = Object, content_type = "application/json"),
    responses(
        (status = 200, description = "verified and published, ignored, a duplicate, or the url_verification challenge", body = WebhookAccepted),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "no such seat", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 503, body = ErrorBody)),
    security(()))]
pub async fn slack_hook(
    State(state): State<ApiState>,
    Path(seat): Path<String>,
    request: Request,
) -> HttpResult<Response> {
    handle(state, Source::Slack, Some(seat), request).await
}
