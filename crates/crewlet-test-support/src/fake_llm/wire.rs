//! Reading requests and writing answers in the OpenAI and Anthropic formats.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Wire;
use super::script::{Answer, Reply, SeenRequest};

/// Text of a message `content`: a string, or the text of its blocks/parts.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") => p.get("text").and_then(Value::as_str).map(str::to_owned),
                Some("tool_result") => Some(content_text(p.get("content").unwrap_or(&Value::Null))),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

pub(super) fn seen(wire: Wire, body: &Value) -> SeenRequest {
    let mut s = SeenRequest {
        wire: Some(wire),
        model: body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
        ..SeenRequest::default()
    };
    let tools = body.get("tools").and_then(Value::as_array);
    s.tools = tools
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t.pointer("/function/name")
                .or_else(|| t.get("name"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    s.tool_choice = match body.get("tool_choice") {
        Some(Value::String(c)) => c.clone(),
        Some(v) => match v.get("type").and_then(Value::as_str) {
            Some("any") => "required".into(),
            Some("tool") | Some("function") => format!(
                "tool:{}",
                v.pointer("/function/name")
                    .or_else(|| v.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            ),
            Some(other) => other.to_owned(),
            None => String::new(),
        },
        None => String::new(),
    };
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut system = Vec::new();
    if let Some(sys) = body.get("system") {
        system.push(match sys {
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n\n"),
            other => content_text(other),
        });
    }
    for m in &messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let content = m.get("content").unwrap_or(&Value::Null);
        if role == "system" {
            system.push(content_text(content));
            continue;
        }
        let text = content_text(content);
        let is_tool_result = role == "tool"
            || content.as_array().is_some_and(|blocks| {
                blocks
                    .iter()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            });
        if is_tool_result {
            s.last_tool_result = Some(text.clone());
        }
        s.last_is_tool_result = is_tool_result;
        s.last_message.clone_from(&text);
        s.transcript.push(text);
    }
    s.system = system.join("\n\n");
    s
}

pub(super) fn error(
    wire: Wire,
    status: StatusCode,
    retry_after: Option<&str>,
    message: &str,
) -> Response {
    let body = match wire {
        Wire::Anthropic => {
            json!({"type": "error", "error": {"type": "api_error", "message": message}})
        }
        _ => json!({"error": {"message": message, "type": "fake_error", "code": status.as_u16()}}),
    };
    let mut resp = (status, axum::Json(body)).into_response();
    if let Some(ra) = retry_after
        && let Ok(v) = HeaderValue::from_str(ra)
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

pub(super) async fn respond(
    ids: &AtomicU64,
    wire: Wire,
    seen: &SeenRequest,
    reply: Reply,
) -> Response {
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    if let Answer::Status {
        status,
        retry_after,
        message,
    } = &reply.answer
    {
        let code = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return error(wire, code, retry_after.as_deref(), message);
    }
    let model = reply.model.clone().unwrap_or_else(|| seen.model.clone());
    let (text, calls) = match &reply.answer {
        Answer::Text(t) => (t.clone(), Vec::new()),
        Answer::ToolCalls { text, calls } => (text.clone(), calls.clone()),
        Answer::Status { .. } => (String::new(), Vec::new()),
    };
    let calls: Vec<(String, String, Value)> = calls
        .into_iter()
        .map(|(name, args)| {
            let n = ids.fetch_add(1, Ordering::Relaxed);
            let id = match wire {
                Wire::Anthropic => format!("toolu_{n:04}"),
                _ => format!("call_{n:04}"),
            };
            (id, name, args)
        })
        .collect();
    let u = reply.usage;
    match (wire, seen.stream) {
        (Wire::Anthropic, false) => {
            let mut content: Vec<Value> = Vec::new();
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for (id, name, args) in &calls {
                content.push(json!({"type": "tool_use", "id": id, "name": name, "input": args}));
            }
            let stop = if calls.is_empty() {
                "end_turn"
            } else {
                "tool_use"
            };
            axum::Json(json!({
                "id": format!("msg_{}", ids.fetch_add(1, Ordering::Relaxed)),
                "type": "message", "role": "assistant", "model": model,
                "content": content, "stop_reason": stop,
                "usage": anthropic_usage(u.input, u.output, u.cache_read),
            }))
            .into_response()
        }
        (Wire::Anthropic, true) => sse(
            reply.stream_gap,
            anthropic_events(&model, &text, &calls, u.input, u.output, u.cache_read),
        ),
        (_, false) => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .map(|(id, name, args)| {
                    json!({"id": id, "type": "function",
                           "function": {"name": name, "arguments": args.to_string()}})
                })
                .collect();
            let mut message = json!({"role": "assistant",
                "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { text.clone().into() }});
            if !tool_calls.is_empty() {
                message["tool_calls"] = tool_calls.into();
            }
            let finish = if calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            axum::Json(json!({
                "id": format!("chatcmpl-{}", ids.fetch_add(1, Ordering::Relaxed)),
                "object": "chat.completion", "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": openai_usage(u.input, u.output, u.cache_read),
            }))
            .into_response()
        }
        (_, true) => sse(
            reply.stream_gap,
            openai_events(&model, &text, &calls, u.input, u.output, u.cache_read),
        ),
    }
}

fn openai_usage(input: u64, output: u64, cache_read: u64) -> Value {
    json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output,
           "prompt_tokens_details": {"cached_tokens": cache_read}})
}

fn anthropic_usage(input: u64, output: u64, cache_read: u64) -> Value {
    json!({"input_tokens": input.saturating_sub(cache_read), "output_tokens": output,
           "cache_read_input_tokens": cache_read, "cache_creation_input_tokens": 0})
}

/// Text in a few pieces, so clients see real deltas.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(3).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn openai_events(
    model: &str,
    text: &str,
    calls: &[(String, String, Value)],
    input: u64,
    output: u64,
    cache_read: u64,
) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-stream", "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for p in pieces(text).into_iter().filter(|p| !p.is_empty()) {
        out.push(chunk(json!({"content": p}), Value::Null));
    }
    for (i, (id, name, args)) in calls.iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                                    "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
        for p in pieces(&args.to_string()) {
            out.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}),
                Value::Null,
            ));
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    out.push(chunk(json!({}), finish.into()));
    out.push(
        json!({"id": "chatcmpl-stream", "object": "chat.completion.chunk", "model": model,
               "choices": [], "usage": openai_usage(input, output, cache_read)})
        .to_string(),
    );
    out.into_iter()
        .map(|d| format!("data: {d}\n\n"))
        .chain(std::iter::once("data: [DONE]\n\n".to_owned()))
        .collect()
}

fn anthropic_events(
    model: &str,
    text: &str,
    calls: &[(String, String, Value)],
    input: u64,
    output: u64,
    cache_read: u64,
) -> Vec<String> {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut start_usage = anthropic_usage(input, output, cache_read);
    start_usage["output_tokens"] = json!(1);
    let mut out = vec![ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_stream", "type": "message",
               "role": "assistant", "model": model, "content": [], "stop_reason": null,
               "usage": start_usage}}),
    )];
    let mut index = 0;
    if !text.is_empty() {
        out.push(ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "text", "text": ""}}),
        ));
        for p in pieces(text) {
            out.push(ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "text_delta", "text": p}}),
            ));
        }
        out.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    out.push(ev("ping", json!({"type": "ping"})));
    for (id, name, args) in calls {
        out.push(ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": index,
                   "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ));
        for p in pieces(&args.to_string()) {
            out.push(ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index,
                       "delta": {"type": "input_json_delta", "partial_json": p}}),
            ));
        }
        out.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    out.push(ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop},
               "usage": {"output_tokens": output}}),
    ));
    out.push(ev("message_stop", json!({"type": "message_stop"})));
    out
}

fn sse(gap: std::time::Duration, events: Vec<String>) -> Response {
    let stream = futures::stream::unfold(
        (events.into_iter(), true),
        move |(mut it, first)| async move {
            let event = it.next()?;
            if !first && !gap.is_zero() {
                tokio::time::sleep(gap).await;
            }
            Some((
                Ok::<_, std::convert::Infallible>(bytes::Bytes::from(event)),
                (it, false),
            ))
        },
    );
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// Deterministic unit vectors: each input's bytes seed a small generator.
pub(super) fn embeddings(body: &Value) -> Response {
    let dims = body
        .get("dimensions")
        .and_then(Value::as_u64)
        .and_then(|d| usize::try_from(d).ok())
        .filter(|d| (1..=8192).contains(d))
        .unwrap_or(1536);
    let inputs: Vec<String> = match body.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().unwrap_or_default().to_owned())
            .collect(),
        _ => Vec::new(),
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let mut state = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            let mut v: Vec<f64> = (0..dims)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % 2000) as f64 / 1000.0 - 1.0
                })
                .collect();
            let norm = v
                .iter()
                .map(|x| x * x)
                .sum::<f64>()
                .sqrt()
                .max(f64::MIN_POSITIVE);
            v.iter_mut().for_each(|x| *x /= norm);
            json!({"object": "embedding", "index": index, "embedding": v})
        })
        .collect();
    let tokens: usize = inputs.iter().map(|i| i.split_whitespace().count()).sum();
    axum::Json(json!({
        "object": "list", "data": data,
        "model": body.get("model").cloned().unwrap_or(Value::Null),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}
    }))
    .into_response()
}
