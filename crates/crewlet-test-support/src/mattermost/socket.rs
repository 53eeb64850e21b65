//! `GET /api/v4/websocket`: the origin check, authentication (challenge or
//! header), `hello`, events numbered per connection, `ping` and
//! `user_typing` actions.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::model::{error_json, new_id};
use super::rest::{bearer, error_response};
use super::state::{SERVER_VERSION, Shared, SocketRec};

const NOT_AUTHENTICATED: &str = "api.web_socket_router.not_authenticated.app_error";

pub(crate) async fn upgrade(
    State(shared): State<Arc<Shared>>,
    method: Method,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let (user, epoch) = {
        let mut data = shared.lock();
        data.requests
            .push((method.to_string(), "/api/v4/websocket".to_owned()));
        if data.refuse_sockets {
            return error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "api.web_socket.refused.app_error",
                "websocket connections are refused (fake fault)",
            );
        }
        if let Some(origin) = headers.get("origin") {
            let origin = String::from_utf8_lossy(origin.as_bytes());
            if origin_key(&origin) != origin_key(&data.site_url) {
                return error_response(
                    StatusCode::FORBIDDEN,
                    "api.web_socket.origin_not_allowed.app_error",
                    "websocket: request origin not allowed by Upgrader.CheckOrigin",
                );
            }
        }
        let user = bearer(&headers)
            .and_then(|token| data.user_for_token(token))
            .map(|u| u.id.clone());
        (user, data.epoch)
    };
    match ws {
        // Small buffers: benchmarks run the fake in the engine's process,
        // and its per-connection memory would otherwise hide the engine's.
        Ok(ws) => ws
            .read_buffer_size(8 * 1024)
            .write_buffer_size(8 * 1024)
            .on_upgrade(move |socket| async move { spawn(shared, socket, user, epoch) }),
        Err(rejection) => error_response(
            StatusCode::BAD_REQUEST,
            "api.web_socket.connect.upgrade.app_error",
            &rejection.to_string(),
        ),
    }
}

/// (scheme, host, port) of a URL, lower case, with the scheme's default port.
fn origin_key(url: &str) -> Option<(String, String, u16)> {
    let url = url.trim().to_ascii_lowercase();
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let default_port = match scheme {
        "https" | "wss" => 443,
        _ => 80,
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse().ok()?),
        _ => (authority, default_port),
    };
    let scheme = match scheme {
        "wss" => "https",
        "ws" => "http",
        other => other,
    };
    Some((scheme.to_owned(), host.to_owned(), port))
}

/// Starts the connection's task unless the server stopped since the upgrade
/// began; the task is registered so faults can abort it.
fn spawn(shared: Arc<Shared>, socket: WebSocket, user: Option<String>, epoch: u64) {
    let mut data = shared.lock();
    if data.epoch != epoch || !data.listening {
        return;
    }
    let conn_id = new_id();
    let task = tokio::spawn(run(shared.clone(), socket, conn_id.clone(), user));
    data.socket_tasks.insert(conn_id, task.abort_handle());
}

/// Forgets the connection however its task ends (aborted included).
struct Registered {
    shared: Arc<Shared>,
    conn_id: String,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut data = self.shared.lock();
        data.sockets.remove(&self.conn_id);
        data.socket_tasks.remove(&self.conn_id);
    }
}

async fn send(socket: &mut WebSocket, value: &Value) -> bool {
    socket
        .send(Message::Text(value.to_string().into()))
        .await
        .is_ok()
}

fn fail(seq: i64, id: &str, message: &str, status: u16) -> Value {
    json!({
        "status": "FAIL",
        "seq_reply": seq,
        "error": error_json(id, message, status),
    })
}

async fn run(shared: Arc<Shared>, mut socket: WebSocket, conn_id: String, user: Option<String>) {
    let _registered = Registered {
        shared: shared.clone(),
        conn_id: conn_id.clone(),
    };
    let (tx, mut events) = mpsc::unbounded_channel();
    let register = |user_id: &str| {
        shared.lock().sockets.insert(
            conn_id.clone(),
            SocketRec {
                user_id: user_id.to_owned(),
                events: tx.clone(),
            },
        );
    };
    let user_id = match user {
        Some(user_id) => {
            register(&user_id);
            user_id
        }
        None => loop {
            let text = match socket.recv().await {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => continue,
            };
            let frame: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
            let seq = frame["seq"].as_i64().unwrap_or(0);
            let authenticated = if frame["action"] == "authentication_challenge" {
                let token = frame["data"]["token"].as_str().unwrap_or_default();
                shared.lock().user_for_token(token).map(|u| u.id.clone())
            } else {
                None
            };
            let Some(user_id) = authenticated else {
                let reply = fail(seq, NOT_AUTHENTICATED, "websocket not authenticated", 401);
                if send(&mut socket, &reply).await {
                    let _ = socket.send(Message::Close(None)).await;
                }
                return;
            };
            register(&user_id);
            if !send(&mut socket, &json!({"status": "OK", "seq_reply": seq})).await {
                return;
            }
            break user_id;
        },
    };
    drop(tx);
    let hello = json!({
        "event": "hello",
        "data": { "connection_id": conn_id, "server_version": SERVER_VERSION },
        "broadcast": { "omit_users": null, "user_id": user_id, "channel_id": "", "team_id": "" },
        "seq": 0,
    });
    if !send(&mut socket, &hello).await {
        return;
    }
    let mut seq: i64 = 1;
    loop {
        tokio::select! {
            frame = socket.recv() => {
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                    Some(Ok(_)) => continue,
                };
                let Ok(frame) = serde_json::from_str::<Value>(text.as_str()) else {
                    continue;
                };
                let reply = action(&shared, &user_id, &frame);
                if !send(&mut socket, &reply).await {
                    return;
                }
            }
            event = events.recv() => {
                let Some(mut event) = event else { return };
                event["seq"] = json!(seq);
                seq += 1;
                if !send(&mut socket, &event).await {
                    return;
                }
            }
        }
    }
}

/// Answers a client action of an authenticated connection.
fn action(shared: &Shared, user_id: &str, frame: &Value) -> Value {
    let seq = frame["seq"].as_i64().unwrap_or(0);
    match frame["action"].as_str().unwrap_or_default() {
        "ping" => json!({"status": "OK", "seq_reply": seq, "data": {"text": "pong"}}),
        "authentication_challenge" => json!({"status": "OK", "seq_reply": seq}),
        "user_typing" => {
            let Some(channel_id) = frame["data"]["channel_id"].as_str() else {
                return fail(
                    seq,
                    "api.websocket_handler.invalid_param.app_error",
                    "missing channel_id",
                    400,
                );
            };
            let parent_id = frame["data"]["parent_id"].as_str().unwrap_or_default();
            shared.lock().typing(user_id, channel_id, parent_id);
            json!({"status": "OK", "seq_reply": seq})
        }
        _ => fail(
            seq,
            "api.web_socket_router.bad_action.app_error",
            "unknown action",
            400,
        ),
    }
}
