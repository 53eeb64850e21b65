//! What the fake model answers: an ordered list of rules, each a condition
//! on the request and a canned reply.

use std::time::Duration;

use serde_json::Value;

use super::Wire;

/// A request as the rules see it, the same for both wire formats.
#[derive(Debug, Clone, Default)]
pub struct SeenRequest {
    pub wire: Option<Wire>,
    pub api_key: Option<String>,
    pub model: String,
    /// Names of the tools offered, in order.
    pub tools: Vec<String>,
    /// `auto`, `required` (Anthropic `any`), `none` or `tool:<name>`; empty if unset.
    pub tool_choice: String,
    /// The whole system prompt (blocks joined by a blank line).
    pub system: String,
    /// Text of the last message, whatever its role (a tool result's content
    /// when the last message carries tool results).
    pub last_message: String,
    /// Whether the last message carries tool results.
    pub last_is_tool_result: bool,
    /// Content of the most recent tool result anywhere in the conversation.
    pub last_tool_result: Option<String>,
    /// Every message's text, in order (system excluded).
    pub transcript: Vec<String>,
    pub stream: bool,
}

/// A condition on a request. Every condition set must hold.
#[derive(Debug, Clone, Default)]
pub struct When {
    tool_offered: Vec<String>,
    tool_not_offered: Vec<String>,
    no_tools: bool,
    last_message_contains: Option<String>,
    last_tool_result_contains: Option<String>,
    after_tool_result: Option<bool>,
    system_contains: Option<String>,
    transcript_contains: Option<String>,
    api_key: Option<String>,
    wire: Option<Wire>,
    tool_choice: Option<String>,
}

impl When {
    /// Every request.
    pub fn any() -> Self {
        Self::default()
    }

    /// The tool `name` is offered.
    pub fn tool_offered(name: &str) -> Self {
        Self::any().and_tool_offered(name)
    }

    pub fn and_tool_offered(mut self, name: &str) -> Self {
        self.tool_offered.push(name.to_owned());
        self
    }

    pub fn and_tool_not_offered(mut self, name: &str) -> Self {
        self.tool_not_offered.push(name.to_owned());
        self
    }

    /// No tools are offered at all.
    pub fn no_tools() -> Self {
        Self {
            no_tools: true,
            ..Self::default()
        }
    }

    pub fn last_message_contains(text: &str) -> Self {
        Self::any().and_last_message_contains(text)
    }

    pub fn and_last_message_contains(mut self, text: &str) -> Self {
        self.last_message_contains = Some(text.to_owned());
        self
    }

    pub fn tool_result_contains(text: &str) -> Self {
        Self::any().and_tool_result_contains(text)
    }

    pub fn and_tool_result_contains(mut self, text: &str) -> Self {
        self.last_tool_result_contains = Some(text.to_owned());
        self
    }

    /// The last message carries tool results (`true`) or does not (`false`).
    pub fn and_after_tool_result(mut self, yes: bool) -> Self {
        self.after_tool_result = Some(yes);
        self
    }

    pub fn after_tool_result() -> Self {
        Self::any().and_after_tool_result(true)
    }

    pub fn system_contains(text: &str) -> Self {
        Self::any().and_system_contains(text)
    }

    pub fn and_system_contains(mut self, text: &str) -> Self {
        self.system_contains = Some(text.to_owned());
        self
    }

    /// Some message (system excluded) contains `text`.
    pub fn and_transcript_contains(mut self, text: &str) -> Self {
        self.transcript_contains = Some(text.to_owned());
        self
    }

    /// The request carries this API key.
    pub fn api_key(key: &str) -> Self {
        Self::any().and_api_key(key)
    }

    pub fn and_api_key(mut self, key: &str) -> Self {
        self.api_key = Some(key.to_owned());
        self
    }

    pub fn and_wire(mut self, wire: Wire) -> Self {
        self.wire = Some(wire);
        self
    }

    /// `tool_choice` is exactly this (`required`, `auto`, `none`, `tool:<name>`).
    pub fn and_tool_choice(mut self, choice: &str) -> Self {
        self.tool_choice = Some(choice.to_owned());
        self
    }

    pub fn matches(&self, r: &SeenRequest) -> bool {
        self.tool_offered.iter().all(|t| r.tools.contains(t))
            && !self.tool_not_offered.iter().any(|t| r.tools.contains(t))
            && (!self.no_tools || r.tools.is_empty())
            && self
                .last_message_contains
                .as_ref()
                .is_none_or(|s| r.last_message.contains(s.as_str()))
            && self.last_tool_result_contains.as_ref().is_none_or(|s| {
                r.last_tool_result
                    .as_ref()
                    .is_some_and(|t| t.contains(s.as_str()))
            })
            && self
                .after_tool_result
                .is_none_or(|yes| r.last_is_tool_result == yes)
            && self
                .system_contains
                .as_ref()
                .is_none_or(|s| r.system.contains(s.as_str()))
            && self
                .transcript_contains
                .as_ref()
                .is_none_or(|s| r.transcript.iter().any(|m| m.contains(s.as_str())))
            && self
                .api_key
                .as_ref()
                .is_none_or(|k| r.api_key.as_deref() == Some(k.as_str()))
            && self.wire.is_none_or(|w| r.wire == Some(w))
            && self
                .tool_choice
                .as_ref()
                .is_none_or(|c| &r.tool_choice == c)
    }
}

/// Token counts a reply reports. `input` is the whole prompt: on the
/// Anthropic wire it is split into `input_tokens = input - cache_read` and
/// `cache_read_input_tokens = cache_read`, so a client that sums them sees
/// the same `input` on both wires.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FakeUsage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
}

/// What the model says.
#[derive(Debug, Clone)]
pub enum Answer {
    Text(String),
    /// Tool calls (name, arguments object), with optional text before them.
    ToolCalls {
        text: String,
        calls: Vec<(String, Value)>,
    },
    /// An error status with a provider-style JSON error body.
    Status {
        status: u16,
        retry_after: Option<String>,
        message: String,
    },
}

/// A canned reply: the answer, its usage, and how it is delivered.
#[derive(Debug, Clone)]
pub struct Reply {
    pub answer: Answer,
    pub usage: FakeUsage,
    /// Wait this long before answering (slow model, timeouts).
    pub delay: Duration,
    /// For a streamed answer: wait this long between two events (a stream
    /// that stalls mid-way).
    pub stream_gap: Duration,
    /// Answer with this model name instead of the requested one.
    pub model: Option<String>,
    /// Use the rule at most this many times (then it is skipped).
    pub times: Option<usize>,
}

impl Reply {
    fn of(answer: Answer) -> Self {
        Self {
            answer,
            usage: FakeUsage::default(),
            delay: Duration::ZERO,
            stream_gap: Duration::ZERO,
            model: None,
            times: None,
        }
    }

    pub fn text(text: impl Into<String>) -> Self {
        Self::of(Answer::Text(text.into()))
    }

    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Self::of(Answer::ToolCalls {
            text: String::new(),
            calls: vec![(name.into(), arguments)],
        })
    }

    pub fn tool_calls<I, S>(calls: I) -> Self
    where
        I: IntoIterator<Item = (S, Value)>,
        S: Into<String>,
    {
        Self::of(Answer::ToolCalls {
            text: String::new(),
            calls: calls.into_iter().map(|(n, a)| (n.into(), a)).collect(),
        })
    }

    /// An error answer with this status.
    pub fn status(status: u16) -> Self {
        Self::of(Answer::Status {
            status,
            retry_after: None,
            message: format!("fake llm says {status}"),
        })
    }

    /// 429 with `Retry-After: <seconds>`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::of(Answer::Status {
            status: 429,
            retry_after: Some(retry_after_secs.to_string()),
            message: "rate limit reached".into(),
        })
    }

    pub fn usage(mut self, input: u64, output: u64) -> Self {
        self.usage.input = input;
        self.usage.output = output;
        self
    }

    pub fn cache_read(mut self, tokens: u64) -> Self {
        self.usage.cache_read = tokens;
        self
    }

    pub fn stream_gap(mut self, gap: Duration) -> Self {
        self.stream_gap = gap;
        self
    }

    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    pub fn times(mut self, n: usize) -> Self {
        self.times = Some(n);
        self
    }

    /// Text said before the tool calls of a tool-call reply.
    pub fn with_text(mut self, said: impl Into<String>) -> Self {
        if let Answer::ToolCalls { text, .. } = &mut self.answer {
            *text = said.into();
        }
        self
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub when: When,
    pub reply: Reply,
    pub used: usize,
}

/// The rules, tried in order; the first that matches and is not used up answers.
#[derive(Debug, Clone, Default)]
pub struct Script {
    pub(crate) rules: Vec<Rule>,
}

impl Script {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn on(mut self, when: When, reply: Reply) -> Self {
        self.push(when, reply);
        self
    }

    pub fn push(&mut self, when: When, reply: Reply) {
        self.rules.push(Rule {
            when,
            reply,
            used: 0,
        });
    }

    /// Picks the answering rule and counts the use.
    pub(crate) fn answer(&mut self, seen: &SeenRequest) -> Option<(usize, Reply)> {
        let (i, rule) = self
            .rules
            .iter_mut()
            .enumerate()
            .find(|(_, r)| r.reply.times.is_none_or(|n| r.used < n) && r.when.matches(seen))?;
        rule.used += 1;
        Some((i, rule.reply.clone()))
    }
}
