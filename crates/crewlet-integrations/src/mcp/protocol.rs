//! The slice of MCP (JSON-RPC 2.0) that Crewlet speaks as a client.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The version Crewlet asks for first.
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// Versions Crewlet accepts from a server's `initialize` answer.
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

pub(crate) const METHOD_NOT_FOUND: i64 = -32601;

/// What the server said about itself in `initialize`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInfo {
    pub name: String,
    pub version: String,
    pub protocol_version: String,
    pub capabilities: Value,
    pub instructions: Option<String>,
}

impl ServerInfo {
    pub(crate) fn from_initialize(result: &Value) -> Result<Self, String> {
        let protocol_version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or("the initialize result has no protocolVersion")?
            .to_string();
        let info = result.get("serverInfo").cloned().unwrap_or(Value::Null);
        Ok(ServerInfo {
            name: info
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_string(),
            version: info
                .get("version")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            protocol_version,
            capabilities: result.get("capabilities").cloned().unwrap_or(json!({})),
            instructions: result
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }
}

pub(crate) fn initialize_params(protocol_version: &str) -> Value {
    json!({
        "protocolVersion": protocol_version,
        "capabilities": {},
        "clientInfo": {"name": "crewlet", "title": "Crewlet", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// Hints a server gives about a tool; all optional, none trusted for security.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// One tool from `tools/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpTool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default = "empty_object_schema")]
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(default)]
    pub annotations: ToolAnnotations,
}

fn empty_object_schema() -> Value {
    json!({"type": "object"})
}

/// One block of a tool result.
#[derive(Debug, Clone, PartialEq)]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// Base64 data.
    Image {
        data: String,
        mime_type: String,
    },
    /// Base64 data.
    Audio {
        data: String,
        mime_type: String,
    },
    ResourceLink {
        uri: String,
        name: Option<String>,
        description: Option<String>,
        mime_type: Option<String>,
    },
    /// An embedded resource: `text` or base64 `blob`.
    Resource {
        uri: String,
        mime_type: Option<String>,
        text: Option<String>,
        blob: Option<String>,
    },
    /// A block type this client does not know, kept as sent.
    Other(Value),
}

impl ContentBlock {
    pub(crate) fn from_value(v: Value) -> ContentBlock {
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        match v.get("type").and_then(Value::as_str) {
            Some("text") => match s(&v, "text") {
                Some(text) => ContentBlock::Text { text },
                None => ContentBlock::Other(v),
            },
            Some(t @ ("image" | "audio")) => match (s(&v, "data"), s(&v, "mimeType")) {
                (Some(data), Some(mime_type)) if t == "image" => {
                    ContentBlock::Image { data, mime_type }
                }
                (Some(data), Some(mime_type)) => ContentBlock::Audio { data, mime_type },
                _ => ContentBlock::Other(v),
            },
            Some("resource_link") => match s(&v, "uri") {
                Some(uri) => ContentBlock::ResourceLink {
                    uri,
                    name: s(&v, "name"),
                    description: s(&v, "description"),
                    mime_type: s(&v, "mimeType"),
                },
                None => ContentBlock::Other(v),
            },
            Some("resource") => {
                let r = v.get("resource").cloned().unwrap_or(Value::Null);
                match s(&r, "uri") {
                    Some(uri) => ContentBlock::Resource {
                        uri,
                        mime_type: s(&r, "mimeType"),
                        text: s(&r, "text"),
                        blob: s(&r, "blob"),
                    },
                    None => ContentBlock::Other(v),
                }
            }
            _ => ContentBlock::Other(v),
        }
    }
}

/// The result of `tools/call`. `is_error` is the tool's own failure (bad
/// arguments, an upstream API error): the model should see it and may retry,
/// unlike an [`McpError`](super::McpError), which is the server's or the
/// transport's.
#[derive(Debug, Clone, PartialEq)]
pub struct CallToolResult {
    pub content: Vec<ContentBlock>,
    pub structured_content: Option<Value>,
    pub is_error: bool,
}

impl CallToolResult {
    pub(crate) fn from_value(mut v: Value) -> CallToolResult {
        let content = match v.get_mut("content").map(Value::take) {
            Some(Value::Array(items)) => items.into_iter().map(ContentBlock::from_value).collect(),
            _ => Vec::new(),
        };
        CallToolResult {
            content,
            structured_content: v
                .get_mut("structuredContent")
                .map(Value::take)
                .filter(|s| !s.is_null()),
            is_error: v.get("isError").and_then(Value::as_bool).unwrap_or(false),
        }
    }

    /// The text blocks joined by newlines (embedded text resources included):
    /// what a model usually needs.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                ContentBlock::Resource {
                    text: Some(text), ..
                } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// An incoming JSON-RPC message, classified.
#[derive(Debug)]
pub(crate) enum Incoming {
    Response {
        id: Value,
        outcome: Result<Value, RpcError>,
    },
    Request {
        id: Value,
        method: String,
    },
    Notification {
        method: String,
        params: Value,
    },
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

pub(crate) fn classify(mut msg: Value) -> Incoming {
    let Some(obj) = msg.as_object_mut() else {
        return Incoming::Invalid("not a JSON object".into());
    };
    let method = obj
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string);
    let id = obj.remove("id").filter(|id| !id.is_null());
    match (method, id) {
        (Some(method), Some(id)) => Incoming::Request { id, method },
        (Some(method), None) => Incoming::Notification {
            method,
            params: obj.remove("params").unwrap_or(Value::Null),
        },
        (None, Some(id)) => {
            if let Some(err) = obj.remove("error") {
                let code = err.get("code").and_then(Value::as_i64).unwrap_or(0);
                let message = err
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("(no message)")
                    .to_string();
                Incoming::Response {
                    id,
                    outcome: Err(RpcError {
                        code,
                        message,
                        data: err.get("data").cloned(),
                    }),
                }
            } else {
                Incoming::Response {
                    id,
                    outcome: Ok(obj.remove("result").unwrap_or(Value::Null)),
                }
            }
        }
        (None, None) => {
            Incoming::Invalid("neither a request, a response nor a notification".into())
        }
    }
}

pub(crate) fn request(id: u64, method: &str, params: Value) -> Value {
    let mut msg = json!({"jsonrpc": "2.0", "id": id, "method": method});
    if !params.is_null() {
        msg["params"] = params;
    }
    msg
}

pub(crate) fn notification(method: &str, params: Value) -> Value {
    let mut msg = json!({"jsonrpc": "2.0", "method": method});
    if !params.is_null() {
        msg["params"] = params;
    }
    msg
}

/// Our answer to a request the server sent us. Crewlet offers no client
/// capabilities (sampling, roots, elicitation), so only `ping` succeeds.
pub(crate) fn answer_server_request(id: Value, method: &str) -> Value {
    if method == "ping" {
        json!({"jsonrpc": "2.0", "id": id, "result": {}})
    } else {
        json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": METHOD_NOT_FOUND,
            "message": format!("crewlet does not offer {method}"),
        }})
    }
}

/// The numeric id of a response we sent (we only send numeric ids).
pub(crate) fn response_id(id: &Value) -> Option<u64> {
    id.as_u64()
        .or_else(|| id.as_str().and_then(|s| s.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_messages() {
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","id":3,"result":{"ok":true}})),
            Incoming::Response { outcome: Ok(_), .. }
        ));
        match classify(json!({"jsonrpc":"2.0","id":"4","error":{"code":-32602,"message":"bad"}})) {
            Incoming::Response {
                id,
                outcome: Err(e),
            } => {
                assert_eq!(response_id(&id), Some(4));
                assert_eq!(e.code, -32602);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","id":1,"method":"ping"})),
            Incoming::Request { .. }
        ));
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"})),
            Incoming::Notification { .. }
        ));
        assert!(matches!(classify(json!([1])), Incoming::Invalid(_)));
        assert!(matches!(
            classify(json!({"jsonrpc":"2.0"})),
            Incoming::Invalid(_)
        ));
    }

    #[test]
    fn tool_results_keep_every_block_kind() {
        let r = CallToolResult::from_value(json!({
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "data": "aGk=", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///a", "name": "a"},
                {"type": "resource", "resource": {"uri": "file:///b", "text": "inline"}},
                {"type": "hologram", "x": 1},
            ],
            "structuredContent": {"n": 1},
            "isError": true,
        }));
        assert!(r.is_error);
        assert_eq!(r.content.len(), 5);
        assert!(matches!(r.content[4], ContentBlock::Other(_)));
        assert_eq!(r.text(), "hello\ninline");
        assert_eq!(r.structured_content, Some(json!({"n": 1})));
    }

    #[test]
    fn tools_deserialize_with_defaults() {
        let t: McpTool = serde_json::from_value(json!({
            "name": "post_message",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "annotations": {"readOnlyHint": false, "openWorldHint": true},
        }))
        .unwrap();
        assert_eq!(t.annotations.open_world_hint, Some(true));
        let bare: McpTool = serde_json::from_value(json!({"name": "x"})).unwrap();
        assert_eq!(bare.input_schema, json!({"type": "object"}));
    }

    #[test]
    fn server_requests_other_than_ping_are_refused() {
        assert_eq!(answer_server_request(json!(1), "ping")["result"], json!({}));
        assert_eq!(
            answer_server_request(json!(2), "sampling/createMessage")["error"]["code"],
            METHOD_NOT_FOUND
        );
    }
}
