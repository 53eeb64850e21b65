//! `GET /stream/snapshot` and `GET /ws/stream` (`docs/dashboard.md`).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use crewlet_queue::TopicPattern;
use futures::SinkExt;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::auth::ReadAccess;
use crate::error::{HttpError, HttpResult};
use crate::live::{Frame, LiveHub, subjects};
use crate::state::ApiState;

/// Most events replayed from the store for a cursor older than the ring.
const STORE_REPLAY_MAX: usize = 5000;
/// Heartbeat period.
const HEARTBEAT: Duration = Duration::from_secs(15);
/// Close code for a client that fell too far behind.
const TOO_SLOW: u16 = 4008;
/// Most frames written before one flush.
const BURST: usize = 256;

pub(crate) fn health(state: &ApiState) -> Value {
    let inner = state.inner();
    json!({
        "status": if state.is_draining() { "shutting_down" } else if state.snapshot().is_none() && inner.engine.is_none() { "unconfigured" } else { "ok" },
        "version": env!("CARGO_PKG_VERSION"),
        "engine": inner.engine.is_some(),
        "queue": inner.queue.backend(),
        "event_store": if inner.queue.is_durable() { "durable" } else { "memory" },
        "clients": inner.live.clients(),
        "started_at": inner.live.started_at(),
        "upstream_dropped": inner.live.upstream_dropped(),
    })
}

fn org(state: &ApiState) -> Option<Arc<crewlet_config::Organization>> {
    state.view().and_then(|v| v.organization())
}

/// Everything a dashboard room needs for its first paint, from the live
/// projection (no event-store scan).
/// Without `read:content` the seats' task text, running responses and
/// questions and the events' content are left out, and the document says
/// `content_hidden: true`.
#[utoipa::path(get, path = "/stream/snapshot", tag = "events",
    responses(
        (status = 200, description = "seats with live state, recent events, attention, today; see docs/dashboard.md. `content_hidden: true` when content was left out (the caller lacks `read:content`)", body = Object,
            headers(("x-crewlet-content" = String, description = "`hidden`: content fields were left out; `shown`: nothing was"))),
        (status = 401, body = crate::error::ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn snapshot(
    ReadAccess(caller): ReadAccess,
    State(state): State<ApiState>,
    headers: axum::http::HeaderMap,
) -> Response {
    let org = org(&state);
    let mut snap = state.inner().live.snapshot(org.as_deref(), health(&state));
    if !caller.content {
        crate::content::strip_snapshot(&mut snap);
    }
    let [shown] = crate::content::header(caller.content);
    // At 1,000 seats the document is ~500 KB of JSON and compresses ~15x:
    // gzip it when the client takes gzip (a page's first paint waits on it).
    let body = match serde_json::to_vec(&snap) {
        Ok(b) => b,
        Err(e) => {
            return HttpError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "serialize_error",
                format!("cannot encode the snapshot: {e}"),
            )
            .into_response();
        }
    };
    use axum::http::{HeaderValue, header};
    let json = (
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Serialized once: sent as it is, or compressed.
    let gz = if crate::gzip::accepted(&headers) && body.len() >= GZIP_FROM {
        crate::gzip::compress(&body, flate2::Compression::fast())
    } else {
        Vec::new()
    };
    if gz.is_empty() {
        return ([json, shown], body).into_response();
    }
    (
        [
            json,
            shown,
            (header::CONTENT_ENCODING, HeaderValue::from_static("gzip")),
            (header::VARY, HeaderValue::from_static("accept-encoding")),
        ],
        gz,
    )
        .into_response()
}

/// Snapshots smaller than this are sent as they are.
const GZIP_FROM: usize = 8 * 1024;

#[derive(Debug, Deserialize)]
pub struct StreamParams {
    /// Comma-separated topic patterns (`*`, `>`); default `crewlet.events.>`.
    pub subjects: Option<String>,
    /// Resume after this event id.
    pub after: Option<Uuid>,
    /// The bearer token, for clients that can set neither the header nor a
    /// subprotocol (a URL may be logged on the way: prefer the
    /// `crewlet.bearer.<hex>` subprotocol, which the dashboard uses).
    pub token: Option<String>,
}

/// The subprotocol every Crewlet socket speaks; the server selects it, so a
/// browser that offered it with a token keeps the token out of the answer.
const PROTOCOL: &str = "crewlet.v1";
/// A subprotocol carrying the bearer token, hex-encoded (browsers cannot
/// set `Authorization` on a socket, and a URL may be logged on the way).
const BEARER_PROTOCOL: &str = "crewlet.bearer.";

/// The token of a `crewlet.bearer.<hex>` subprotocol, when one is offered.
fn protocol_token(headers: &axum::http::HeaderMap) -> Result<Option<String>, HttpError> {
    let offered = headers
        .get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .find_map(|p| p.strip_prefix(BEARER_PROTOCOL));
    let Some(encoded) = offered else {
        return Ok(None);
    };
    let bad = || {
        HttpError::bad_request(
            "the `crewlet.bearer.` subprotocol does not carry a hex-encoded UTF-8 token",
        )
    };
    let bytes = hex::decode(encoded).map_err(|_| bad())?;
    String::from_utf8(bytes).map(Some).map_err(|_| bad())
}

/// The live stream (WebSocket); its frames are in docs/dashboard.md.
pub async fn ws(
    State(state): State<ApiState>,
    Query(params): Query<StreamParams>,
    mut parts: Parts,
    upgrade: WebSocketUpgrade,
) -> HttpResult<Response> {
    let token = match protocol_token(&parts.headers)? {
        Some(t) => Some(t),
        None => params.token.clone(),
    };
    if let Some(token) = &token
        && !parts
            .headers
            .contains_key(axum::http::header::AUTHORIZATION)
    {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| HttpError::bad_request("the token is not visible ASCII"))?;
        parts
            .headers
            .insert(axum::http::header::AUTHORIZATION, value);
    }
    let ReadAccess(caller) =
        <ReadAccess as axum::extract::FromRequestParts<ApiState>>::from_request_parts(
            &mut parts, &state,
        )
        .await?;
    let subjects = subjects(params.subjects.as_deref()).map_err(HttpError::bad_request)?;
    let content = caller.content;
    Ok(upgrade
        .protocols([PROTOCOL])
        .on_upgrade(move |socket| run(socket, state, subjects, params.after, content))
        .into_response())
}

fn wanted(subjects: &[TopicPattern], frame: &Frame) -> bool {
    match &frame.topic {
        None => true,
        Some(t) => subjects.iter().any(|p| p.matches(t)),
    }
}

async fn send(socket: &mut WebSocket, text: String) -> bool {
    socket
        .send(Message::Text(Utf8Bytes::from(text)))
        .await
        .is_ok()
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: Utf8Bytes::from(reason.to_owned()),
        })))
        .await;
}

/// Events stored after `after`, oldest first, when the cursor is older
/// than the ring; `None` when it cannot be resumed.
async fn from_store(state: &ApiState, after: Uuid) -> Option<Vec<crewlet_core::Event>> {
    let store = &state.inner().stores.events;
    let anchor = store.get(after).await.ok()??;
    let mut out = Vec::new();
    let mut query = crewlet_store::EventQuery {
        since: Some(anchor.timestamp),
        limit: Some(500),
        ..Default::default()
    };
    loop {
        let page = store.recent(&query).await.ok()?;
        let n = page.events.len();
        out.extend(
            page.events
                .into_iter()
                .filter(|e| e.id != after && (e.timestamp, e.id) > (anchor.timestamp, anchor.id)),
        );
        if out.len() > STORE_REPLAY_MAX {
            return None;
        }
        match page.next {
            Some(next) if n > 0 => query.after = Some(next),
            _ => break,
        }
    }
    out.reverse();
    Some(out)
}

/// Sends a frame as this socket may see it (`content`: whole).
async fn send_frame(socket: &mut WebSocket, frame: &Frame, content: bool) -> bool {
    match frame.json_for(content) {
        Some(text) => send(socket, text.to_owned()).await,
        None => true,
    }
}

async fn run(
    mut socket: WebSocket,
    state: ApiState,
    subjects: Vec<TopicPattern>,
    after: Option<Uuid>,
    content: bool,
) {
    let hub: Arc<LiveHub> = state.inner().live.clone();
    let _guard = hub.client_guard();
    let org = org(&state);
    let mut opening = hub.open(org.as_deref(), health(&state), after);
    if !content {
        crate::content::strip_snapshot(&mut opening.snapshot);
    }
    let mut rx = opening.rx;
    if !send(
        &mut socket,
        json!({"kind": "snapshot", "data": opening.snapshot}).to_string(),
    )
    .await
    {
        return;
    }
    let mut replayed_ids = std::collections::HashSet::new();
    if let Some(after) = after {
        let mut replayed = 0usize;
        let complete = match opening.in_ring {
            Some(true) => {
                for f in opening.replay.iter().filter(|f| wanted(&subjects, f)) {
                    if !send_frame(&mut socket, f, content).await {
                        return;
                    }
                    replayed += 1;
                }
                true
            }
            _ => match from_store(&state, after).await {
                Some(events) => {
                    for e in events {
                        let topic = crewlet_queue::topics::events(&e.event_type);
                        if !subjects.iter().any(|p| p.matches(&topic)) {
                            continue;
                        }
                        replayed_ids.insert(e.id);
                        let mut row = crate::live::event_row(&e);
                        if !content {
                            crate::content::strip_event_value(&mut row);
                        }
                        let frame = json!({"kind": "event", "data": row});
                        if !send(&mut socket, frame.to_string()).await {
                            return;
                        }
                        replayed += 1;
                    }
                    true
                }
                None => false,
            },
        };
        let resumed = json!({"kind": "resumed", "data": {"after": after, "replayed": replayed, "complete": complete}});
        if !send(&mut socket, resumed.to_string()).await {
            return;
        }
    }
    let mut stopping = hub.stopping();
    if *stopping.borrow_and_update() {
        close(&mut socket, 1001, "the server is stopping").await;
        return;
    }
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    heartbeat.tick().await;
    loop {
        tokio::select! {
            frame = rx.recv() => match frame {
                Ok(first) => {
                    // Write every frame already waiting, then flush once:
                    // one write per burst, not one per frame.
                    let mut next = Some(first);
                    let mut queued = 0usize;
                    while let Some(f) = next.take() {
                        let skip = f.seq <= opening.seq
                            || !wanted(&subjects, &f)
                            || f.event_id.is_some_and(|id| replayed_ids.contains(&id));
                        if !skip && let Some(text) = f.json_for(content) {
                            if socket.feed(Message::Text(Utf8Bytes::from(text.to_owned()))).await.is_err() {
                                return;
                            }
                            queued += 1;
                        }
                        if queued < BURST {
                            match rx.try_recv() {
                                Ok(f) => next = Some(f),
                                Err(tokio::sync::broadcast::error::TryRecvError::Lagged(n)) => {
                                    let _ = socket.flush().await;
                                    close(&mut socket, TOO_SLOW, &format!("too slow: {n} frames behind; reconnect with after=<last event id>")).await;
                                    return;
                                }
                                Err(_) => {}
                            }
                        }
                    }
                    if queued > 0 && socket.flush().await.is_err() {
                        return;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    close(&mut socket, TOO_SLOW, &format!("too slow: {n} frames behind; reconnect with after=<last event id>")).await;
                    return;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    close(&mut socket, 1001, "the server is stopping").await;
                    return;
                }
            },
            _ = stopping.changed() => {
                close(&mut socket, 1001, "the server is stopping").await;
                return;
            }
            _ = heartbeat.tick() => {
                let beat = json!({"kind": "heartbeat", "data": {"at": chrono::Utc::now(), "clients": hub.clients()}});
                if !send(&mut socket, beat.to_string()).await {
                    return;
                }
            }
            msg = socket.recv() => match msg {
                Some(Ok(Message::Text(t))) => {
                    let ping = serde_json::from_str::<Value>(t.as_str()).ok().is_some_and(|v| v["kind"] == "ping");
                    if ping && !send(&mut socket, json!({"kind": "pong", "data": null}).to_string()).await {
                        return;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    }
}
