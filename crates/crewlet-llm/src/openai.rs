//! OpenAI chat completions, and every server that speaks them
//! (`openai-compatible` with a `base_url`).

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::http::{AuthStyle, Endpoint, SseFrame, StreamAssembler, sse_stream};
use crate::{
    Completion, CompletionRequest, CompletionStream, LlmError, LlmProvider, Message,
    ProviderConfig, ProviderKind, StreamEvent, ToolCall, ToolChoice, Usage,
};

pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// A provider speaking `POST {base_url}/chat/completions`.
#[derive(Debug)]
pub struct OpenAiProvider {
    endpoint: Endpoint,
    model: String,
    kind: ProviderKind,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
}

impl OpenAiProvider {
    pub fn new(config: &ProviderConfig, client: reqwest::Client) -> Result<Self, LlmError> {
        let base = match (&config.base_url, config.kind) {
            (Some(url), _) => url.clone(),
            (None, ProviderKind::OpenAiCompatible) => {
                return Err(LlmError::Config {
                    provider: config.name.clone(),
                    message: "type openai-compatible needs a `base_url`".into(),
                });
            }
            (None, _) => OPENAI_BASE_URL.to_owned(),
        };
        let url = format!("{}/chat/completions", base.trim_end_matches('/'));
        Ok(Self {
            endpoint: Endpoint::new(config, client, url, AuthStyle::Bearer),
            model: config.model.clone(),
            kind: config.kind,
            temperature: config.temperature,
            max_tokens: config.max_tokens,
        })
    }

    /// The request body for `request` (public for wire-format tests).
    pub fn body(&self, request: &CompletionRequest, stream: bool) -> Value {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        let system: Vec<&str> = request.system.iter().map(|b| b.text.as_str()).collect();
        if !system.is_empty() {
            messages.push(json!({"role": "system", "content": system.join("\n\n")}));
        }
        for m in &request.messages {
            messages.push(match m {
                Message::User { content } => json!({"role": "user", "content": content}),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut msg = Map::new();
                    msg.insert("role".into(), "assistant".into());
                    msg.insert(
                        "content".into(),
                        if content.is_empty() && !tool_calls.is_empty() {
                            Value::Null
                        } else {
                            content.clone().into()
                        },
                    );
                    if !tool_calls.is_empty() {
                        let calls: Vec<Value> = tool_calls
                            .iter()
                            .map(|c| {
                                json!({"id": c.id, "type": "function",
                                       "function": {"name": c.name, "arguments": c.arguments}})
                            })
                            .collect();
                        msg.insert("tool_calls".into(), calls.into());
                    }
                    Value::Object(msg)
                }
                Message::Tool {
                    call_id, content, ..
                } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
            });
        }
        let mut body = Map::new();
        body.insert("model".into(), self.model.clone().into());
        body.insert("messages".into(), messages.into());
        if !request.tools.is_empty() {
            // A named tool: OpenAI takes the object form, but compatible
            // servers may know only the strings (llama.cpp reads the object
            // as "auto"), so they get "required" with that one tool offered,
            // which asks for the same.
            let named = match (&request.tool_choice, self.kind) {
                (ToolChoice::Tool(name), ProviderKind::OpenAiCompatible)
                    if request.tools.iter().any(|t| &t.name == name) =>
                {
                    Some(name)
                }
                _ => None,
            };
            let tools: Vec<Value> = request
                .tools
                .iter()
                .filter(|t| named.is_none_or(|n| &t.name == n))
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
            body.insert("tools".into(), tools.into());
            body.insert(
                "tool_choice".into(),
                match &request.tool_choice {
                    ToolChoice::Auto => "auto".into(),
                    ToolChoice::Required => "required".into(),
                    ToolChoice::Tool(_) if named.is_some() => "required".into(),
                    ToolChoice::None => "none".into(),
                    ToolChoice::Tool(name) => {
                        json!({"type": "function", "function": {"name": name}})
                    }
                },
            );
        }
        if let Some(t) = request.temperature.or(self.temperature) {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(n) = request.max_tokens.or(self.max_tokens) {
            // OpenAI's current models refuse `max_tokens`; compatible servers
            // mostly know only `max_tokens`.
            let field = match self.kind {
                ProviderKind::OpenAi => "max_completion_tokens",
                _ => "max_tokens",
            };
            body.insert(field.into(), json!(n));
        }
        if stream {
            body.insert("stream".into(), true.into());
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        Value::Object(body)
    }

    fn parse(&self, v: &Value) -> Result<Completion, LlmError> {
        let message = v
            .pointer("/choices/0/message")
            .ok_or_else(|| self.endpoint.decode("answer has no choices[0].message"))?;
        let content = message
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut tool_calls = Vec::new();
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            for (i, c) in calls.iter().enumerate() {
                let name = c
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        self.endpoint
                            .decode(format!("tool_calls[{i}] has no function.name"))
                    })?;
                tool_calls.push(ToolCall {
                    id: c
                        .get("id")
                        .and_then(Value::as_str)
                        .map_or_else(|| format!("call_{i}"), str::to_owned),
                    name: name.to_owned(),
                    arguments: c
                        .pointer("/function/arguments")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                });
            }
        }
        Ok(Completion {
            content,
            tool_calls,
            usage: v.get("usage").map(usage).unwrap_or_default(),
            model: v
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or(&self.model)
                .to_owned(),
            provider: self.endpoint.name.clone(),
        })
    }
}

fn usage(u: &Value) -> Usage {
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: n("/prompt_tokens"),
        output_tokens: n("/completion_tokens"),
        cache_read_tokens: n("/prompt_tokens_details/cached_tokens"),
    }
}

#[async_trait]
impl LlmProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn max_tokens(&self) -> Option<u32> {
        self.max_tokens
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
        };
        Ok(sse_stream(&self.endpoint, resp, lease, Box::new(assembler)))
    }
}

/// Assembles `chat.completion.chunk` frames.
struct Assembler {
    provider: String,
    completion: Completion,
}

impl StreamAssembler for Assembler {
    fn frame(&mut self, frame: &SseFrame, out: &mut Vec<StreamEvent>) -> Result<bool, LlmError> {
        let data = frame.data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| LlmError::Decode {
            provider: self.provider.clone(),
            message: format!("stream chunk is not json: {e}"),
        })?;
        if let Some(message) = crate::error::context_overflow_message(&chunk) {
            return Err(LlmError::ContextOverflow {
                provider: self.provider.clone(),
                message,
            });
        }
        if let Some(err) = chunk.get("error") {
            return Err(LlmError::Decode {
                provider: self.provider.clone(),
                message: format!("stream error: {err}"),
            });
        }
        if let Some(model) = chunk.get("model").and_then(Value::as_str) {
            model.clone_into(&mut self.completion.model);
        }
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.completion.usage = usage(u);
        }
        let Some(delta) = chunk.pointer("/choices/0/delta") else {
            return Ok(false);
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.completion.content.push_str(text);
            out.push(StreamEvent::TextDelta(text.to_owned()));
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or(0);
            // Bound what a hostile stream can make us allocate.
            if index > 1024 {
                return Err(LlmError::Decode {
                    provider: self.provider.clone(),
                    message: format!("tool call index {index} is implausible"),
                });
            }
            let calls = &mut self.completion.tool_calls;
            while calls.len() <= index {
                calls.push(ToolCall {
                    id: format!("call_{}", calls.len()),
                    name: String::new(),
                    arguments: String::new(),
                });
            }
            let id = call.get("id").and_then(Value::as_str).map(str::to_owned);
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let args = call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let slot = &mut calls[index];
            if let Some(id) = &id {
                slot.id.clone_from(id);
            }
            if let Some(name) = &name {
                slot.name.push_str(name);
            }
            slot.arguments.push_str(args);
            out.push(StreamEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments: args.to_owned(),
            });
        }
        Ok(false)
    }

    fn finish(self: Box<Self>) -> Result<Completion, LlmError> {
        let mut completion = self.completion;
        completion.tool_calls.retain(|c| !c.name.is_empty());
        Ok(completion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SystemBlock, ToolSpec};

    fn provider(kind: ProviderKind) -> Result<OpenAiProvider, LlmError> {
        let cfg = ProviderConfig::new("main", kind, "gpt-test")
            .with_base_url("http://127.0.0.1:1/v1/")
            .with_max_tokens(100);
        OpenAiProvider::new(&cfg, reqwest::Client::new())
    }

    fn request() -> CompletionRequest {
        CompletionRequest {
            system: vec![SystemBlock::stable("a"), SystemBlock::volatile("b")],
            messages: vec![
                Message::user("hi"),
                Message::assistant(
                    "",
                    vec![ToolCall {
                        id: "c1".into(),
                        name: "look".into(),
                        arguments: "{\"q\":1}".into(),
                    }],
                ),
                Message::Tool {
                    call_id: "c1".into(),
                    name: "look".into(),
                    content: "found".into(),
                    is_error: false,
                },
            ],
            tools: vec![ToolSpec {
                name: "look".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            tool_choice: ToolChoice::Required,
            ..CompletionRequest::default()
        }
    }

    #[test]
    fn body_follows_the_chat_completions_wire() -> Result<(), LlmError> {
        let p = provider(ProviderKind::OpenAi)?;
        assert_eq!(p.endpoint.url, "http://127.0.0.1:1/v1/chat/completions");
        let b = p.body(&request(), false);
        assert_eq!(
            b["messages"][0],
            json!({"role": "system", "content": "a\n\nb"})
        );
        assert_eq!(b["messages"][2]["content"], Value::Null);
        assert_eq!(
            b["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"q\":1}"
        );
        assert_eq!(b["messages"][3]["tool_call_id"], "c1");
        assert_eq!(b["tools"][0]["function"]["name"], "look");
        assert_eq!(b["tool_choice"], "required");
        assert_eq!(b["max_completion_tokens"], 100);
        assert!(b.get("stream").is_none());
        let compat = provider(ProviderKind::OpenAiCompatible)?.body(&request(), true);
        assert_eq!(compat["max_tokens"], 100);
        assert_eq!(compat["stream_options"]["include_usage"], true);
        Ok(())
    }

    #[test]
    fn no_tools_means_no_tool_choice() -> Result<(), LlmError> {
        let p = provider(ProviderKind::OpenAi)?;
        let mut r = request();
        r.tools.clear();
        let b = p.body(&r, false);
        assert!(b.get("tools").is_none() && b.get("tool_choice").is_none());
        Ok(())
    }

    #[test]
    fn a_named_tool_is_required_and_offered_alone_on_compatible_servers() -> Result<(), LlmError> {
        let mut r = request();
        r.tools.push(ToolSpec {
            name: "other".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        });
        r.tool_choice = ToolChoice::Tool("look".into());
        let compat = provider(ProviderKind::OpenAiCompatible)?.body(&r, false);
        assert_eq!(compat["tool_choice"], "required");
        assert_eq!(compat["tools"].as_array().map(Vec::len), Some(1));
        assert_eq!(compat["tools"][0]["function"]["name"], "look");
        let openai = provider(ProviderKind::OpenAi)?.body(&r, false);
        assert_eq!(openai["tool_choice"]["function"]["name"], "look");
        assert_eq!(openai["tools"].as_array().map(Vec::len), Some(2));
        // a name not offered is passed on as asked
        r.tool_choice = ToolChoice::Tool("missing".into());
        let compat = provider(ProviderKind::OpenAiCompatible)?.body(&r, false);
        assert_eq!(compat["tool_choice"]["function"]["name"], "missing");
        Ok(())
    }

    #[test]
    fn compatible_needs_a_base_url() {
        let cfg = ProviderConfig::new("local", ProviderKind::OpenAiCompatible, "m");
        assert!(matches!(
            OpenAiProvider::new(&cfg, reqwest::Client::new()),
            Err(LlmError::Config { .. })
        ));
    }

    #[test]
    fn answer_without_choices_is_a_decode_error() -> Result<(), LlmError> {
        let p = provider(ProviderKind::OpenAi)?;
        assert!(matches!(
            p.parse(&json!({"error": "x"})),
            Err(LlmError::Decode { .. })
        ));
        Ok(())
    }

    #[test]
    fn stream_chunks_assemble_text_tool_calls_and_usage() -> Result<(), LlmError> {
        let mut a = Box::new(Assembler {
            provider: "p".into(),
            completion: Completion::default(),
        });
        let frames = [
            r#"{"model":"m1","choices":[{"delta":{"content":"Hel"}}]}"#,
            r#"{"choices":[{"delta":{"content":"lo"}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c9","function":{"name":"look","arguments":"{\"q\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":2}"}}]}}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}"#,
            "[DONE]",
        ];
        let mut out = Vec::new();
        let mut done = false;
        for f in frames {
            done = a.frame(
                &SseFrame {
                    event: None,
                    data: f.into(),
                },
                &mut out,
            )?;
        }
        assert!(done);
        assert_eq!(out.len(), 4);
        let c = a.finish()?;
        assert_eq!(c.content, "Hello");
        assert_eq!(c.model, "m1");
        assert_eq!(c.tool_calls[0].id, "c9");
        assert_eq!(c.tool_calls[0].arguments, "{\"q\":2}");
        assert_eq!(
            c.usage,
            Usage {
                input_tokens: 10,
                output_tokens: 3,
                cache_read_tokens: 4
            }
        );
        Ok(())
    }
}
