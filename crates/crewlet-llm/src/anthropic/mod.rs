//! Anthropic messages, with explicit prompt caching: a `cache_control`
//! breakpoint on the (stable part of the) system prompt and on the last tool.

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::config::DEFAULT_ANTHROPIC_MAX_TOKENS;
use crate::http::{AuthStyle, Endpoint, sse_stream};
use crate::{
    Completion, CompletionRequest, CompletionStream, LlmError, LlmProvider, Message,
    ProviderConfig, ToolCall, ToolChoice, Usage,
};

mod stream;

use stream::Assembler;

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

    fn max_tokens(&self) -> Option<u32> {
        Some(self.max_tokens.unwrap_or(DEFAULT_ANTHROPIC_MAX_TOKENS))
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

#[cfg(test)]
mod tests;
