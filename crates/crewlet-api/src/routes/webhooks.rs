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
use crewlet_integrations::webhook::{confluence, github, gitlab, jira, plane, slack};
use crewlet_integrations::{Inbound, Notification, Source, WebhookError};
use crewlet_queue::topics;
use serde::Serialize;
use tracing::{Instrument, Span, debug, warn};
use utoipa::ToSchema;

use crate::company::Snapshot;
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::raw_webhook::RawWebhook;
use crate::routes::body;
use crate::state::ApiState;

/// Headers copied into the event: what identifies a delivery, never a credential.
const KEPT_HEADERS: &[&str] = &[
    "content-type",
    "user-agent",
    github::EVENT_HEADER,
    github::DELIVERY_HEADER,
    "x-github-hook-id",
    gitlab::EVENT_HEADER,
    gitlab::EVENT_UUID_HEADER,
    gitlab::WEBHOOK_ID_HEADER,
    "x-gitlab-instance",
    slack::TIMESTAMP_HEADER,
    "x-slack-retry-num",
    "x-slack-retry-reason",
    plane::EVENT_HEADER,
    plane::DELIVERY_HEADER,
    jira::DELIVERY_HEADER,
    "x-atlassian-webhook-retry",
    "x-atlassian-webhook-flow",
];

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
    let code = match e {
        WebhookError::BadSignature { .. } => "bad_signature",
        WebhookError::StaleTimestamp { .. } => "stale_timestamp",
        WebhookError::MissingHeader { .. } if status == StatusCode::UNAUTHORIZED => {
            "missing_signature"
        }
        WebhookError::MissingHeader { .. } => "missing_header",
        WebhookError::BadJson { .. } => "bad_json",
        WebhookError::MissingSecret { .. } => "missing_secret",
    };
    let mut err = HttpError::new(status, code, e.to_string());
    err.retry_after = e.retry_after_secs();
    err
}

fn kept_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    KEPT_HEADERS
        .iter()
        .filter_map(|name| {
            let v = headers.get(*name)?.to_str().ok()?;
            Some(((*name).to_owned(), v.to_owned()))
        })
        .collect()
}

/// Verifies and normalizes with the source's secret from the active revision.
fn receive(
    source: Source,
    snapshot: &Snapshot,
    handle: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Inbound, WebhookError> {
    let s = &snapshot.secrets;
    fn secret(v: &Option<crate::company::Secret>) -> Option<&[u8]> {
        v.as_ref().map(|s| s.bytes())
    }
    match source {
        Source::Slack => {
            let key = handle.and_then(|h| s.slack.get(h)).map(|s| s.bytes());
            slack::receive(headers, body, key, Utc::now())
        }
        Source::Github => github::receive(headers, body, secret(&s.github)),
        Source::Gitlab => {
            let secrets = gitlab::GitLabSecrets {
                webhook_token: s.gitlab_token.as_ref().map(|t| t.bytes()),
                signing_secret: s.gitlab_signing.as_ref().map(|t| t.as_str()),
            };
            gitlab::receive(headers, body, secrets, Utc::now())
        }
        Source::Plane => plane::receive(headers, body, secret(&s.plane)),
        Source::Jira => jira::receive(headers, body, secret(&s.jira)),
        Source::Confluence => confluence::receive(headers, body, secret(&s.confluence)),
    }
}

/// `(status, body)` of an accepted delivery: 200 for Slack, 202 otherwise.
fn ok(source: Source, body: WebhookAccepted) -> Response {
    let status = if source == Source::Slack {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    (status, Json(body)).into_response()
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
    // Slack retries a 503 for ever: a seat that has no Slack app has no
    // Slack route at all.
    if source == Source::Slack
        && let Some(h) = &handle
        && !snapshot.secrets.slack.contains_key(h)
    {
        return Err(HttpError::not_found(format!(
            "seat `{h}` has no Slack app here: set its integrations.slack.signing_secret"
        )));
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
    let inbound =
        receive(source, &snapshot, handle.as_deref(), &parts.headers, &bytes).map_err(|e| {
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
                source,
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
    let claimed = match claim(&state, &source_name, &keys).await {
        Claim::Duplicate { replay } => {
            debug!(source = %source, delivery = %notification.delivery_key, replay, "duplicate webhook delivery");
            return Ok(ok(
                source,
                WebhookAccepted {
                    accepted: false,
                    duplicate: true,
                    ignored: None,
                    event_id: None,
                    trace_id: None,
                },
            ));
        }
        Claim::New(claimed) => Some(claimed),
        Claim::Deferred => None,
    };
    // Stamped in the webhook span: its trace id and span id are the span's.
    let event = crewlet_telemetry::stamp(to_event(
        *notification,
        handle,
        kept_headers(&parts.headers),
        replay_key,
        claimed.is_none(),
    ));
    let (event_id, trace_id) = (event.id, event.trace_id);
    if let Err(e) = inner
        .queue
        .publish_shared(topics::NOTIFICATIONS_INBOUND, Arc::new(event))
        .await
    {
        // Give the claims back so the sender's retry is accepted, by this
        // process or any other API process on the same database.
        for key in claimed.iter().flatten() {
            if let Err(release) = inner.stores.webhooks.release(&source_name, key).await {
                warn!(source = %source, error = %release, "cannot release the webhook claim; its retry will look like a duplicate for 5 minutes");
            }
        }
        warn!(source = %source, error = %e, "cannot publish webhook");
        return Err(HttpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "queue_unavailable",
            format!("the webhook was verified but could not be queued: {e}"),
        )
        .retry_after(5));
    }
    if let Some(keys) = &claimed {
        confirm(&state, &source_name, keys).await;
    }
    Ok(ok(
        source,
        WebhookAccepted {
            accepted: true,
            duplicate: false,
            ignored: None,
            event_id: Some(event_id.to_string()),
            trace_id: trace_id.map(|t| t.to_string()),
        },
    ))
}

/// What the dedupe store says of a delivery's keys.
enum Claim {
    /// Every key is new; these were claimed (released if the publish fails).
    New(Vec<String>),
    /// A key was seen before and its delivery reached the queue: a retry
    /// of the delivery, or (`replay`) its signed body resent under a fresh id.
    Duplicate { replay: bool },
    /// The router decides: the store is unavailable, or a key was claimed
    /// but its delivery never confirmed as published (the process that
    /// claimed it crashed, or is still publishing). The delivery is
    /// published marked `dedupe_deferred`; the engine's router, which holds
    /// it until the store answers, dedupes it on the same keys. Refusing
    /// would lose it for senders that do not retry (GitHub), and letting it
    /// through unmarked could run it twice.
    Deferred,
}

/// The marker set once the delivery claimed as `key` is on the queue.
fn published_marker(key: &str) -> String {
    format!("{key}#published")
}

/// Claims every key of a delivery (its id first, then its replay key).
async fn claim(state: &ApiState, source: &str, keys: &[String]) -> Claim {
    let inner = state.inner();
    let webhooks = &inner.stores.webhooks;
    let mut claimed = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        let seen = match webhooks.claim(source, key).await {
            Ok(true) => {
                claimed.push(key.clone());
                continue;
            }
            Ok(false) => webhooks.is_claimed(source, &published_marker(key)).await,
            Err(e) => Err(e),
        };
        return match seen {
            Ok(true) => Claim::Duplicate { replay: i > 0 },
            Ok(false) => {
                debug!(
                    source,
                    "delivery claimed before but never confirmed published; the router decides"
                );
                Claim::Deferred
            }
            Err(e) => {
                warn!(source, error = %e, "webhook dedupe unavailable; publishing the delivery for the router to dedupe once the store is back");
                Claim::Deferred
            }
        };
    }
    Claim::New(claimed)
}

/// Marks the claimed keys as published (best effort: without the marker a
/// retry is published again and deduped by the router).
async fn confirm(state: &ApiState, source: &str, keys: &[String]) {
    for key in keys {
        if let Err(e) = state
            .inner()
            .stores
            .webhooks
            .claim(source, &published_marker(key))
            .await
        {
            debug!(source, error = %e, "cannot mark the delivery published; a retry goes to the router");
        }
    }
}

fn to_event(
    mut notification: Notification,
    handle: Option<String>,
    headers: BTreeMap<String, String>,
    replay_key: Option<String>,
    dedupe_deferred: bool,
) -> crewlet_core::Event {
    let body = std::mem::take(&mut notification.raw);
    let mut event = notification.to_event();
    if let Some(h) = &handle {
        event = event.with_tag("handle", h.clone());
    }
    let payload = RawWebhook {
        source: notification.source,
        handle,
        headers,
        notification,
        body,
        received_at: event.timestamp,
        replay_key,
        dedupe_deferred,
    };
    event.with_payload(serde_json::to_value(&payload).unwrap_or_default())
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
