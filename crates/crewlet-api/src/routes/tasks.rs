//! `POST /agents/{handle}/tasks`: hand a seat work without any integration.
//! The task goes on the seat's durable inbox the way the notification
//! router posts one, in a trace of its own; the answer says where to follow
//! it (`task_id`, `trace_id`).

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use crewlet_core::payload::{TaskPriority, TaskRequest, TaskSeat};
use crewlet_core::{AgentId, SpanId, TraceContext, TraceId};
use crewlet_queue::topics;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::agents::{agent_not_found, not_configured};
use super::body;
use crate::auth::TokenAccess;
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::state::ApiState;

/// Largest task text, in characters (a task is an instruction, not a
/// document).
pub(crate) const MAX_TEXT_CHARS: usize = 32 * 1024;
/// Largest title, in characters.
pub(crate) const MAX_TITLE_CHARS: usize = 200;
/// Largest `Idempotency-Key`, in bytes.
const MAX_KEY_BYTES: usize = 200;

/// Namespace of the task and trace ids derived from an `Idempotency-Key`.
const KEY_NAMESPACE: Uuid = Uuid::from_u128(0x6f1d_2a3c_9b47_4e58_a1c0_d37e_58b2_04a9);

/// The claim namespaces of idempotent posts in the delivery store.
const CLAIMED: &str = "api-task";
const POSTED: &str = "api-task-posted";

/// A task for a seat.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTask {
    /// What the seat should do: at least one non-blank character, at most
    /// 32,768.
    #[schema(min_length = 1, max_length = 32768, pattern = r"\S")]
    pub text: String,
    /// A short title: one line of at most 200 characters (blank: none).
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\r\n]*$")]
    pub title: Option<String>,
    /// `low`, `normal` (default), `high` or `urgent`.
    #[serde(default)]
    #[schema(value_type = Option<Priority>)]
    pub priority: Option<TaskPriority>,
}

/// How urgent a task is (the document's view of `TaskPriority`).
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum Priority {
    Low,
    Normal,
    High,
    Urgent,
}

/// Where to follow an accepted task.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TaskAccepted {
    pub task_id: String,
    /// The trace of the task and its turn (`GET /events/trace/{trace_id}`).
    pub trace_id: String,
    pub handle: String,
    /// `true` when an earlier request with the same `Idempotency-Key`
    /// already posted this task (nothing was posted again).
    #[serde(default)]
    pub duplicate: bool,
}

/// Posts a task to an agent seat's inbox.
#[utoipa::path(post, path = "/agents/{handle}/tasks", tag = "org",
    params(
        ("handle" = String, Path, description = "the seat's handle (or agent id)"),
        ("Idempotency-Key" = Option<String>, Header, max_length = 200, pattern = r"^[!-~]+$",
            description = "a retried request with the same key posts the task once (visible ASCII, at most 200 characters)")),
    request_body = NewTask,
    responses(
        (status = 202, description = "on the seat's inbox", body = TaskAccepted),
        (status = 400, description = "not JSON, unknown fields, empty or oversized text or title, a bad priority or key", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "the token lacks the `operate` scope", body = ErrorBody),
        (status = 404, description = "no agent seat with that handle", body = ErrorBody),
        (status = 409, description = "`in_progress`: a request with this Idempotency-Key is being posted; retry", body = ErrorBody),
        (status = 503, description = "no company yet, or the queue refused the task (nothing was posted)", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn post_task(
    _: TokenAccess,
    State(state): State<ApiState>,
    Path(handle): Path<String>,
    request: Request,
) -> HttpResult<Response> {
    let (parts, raw) = request.into_parts();
    let limits = state.inner().limits;
    let bytes = body::read(
        &parts.headers,
        raw,
        4 * MAX_TEXT_CHARS + 4096, // four bytes a character at most, plus the rest
        limits.body_timeout,
    )
    .await?;
    let task: NewTask = serde_json::from_slice(&bytes)
        .map_err(|e| HttpError::bad_request(format!("the body is not a task: {e}")))?;
    let request = validate(task)?;
    let key = idempotency_key(&parts.headers)?;

    let view = state
        .view()
        .filter(|v| v.organization().is_some())
        .ok_or_else(not_configured)?;
    let agent = view
        .agent(&handle)
        .filter(|a| a.kind == "agent")
        .ok_or_else(|| agent_not_found(&handle))?;
    let agent_id = Uuid::parse_str(&agent.id)
        .map(AgentId::from_uuid)
        .map_err(|_| {
            HttpError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the seat has no valid agent id",
            )
        })?;
    let mut request = request;
    request.handle = agent.handle.clone();

    let (task_id, trace) = match &key {
        Some(k) => derived(&agent.handle, k),
        None => (Uuid::now_v7().to_string(), TraceContext::new_root()),
    };
    let accepted = TaskAccepted {
        task_id: task_id.clone(),
        trace_id: trace.trace_id.to_string(),
        handle: agent.handle.clone(),
        duplicate: false,
    };
    let claim_key = key.as_ref().map(|k| format!("{}:{k}", agent.handle));
    let deliveries = state.inner().stores.webhooks.clone();
    if let Some(ck) = &claim_key {
        let first = deliveries.claim(CLAIMED, ck).await.map_err(store_down)?;
        if !first {
            if deliveries
                .is_claimed(POSTED, ck)
                .await
                .map_err(store_down)?
            {
                return Ok(answer(TaskAccepted {
                    duplicate: true,
                    ..accepted
                }));
            }
            return Err(HttpError::new(
                StatusCode::CONFLICT,
                "in_progress",
                "a request with this Idempotency-Key is being posted; retry in a moment",
            ));
        }
    }

    let seat = TaskSeat {
        agent_id,
        name: agent.name.as_str(),
        handle: agent.handle.as_str(),
    };
    let event = std::sync::Arc::new(request.to_event(seat, &task_id, "api", trace));
    if let Err(e) = topics::post_task(state.inner().queue.as_ref(), &agent.handle, event).await {
        if let Some(ck) = &claim_key {
            // Give the key back so the client's retry is accepted.
            let _ = deliveries.release(CLAIMED, ck).await;
        }
        return Err(HttpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "queue_unavailable",
            format!("the task was not posted: the queue refused it ({e})"),
        )
        .retry_after(5));
    }
    if let Some(ck) = &claim_key
        && let Err(e) = deliveries.claim(POSTED, ck).await
    {
        tracing::warn!(error = %e, "task posted, but its Idempotency-Key could not be marked posted");
    }
    tracing::info!(handle = %agent.handle, task_id = %task_id, trace_id = %accepted.trace_id, "task posted by the api");
    Ok(answer(accepted))
}

fn answer(accepted: TaskAccepted) -> Response {
    (StatusCode::ACCEPTED, Json(accepted)).into_response()
}

fn store_down(e: crewlet_store::StoreError) -> HttpError {
    HttpError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        format!("cannot check the Idempotency-Key: {e}"),
    )
    .retry_after(5)
}

/// The request the seat will read, or why the body is refused.
fn validate(task: NewTask) -> HttpResult<TaskRequest> {
    let text = task.text.trim();
    if text.is_empty() {
        return Err(HttpError::bad_request(
            "`text` is empty: say what the seat should do",
        ));
    }
    let chars = text.chars().count();
    if chars > MAX_TEXT_CHARS {
        return Err(HttpError::bad_request(format!(
            "`text` is {chars} characters; at most {MAX_TEXT_CHARS}"
        )));
    }
    let title = task
        .title
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    if let Some(t) = &title
        && (t.chars().count() > MAX_TITLE_CHARS || t.contains(['\n', '\r']))
    {
        return Err(HttpError::bad_request(format!(
            "`title` must be one line of at most {MAX_TITLE_CHARS} characters"
        )));
    }
    let mut request = TaskRequest::new(String::new(), "api", text);
    request.title = title;
    request.priority = task.priority;
    Ok(request)
}

fn idempotency_key(headers: &HeaderMap) -> HttpResult<Option<String>> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.as_bytes();
    if !key.iter().all(|b| (b'!'..=b'~').contains(b)) {
        return Err(HttpError::bad_request(
            "Idempotency-Key must be visible ASCII, without spaces",
        ));
    }
    // Every byte is visible ASCII, so this cannot fail.
    let key = std::str::from_utf8(key).unwrap_or_default();
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(HttpError::bad_request(format!(
            "Idempotency-Key must be 1 to {MAX_KEY_BYTES} bytes"
        )));
    }
    Ok(Some(key.to_owned()))
}

/// The task id and trace of an idempotent post: the same for every retry.
fn derived(handle: &str, key: &str) -> (String, TraceContext) {
    let task = Uuid::new_v5(&KEY_NAMESPACE, format!("task:{handle}:{key}").as_bytes());
    let span = Uuid::new_v5(&KEY_NAMESPACE, format!("span:{handle}:{key}").as_bytes());
    let mut span_bytes = [0u8; 8];
    span_bytes.copy_from_slice(&span.as_bytes()[..8]);
    let trace = TraceContext {
        trace_id: TraceId::from_bytes(*task.as_bytes()),
        span_id: SpanId::from_bytes(span_bytes),
        parent_span_id: None,
    };
    (task.to_string(), trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(text: &str) -> NewTask {
        NewTask {
            text: text.into(),
            title: None,
            priority: None,
        }
    }

    #[test]
    fn empty_or_oversized_text_and_multiline_titles_are_refused() {
        assert!(validate(task("  \n ")).is_err());
        assert!(validate(task(&"x".repeat(MAX_TEXT_CHARS + 1))).is_err());
        assert!(validate(task(&"é".repeat(MAX_TEXT_CHARS))).is_ok());
        let mut t = task("do it");
        t.title = Some("a\nb".into());
        assert!(validate(t).is_err());
        let mut t = task("  do it  ");
        t.title = Some("  ".into());
        let r = validate(t).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(r.content, "do it");
        assert_eq!(r.title, None);
        assert_eq!(r.source, "api");
    }

    #[test]
    fn a_key_derives_the_same_ids_per_seat() {
        let (a, ta) = derived("eng", "k1");
        let (b, tb) = derived("eng", "k1");
        let (c, tc) = derived("ops", "k1");
        assert_eq!((a.as_str(), ta.trace_id), (b.as_str(), tb.trace_id));
        assert_ne!(a, c);
        assert_ne!(ta.trace_id, tc.trace_id);
    }
}
