//! The MCP methods (`initialize`, `ping`, `tools/list`, `tools/call`) and
//! the tools behind `tools/call`, shared by both transports.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Value, json};

use crate::{DEFAULT_PROTOCOL, KNOWN_PROTOCOLS, SERVER_NAME, Server, now_ms};

/// An answer: a JSON-RPC result or error, plus notifications to send first.
pub(crate) struct Answer {
    pub(crate) outcome: Result<Value, (i64, String)>,
    pub(crate) before: Vec<Value>,
}

impl Server {
    fn tools(&self) -> Vec<Value> {
        let mut tools = vec![
            json!({
                "name": "post_message",
                "title": "Post a message",
                "description": "Post a message to a channel, optionally in a thread.",
                "inputSchema": {"type": "object", "properties": {
                    "channel": {"type": "string"}, "text": {"type": "string"},
                    "thread": {"type": "string"}}, "required": ["channel", "text"]},
                "annotations": {"readOnlyHint": false, "destructiveHint": false, "openWorldHint": true},
            }),
            json!({
                "name": "read_thread",
                "description": "Read the messages of a thread.",
                "inputSchema": {"type": "object", "properties": {
                    "channel": {"type": "string"}, "thread": {"type": "string"}},
                    "required": ["channel", "thread"]},
                "annotations": {"readOnlyHint": true},
            }),
        ];
        if self.config.tracker_tools {
            tools.push(json!({
                "name": "create_merge_request",
                "description": "Open a merge request from a pushed branch.",
                "inputSchema": {"type": "object", "properties": {
                    "project": {"type": "string"}, "source_branch": {"type": "string"},
                    "target_branch": {"type": "string"}, "title": {"type": "string"}},
                    "required": ["project", "source_branch", "title"]},
                "annotations": {"readOnlyHint": false, "destructiveHint": false, "openWorldHint": true},
            }));
        }
        if self.config.test_tools {
            tools.push(
                json!({"name": "sleep", "description": "Sleep for `ms` milliseconds.",
                "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer"}}}}),
            );
            tools.push(
                json!({"name": "whoami", "description": "Identity, pid and environment names.",
                "inputSchema": {"type": "object"}}),
            );
            tools.push(
                json!({"name": "forget_sessions", "description": "Drop every HTTP session.",
                "inputSchema": {"type": "object"}}),
            );
            tools.push(json!({"name": "announce_tools_changed",
                "description": "Send notifications/tools/list_changed before answering.",
                "inputSchema": {"type": "object"}}));
        }
        tools
    }

    pub(crate) async fn handle(
        &self,
        method: &str,
        params: &Value,
        identity: Option<String>,
    ) -> Answer {
        let ok = |v: Value| Answer {
            outcome: Ok(v),
            before: Vec::new(),
        };
        match method {
            "initialize" => {
                if self.config.hang_on_initialize {
                    std::future::pending::<()>().await;
                }
                let asked = params
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or(DEFAULT_PROTOCOL);
                let version = self.config.protocol.clone().unwrap_or_else(|| {
                    if KNOWN_PROTOCOLS.contains(&asked) {
                        asked.to_string()
                    } else {
                        DEFAULT_PROTOCOL.to_string()
                    }
                });
                ok(json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {"listChanged": true}},
                    "serverInfo": {"name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION")},
                    "instructions": "A fake chat server for tests.",
                }))
            }
            "ping" => ok(json!({})),
            "tools/list" => {
                let tools = self.tools();
                let start: usize = params
                    .get("cursor")
                    .and_then(Value::as_str)
                    .and_then(|c| c.strip_prefix("page-"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let end = start.saturating_add(self.config.page_size).min(tools.len());
                let page: Vec<Value> = tools
                    .get(start..end)
                    .map(<[Value]>::to_vec)
                    .unwrap_or_default();
                let mut result = json!({"tools": page});
                if end < tools.len() {
                    result["nextCursor"] = json!(format!("page-{end}"));
                }
                ok(result)
            }
            "tools/call" => self.call(params, identity).await,
            _ => Answer {
                outcome: Err((-32601, format!("method not found: {method}"))),
                before: Vec::new(),
            },
        }
    }

    async fn call(&self, params: &Value, identity: Option<String>) -> Answer {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let arg = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
        let text_result = |text: String, structured: Option<Value>, is_error: bool| {
            let mut r = json!({"content": [{"type": "text", "text": text}], "isError": is_error});
            if let Some(s) = structured {
                r["structuredContent"] = s;
            }
            Answer {
                outcome: Ok(r),
                before: Vec::new(),
            }
        };
        let test_tool = self.config.test_tools;
        match name {
            "post_message" => {
                let (Some(channel), Some(text)) = (arg("channel"), arg("text")) else {
                    return text_result(
                        "post_message needs `channel` and `text` strings".into(),
                        None,
                        true,
                    );
                };
                let n = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
                let message_id = format!("m-{}-{n}", std::process::id());
                let thread = arg("thread");
                self.append_log(json!({
                    "event": "tool_call", "tool": "post_message", "ts_ms": now_ms(),
                    "identity": identity, "channel": channel, "text": text,
                    "thread": thread, "message_id": message_id,
                }));
                text_result(
                    format!(
                        "posted to {channel} as {}",
                        identity.as_deref().unwrap_or("(anonymous)")
                    ),
                    Some(json!({"message_id": message_id})),
                    false,
                )
            }
            "read_thread" => {
                let (Some(channel), Some(thread)) = (arg("channel"), arg("thread")) else {
                    return text_result(
                        "read_thread needs `channel` and `thread` strings".into(),
                        None,
                        true,
                    );
                };
                let messages: Vec<Value> = self
                    .read_log()
                    .into_iter()
                    .filter(|l| l["tool"] == "post_message" && l["channel"] == channel.as_str())
                    .filter(|l| l["thread"] == thread.as_str() || l["message_id"] == thread.as_str())
                    .map(|l| json!({"identity": l["identity"], "text": l["text"], "message_id": l["message_id"]}))
                    .collect();
                text_result(
                    Value::Array(messages.clone()).to_string(),
                    Some(json!({"messages": messages})),
                    false,
                )
            }
            "create_merge_request" if self.config.tracker_tools => {
                let (Some(project), Some(source), Some(title)) =
                    (arg("project"), arg("source_branch"), arg("title"))
                else {
                    return text_result(
                        "create_merge_request needs `project`, `source_branch` and `title`".into(),
                        None,
                        true,
                    );
                };
                let target = arg("target_branch").unwrap_or_else(|| "main".into());
                let iid = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
                let url = format!("https://tracker.example/{project}/-/merge_requests/{iid}");
                self.append_log(json!({
                    "event": "tool_call", "tool": "create_merge_request", "ts_ms": now_ms(),
                    "identity": identity, "project": project, "source_branch": source,
                    "target_branch": target, "title": title, "iid": iid,
                }));
                text_result(
                    format!("opened merge request !{iid} ({source} -> {target}): {url}"),
                    Some(json!({"iid": iid, "web_url": url})),
                    false,
                )
            }
            "sleep" if test_tool => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                text_result(format!("slept {ms} ms"), None, false)
            }
            "whoami" if test_tool => {
                let mut env_keys: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
                env_keys.sort();
                let info =
                    json!({"identity": identity, "pid": std::process::id(), "env_keys": env_keys});
                text_result(info.to_string(), Some(info), false)
            }
            "forget_sessions" if test_tool => {
                self.sessions.lock().clear();
                text_result("forgot every session".into(), None, false)
            }
            "announce_tools_changed" if test_tool => {
                let mut answer = text_result("announced".into(), None, false);
                answer
                    .before
                    .push(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
                answer
            }
            _ => Answer {
                outcome: Err((-32602, format!("unknown tool: {name}"))),
                before: Vec::new(),
            },
        }
    }
}

pub(crate) fn response(id: Value, outcome: Result<Value, (i64, String)>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    }
}
