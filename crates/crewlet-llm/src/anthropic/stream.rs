//! The streaming answer: server-sent `message_*` and `content_block_*`
//! events assembled into a [`Completion`] as they arrive.

use serde_json::{Map, Value};

use super::usage;
use crate::http::{SseFrame, StreamAssembler};
use crate::{Completion, ErrorClass, LlmError, StreamEvent, ToolCall};

/// Assembles the messages stream (`message_start`, `content_block_*`,
/// `message_delta`, `message_stop`).
pub(super) struct Assembler {
    pub(super) provider: String,
    pub(super) completion: Completion,
    pub(super) raw_usage: Map<String, Value>,
    /// Content block index -> tool call index.
    pub(super) block_to_call: Vec<Option<usize>>,
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
                if let Some(message) = crate::error::context_overflow_message(&v) {
                    return Err(LlmError::ContextOverflow {
                        provider: self.provider.clone(),
                        message,
                    });
                }
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
