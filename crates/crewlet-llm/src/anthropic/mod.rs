//! Anthropic messages, with explicit prompt caching: a `cache_control`
//! breakpoint on the (stable part of the) system prompt and on the last tool.

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::config::DEFAULT_ANTHROPIC_MAX_TOKENS;
use crate::http::{AuthStyle, Endpoint, SseFrame, StreamAssembler, sse_stream};
use crate::{
    Completion, CompletionRequest, CompletionStream, ErrorClass, LlmError, LlmProvider, Message,
    ProviderConfig, StreamEvent, ToolCall, ToolChoice, Usage,
};

pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A provider speaking `POST {base_url}/v1/messages`.
#[derive(Debug)]
pub struct AnthropicProvider {
    endpoint: Endpoint,
    model: String,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

impl AnthropicProvider {
    pub fn new(config: &ProviderConfig, client: reqwest::Client) -> Result<Self, LlmError> {
        let base = config.base_url.as_deref().unwrap_or(ANTHROPIC_BASE_URL);
        let url = format!("{}/v1/messages", base.trim_end_matches('/'));
        Ok(Self {
            endpoint: Endpoint::new(config, client, url, AuthStyle::XApiKey)
                .with_header("anthropic-version", ANTHROPIC_VERSION),
            model: config.model.clone(),
            temperature: config.temperature,
            max_tokens: config.max_tokens,
        })
    }

    /// The request body for `request` (public for wire-format tests).
    pub fn body(&self, request: &CompletionRequest, stream: bool) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), self.model.clone().into());
        body.insert(
            "max_tokens".into(),
            json!(
                request
                    .max_tokens
                    .or(self.max_tokens)
                    .unwrap_or(DEFAULT_ANTHROPIC_MAX_TOKENS)
            ),
        );
        if !request.system.is_empty() {
            // Breakpoints on the blocks marked stable; with none marked, on the last.
            let any_marked = request.system.iter().any(|b| b.cache);
            let last = request.system.len() - 1;
            let blocks: Vec<Value> = request
                .system
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let mut block = json!({"type": "text", "text": b.text});
                    if b.cache || (!any_marked && i == last) {
                        block["cache_control"] = ephemeral();
                    }
                    block
                })
                .collect();
            body.insert("system".into(), blocks.into());
        }
        body.insert("messages".into(), messages(&request.messages).into());
        if !request.tools.is_empty() {
            let last = request.tools.len() - 1;
            let tools: Vec<Value> = request
                .tools
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let mut tool = json!({"name": t.name, "description": t.description,
                                          "input_schema": t.parameters});
                    if i == last {
                        tool["cache_control"] = ephemeral();
                    }
                    tool
                })
                .collect();
            body.insert("tools".into(), tools.into());
            body.insert(
                "tool_choice".into(),
                match &request.tool_choice {
                    ToolChoice::Auto => json!({"type": "auto"}),
                    ToolChoice::Required => json!({"type": "any"}),
                    ToolChoice::None => json!({"type": "none"}),
                    ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
                },
            );
        }
        if let Some(t) = request.temperature.or(self.temperature) {
            body.insert("temperature".into(), json!(t));
        }
        if stream {
            body.insert("stream".into(), true.into());
        }
        Value::Object(body)
    }

    fn parse(&self, v: &Value) -> Result<Completion, LlmError> {
        let blocks = v
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| self.endpoint.decode("answer has no content array"))?;
        let mut completion = Completion {
            model: v
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or(&self.model)
                .to_owned(),
            provider: self.endpoint.name.clone(),
            usage: v.get("usage").map(usage).unwrap_or_default(),
            ..Completion::default()
        };
        for (i, block) in blocks.iter().enumerate() {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    completion
                        .content
                        .push_str(block.get("text").and_then(Value::as_str).unwrap_or(""));
                }
                Some("tool_use") => {
                    let name = block.get("name").and_then(Value::as_str).ok_or_else(|| {
                        self.endpoint
                            .decode(format!("content[{i}] tool_use has no name"))
                    })?;
                    completion.tool_calls.push(ToolCall {
                        id: block
                            .get("id")
                            .and_then(Value::as_str)
                            .map_or_else(|| format!("toolu_{i}"), str::to_owned),
                        name: name.to_owned(),
                        arguments: block
                            .get("input")
                            .map_or_else(|| "{}".to_owned(), Value::to_string),
                    });
                }
                _ => {}
            }
        }
        Ok(completion)
    }
}

/// Anthropic counts cache reads and writes apart from `input_tokens`; ours
/// counts the whole prompt.
fn usage(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let read = n("cache_read_input_tokens");
    Usage {
        input_tokens: n("input_tokens")
            .saturating_add(read)
            .saturating_add(n("cache_creation_input_tokens")),
        output_tokens: n("output_tokens"),
        cache_read_tokens: read,
    }
}

/// Our messages as Anthropic's: tool results become `tool_result` blocks of a
/// user turn, and adjacent turns of one role merge.
fn messages(msgs: &[Message]) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in msgs {
        let (role, blocks) = match m {
            Message::User { content } => ("user", vec![text_block(content)]),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks = Vec::new();
                if !content.is_empty() || tool_calls.is_empty() {
                    blocks.push(text_block(content));
                }
                for c in tool_calls {
                    let input = match c.parsed_arguments() {
                        Ok(v @ Value::Object(_)) => v,
                        _ => json!({"_raw_arguments": c.arguments}),
                    };
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                ("assistant", blocks)
            }
            Message::Tool {
                call_id,
                content,
                is_error,
                ..
            } => {
                let mut block =
                    json!({"type": "tool_result", "tool_use_id": call_id, "content": content});
                if *is_error {
                    block["is_error"] = true.into();
                }
                ("user", vec![block])
            }
        };
        match out.last_mut() {
            Some((r, existing)) if *r == role => existing.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

fn text_block(text: &str) -> Value {
    // Anthropic refuses empty text blocks.
    let text = if text.is_empty() { "(empty)" } else { text };
    json!({"type": "text", "text": text})
}

#[async_trait]
impl LlmProvider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        let answer = self.endpoint.send_json(&self.body(request, false)).await?;
        self.parse(&answer)
    }

    async fn stream(&self, request: &CompletionRequest) -> Result<CompletionStream, LlmError> {
        let (resp, lease) = self.endpoint.send(&self.body(request, true), true).await?;
        let assembler = Assembler {
            provider: self.endpoint.name.clone(),
            completion: Completion {
                model: self.model.clone(),
                provider: self.endpoint.name.clone(),
                ..Completion::default()
            },
            raw_usage: Map::new(),
            block_to_call: Vec::new(),
        };
        Ok(sse_stream(&self.endpoint, resp, lease, Box::new(assembler)))
    }
}

/// Assembles the messages stream (`message_start`, `content_block_*`,
/// `message_delta`, `message_stop`).
struct Assembler {
    provider: String,
    completion: Completion,
    raw_usage: Map<String, Value>,
    /// Content block index -> tool call index.
    block_to_call: Vec<Option<usize>>,
}

impl Assembler {
    fn decode(&self, message: String) -> LlmError {
        LlmError::Decode {
            provider: self.provider.clone(),
            message,
        }
    }

    fn merge_usage(&mut self, u: Option<&Value>) {
        if let Some(Value::Object(u)) = u {
            for (k, v) in u {
                if !v.is_null() {
                    self.raw_usage.insert(k.clone(), v.clone());
                }
            }
        }
    }

    fn block_index(&self, v: &Value) -> Result<usize, LlmError> {
        let i = v
            .get("index")
            .and_then(Value::as_u64)
            .and_then(|i| usize::try_from(i).ok())
            .unwrap_or(0);
        if i > 4096 {
            return Err(self.decode(format!("content block index {i} is implausible")));
        }
        Ok(i)
    }
}

impl StreamAssembler for Assembler {
    fn frame(&mut self, frame: &SseFrame, out: &mut Vec<StreamEvent>) -> Result<bool, LlmError> {
        if frame.data.trim().is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(&frame.data)
            .map_err(|e| self.decode(format!("stream event is not json: {e}")))?;
        let kind = frame
            .event
            .as_deref()
            .or_else(|| v.get("type").and_then(Value::as_str))
            .unwrap_or("");
        match kind {
            "message_start" => {
                if let Some(m) = v.pointer("/message/model").and_then(Value::as_str) {
                    m.clone_into(&mut self.completion.model);
                }
                self.merge_usage(v.pointer("/message/usage"));
            }
            "content_block_start" => {
                let index = self.block_index(&v)?;
                if self.block_to_call.len() <= index {
                    self.block_to_call.resize(index + 1, None);
                }
                let block = v.get("content_block").cloned().unwrap_or(Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let call_index = self.completion.tool_calls.len();
                        let id = block
                            .get("id")
                            .and_then(Value::as_str)
                            .map_or_else(|| format!("toolu_{call_index}"), str::to_owned);
                        let name = block
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned();
                        self.completion.tool_calls.push(ToolCall {
                            id: id.clone(),
                            name: name.clone(),
                            arguments: String::new(),
                        });
                        self.block_to_call[index] = Some(call_index);
                        out.push(StreamEvent::ToolCallDelta {
                            index: call_index,
                            id: Some(id),
                            name: Some(name),
                            arguments: String::new(),
                        });
                    }
                    Some("text") => {
                        let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                        if !text.is_empty() {
                            self.completion.content.push_str(text);
                            out.push(StreamEvent::TextDelta(text.to_owned()));
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let index = self.block_index(&v)?;
                let delta = v.get("delta").cloned().unwrap_or(Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        self.completion.content.push_str(text);
                        out.push(StreamEvent::TextDelta(text.to_owned()));
                    }
                    Some("input_json_delta") => {
                        let part = delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        if let Some(Some(call)) = self.block_to_call.get(index).copied() {
                            self.completion.tool_calls[call].arguments.push_str(part);
                            out.push(StreamEvent::ToolCallDelta {
                                index: call,
                                id: None,
                                name: None,
                                arguments: part.to_owned(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => self.merge_usage(v.get("usage")),
            "message_stop" => return Ok(true),
            "error" => {
                let kind = v
                    .pointer("/error/type")
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                let message = v
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("stream error");
                let (status, class) = match kind {
                    "overloaded_error" => (529, ErrorClass::Server),
                    "rate_limit_error" => (429, ErrorClass::RateLimit),
                    "api_error" => (500, ErrorClass::Server),
                    _ => (400, ErrorClass::Fatal),
                };
                return Err(LlmError::Http {
                    provider: self.provider.clone(),
                    status,
                    class,
                    message: format!("{kind}: {message}"),
                    retry_after: None,
                });
            }
            _ => {}
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<Completion, LlmError> {
        let mut completion = self.completion;
        completion.usage = usage(&Value::Object(self.raw_usage));
        for call in &mut completion.tool_calls {
            if call.arguments.trim().is_empty() {
                call.arguments = "{}".to_owned();
            }
        }
        Ok(completion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SystemBlock, ToolSpec};

    fn provider() -> Result<AnthropicProvider, LlmError> {
        let cfg = ProviderConfig::new("claude", crate::ProviderKind::Anthropic, "claude-test");
        AnthropicProvider::new(&cfg, reqwest::Client::new())
    }

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("{name} things"),
            parameters: json!({"type": "object"}),
        }
    }

    #[test]
    fn cache_breakpoints_sit_on_the_stable_system_block_and_the_last_tool() -> Result<(), LlmError>
    {
        let p = provider()?;
        let req = CompletionRequest {
            system: vec![
                SystemBlock::stable("who"),
                SystemBlock::volatile("what now"),
            ],
            messages: vec![Message::user("go")],
            tools: vec![tool("a"), tool("b"), tool("c")],
            ..CompletionRequest::default()
        };
        let b = p.body(&req, false);
        assert_eq!(
            b["system"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert!(b["system"][1].get("cache_control").is_none());
        assert!(b["tools"][0].get("cache_control").is_none());
        assert!(b["tools"][1].get("cache_control").is_none());
        assert_eq!(b["tools"][2]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(b["tools"][2]["input_schema"], json!({"type": "object"}));
        assert_eq!(b["max_tokens"], 4096);
        // no block marked: the breakpoint goes on the last
        let req = CompletionRequest {
            system: vec![SystemBlock::volatile("x"), SystemBlock::volatile("y")],
            ..req
        };
        let b = p.body(&req, false);
        assert!(b["system"][0].get("cache_control").is_none());
        assert_eq!(b["system"][1]["cache_control"]["type"], "ephemeral");
        Ok(())
    }

    #[test]
    fn tool_results_merge_into_one_user_turn() {
        let msgs = messages(&[
            Message::user("go"),
            Message::assistant(
                "thinking",
                vec![
                    ToolCall {
                        id: "t1".into(),
                        name: "a".into(),
                        arguments: "{\"x\":1}".into(),
                    },
                    ToolCall {
                        id: "t2".into(),
                        name: "b".into(),
                        arguments: "not json".into(),
                    },
                ],
            ),
            Message::Tool {
                call_id: "t1".into(),
                name: "a".into(),
                content: "r1".into(),
                is_error: false,
            },
            Message::Tool {
                call_id: "t2".into(),
                name: "b".into(),
                content: "bad".into(),
                is_error: true,
            },
        ]);
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[1]["content"][1]["input"], json!({"x": 1}));
        assert_eq!(msgs[1]["content"][2]["input"]["_raw_arguments"], "not json");
        assert_eq!(msgs[2]["role"], "user");
        assert_eq!(msgs[2]["content"].as_array().map(Vec::len), Some(2));
        assert_eq!(msgs[2]["content"][1]["is_error"], true);
    }

    #[test]
    fn tool_choice_maps_to_anthropic_names() -> Result<(), LlmError> {
        let p = provider()?;
        let mut req = CompletionRequest {
            messages: vec![Message::user("go")],
            tools: vec![tool("a")],
            tool_choice: ToolChoice::Required,
            ..CompletionRequest::default()
        };
        assert_eq!(p.body(&req, false)["tool_choice"], json!({"type": "any"}));
        req.tool_choice = ToolChoice::Tool("a".into());
        assert_eq!(
            p.body(&req, false)["tool_choice"],
            json!({"type": "tool", "name": "a"})
        );
        Ok(())
    }

    #[test]
    fn stream_events_assemble_and_errors_are_classified() -> Result<(), LlmError> {
        let mut a = Box::new(Assembler {
            provider: "p".into(),
            completion: Completion::default(),
            raw_usage: Map::new(),
            block_to_call: Vec::new(),
        });
        let frames = [
            (
                "message_start",
                r#"{"message":{"model":"claude-x","usage":{"input_tokens":5,"cache_read_input_tokens":20,"output_tokens":1}}}"#,
            ),
            (
                "content_block_start",
                r#"{"index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
            ),
            (
                "content_block_start",
                r#"{"index":1,"content_block":{"type":"tool_use","id":"tu1","name":"look","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"index":1,"delta":{"type":"input_json_delta","partial_json":"{\"q\":"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"index":1,"delta":{"type":"input_json_delta","partial_json":"3}"}}"#,
            ),
            (
                "message_delta",
                r#"{"delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
            ),
        ];
        let mut out = Vec::new();
        for (event, data) in frames {
            let done = a.frame(
                &SseFrame {
                    event: Some(event.into()),
                    data: data.into(),
                },
                &mut out,
            )?;
            assert!(!done);
        }
        let stop = SseFrame {
            event: Some("message_stop".into()),
            data: "{}".into(),
        };
        assert!(a.frame(&stop, &mut out)?);
        let c = a.finish()?;
        assert_eq!((c.content.as_str(), c.model.as_str()), ("Hi", "claude-x"));
        assert_eq!(c.tool_calls[0].arguments, "{\"q\":3}");
        assert_eq!(
            c.usage,
            Usage {
                input_tokens: 25,
                output_tokens: 9,
                cache_read_tokens: 20
            }
        );

        let mut b = Box::new(Assembler {
            provider: "p".into(),
            completion: Completion::default(),
            raw_usage: Map::new(),
            block_to_call: Vec::new(),
        });
        let err = b
            .frame(
                &SseFrame {
                    event: Some("error".into()),
                    data: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(),
                },
                &mut out,
            )
            .err();
        assert_eq!(err.map(|e| e.class()), Some(ErrorClass::Server));
        Ok(())
    }

    #[test]
    fn usage_counts_the_whole_prompt() {
        let u = usage(&json!({"input_tokens": 10, "output_tokens": 5,
            "cache_read_input_tokens": 80, "cache_creation_input_tokens": 7}));
        assert_eq!(
            u,
            Usage {
                input_tokens: 97,
                output_tokens: 5,
                cache_read_tokens: 80
            }
        );
    }
}
