//! The provider-neutral shape of a model call: what goes in, what comes out.

use std::fmt;

use serde::{Deserialize, Serialize};

/// One block of the system prompt. Blocks are sent in order; `cache` marks
/// where a provider with explicit prompt caching (Anthropic) puts a cache
/// breakpoint. Put what is stable across calls (company, seat, phase) first
/// and mark it; the per-turn part (trigger, plan) goes in a later block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemBlock {
    pub text: String,
    #[serde(default)]
    pub cache: bool,
}

impl SystemBlock {
    pub fn stable(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            cache: true,
        }
    }

    pub fn volatile(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            cache: false,
        }
    }
}

/// A model's request to run one tool. `arguments` is the raw JSON text the
/// model produced (it may be malformed: see [`ToolCall::parsed_arguments`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

impl ToolCall {
    /// The arguments as a JSON object; an empty argument string is `{}`.
    pub fn parsed_arguments(&self) -> Result<serde_json::Value, serde_json::Error> {
        if self.arguments.trim().is_empty() {
            return Ok(serde_json::Value::Object(serde_json::Map::new()));
        }
        serde_json::from_str(&self.arguments)
    }
}

/// One message of the conversation after the system prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    User {
        content: String,
    },
    Assistant {
        content: String,
        #[serde(default)]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of a tool call, answering the call with `call_id`.
    Tool {
        call_id: String,
        name: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
}

impl Message {
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Message::Assistant {
            content: content.into(),
            tool_calls,
        }
    }

    /// The bytes of text the message carries (content, tool names and
    /// arguments): an upper bound of its tokens for budgeting.
    pub fn text_len(&self) -> usize {
        match self {
            Message::User { content } => content.len(),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                content.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                        .sum::<usize>()
            }
            Message::Tool {
                call_id,
                name,
                content,
                ..
            } => call_id.len() + name.len() + content.len(),
        }
    }
}

/// A tool as offered to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// Whether and which tool the model must call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must not call tools.
    None,
    /// The model must call this tool.
    Tool(String),
}

/// One model call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    pub system: Vec<SystemBlock>,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    /// Overrides the provider entry's `temperature` when set.
    pub temperature: Option<f32>,
    /// Overrides the provider entry's `max_tokens` when set.
    pub max_tokens: Option<u32>,
}

/// Tokens one call used. `input_tokens` counts the whole prompt, including
/// the part read from the provider's prompt cache (`cache_read_tokens`) and
/// the part written to it, so `input + output` is what a budget is charged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
    }
}

/// What a model answered.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    /// The model that answered, as the provider reported it.
    pub model: String,
    /// The provider entry that served the call (its name in `providers.llm`).
    pub provider: String,
}

/// One item of a streamed completion: deltas as they arrive, then exactly
/// one `Completed` with the assembled answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    TextDelta(String),
    /// A piece of tool call number `index`: the id and name arrive first (once),
    /// then argument text in pieces.
    ToolCallDelta {
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Completed(Completion),
}

/// An API key. Its `Debug` and `Display` never show the secret.
#[derive(Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(transparent)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The secret itself, for the request header and nothing else.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A safe label for logs: the last four characters when the key is long
    /// enough that they reveal nothing, e.g. `...wxyz`.
    pub fn label(&self) -> String {
        let n = self.0.chars().count();
        if n >= 16 {
            let tail: String = self.0.chars().skip(n - 4).collect();
            format!("...{tail}")
        } else {
            "***".to_owned()
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({})", self.label())
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_never_shows_in_debug_or_display() {
        let key = ApiKey::new("sk-live-0123456789abcdefWXYZ");
        let dbg = format!("{key:?} {key}");
        assert!(!dbg.contains("0123456789"), "{dbg}");
        assert!(dbg.contains("...WXYZ"), "{dbg}");
        assert_eq!(format!("{:?}", ApiKey::new("short")), "ApiKey(***)");
    }

    #[test]
    fn empty_arguments_parse_as_an_empty_object() {
        let call = ToolCall {
            id: "c".into(),
            name: "t".into(),
            arguments: " ".into(),
        };
        assert_eq!(call.parsed_arguments().ok(), Some(serde_json::json!({})));
    }

    #[test]
    fn usage_total_counts_input_and_output() {
        let mut u = Usage {
            input_tokens: 10,
            output_tokens: 5,
            cache_read_tokens: 4,
        };
        u.add(&Usage {
            input_tokens: 1,
            output_tokens: 2,
            cache_read_tokens: 3,
        });
        assert_eq!((u.total(), u.cache_read_tokens), (18, 7));
    }
}
