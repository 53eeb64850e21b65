//! What can go wrong talking to a model, and how each failure is classed.

use std::time::Duration;

/// The class of a failed call, which decides what happens next: rate limits
/// and auth failures cool the key and try another; server errors and
/// timeouts are retried briefly; fatal errors are not retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// 429, 402: the key is throttled or out of credit.
    RateLimit,
    /// 401, 403: the key is refused.
    Auth,
    /// 408 or a network failure (connect, read, timeout).
    Timeout,
    /// 5xx.
    Server,
    /// Anything else: a bad request, an unreadable answer.
    Fatal,
    /// The provider's circuit breaker is open after repeated failures: the
    /// call was not sent.
    CircuitOpen,
}

impl ErrorClass {
    /// The class of an HTTP status that is not a success.
    pub fn from_status(status: u16) -> Self {
        match status {
            429 | 402 => ErrorClass::RateLimit,
            401 | 403 => ErrorClass::Auth,
            408 => ErrorClass::Timeout,
            500..=599 => ErrorClass::Server,
            _ => ErrorClass::Fatal,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorClass::RateLimit => "rate_limit",
            ErrorClass::Auth => "auth",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Server => "server",
            ErrorClass::Fatal => "fatal",
            ErrorClass::CircuitOpen => "circuit_open",
        }
    }
}

/// A failed model or embedding call. Messages name the provider entry; they
/// never contain an API key.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("provider `{provider}`: http {status} ({class}): {message}", class = class.as_str())]
    Http {
        provider: String,
        status: u16,
        class: ErrorClass,
        message: String,
        /// `Retry-After` of a rate-limited answer.
        retry_after: Option<Duration>,
    },
    #[error("provider `{provider}`: no answer within {timeout:?}")]
    Timeout { provider: String, timeout: Duration },
    #[error("provider `{provider}`: network error: {message}")]
    Network { provider: String, message: String },
    #[error(
        "provider `{provider}`: every api key is cooling down after rate limits or auth failures; add keys or wait"
    )]
    CredentialsExhausted {
        provider: String,
        /// How long until the first key is usable again.
        retry_in: Option<Duration>,
    },
    #[error(
        "provider `{provider}`: circuit open after repeated failures; next trial call in {} s",
        retry_in.as_secs()
    )]
    CircuitOpen {
        provider: String,
        /// How long until a trial call may go.
        retry_in: Duration,
    },
    #[error("provider `{provider}`: unreadable answer: {message}")]
    Decode { provider: String, message: String },
    /// The prompt does not fit the model's context window. Retrying or
    /// another key cannot help; a shorter prompt (or a model with a larger
    /// window) can.
    #[error("provider `{provider}`: the prompt exceeds the model's context window: {message}")]
    ContextOverflow { provider: String, message: String },
    #[error("provider `{provider}` is misconfigured: {message}")]
    Config { provider: String, message: String },
    #[error("no llm provider named `{name}` in providers.llm")]
    UnknownProvider { name: String },
    #[error("providers.llm is empty: at least one provider entry is needed")]
    NoProviders,
    #[error("provider `{provider}`: scripted model has no answer left")]
    ScriptExhausted { provider: String },
    /// A `cli-agent` (subscription CLI) call failed; the source says how.
    #[error("provider `{provider}`: {source}")]
    CliAgent {
        provider: String,
        #[source]
        source: crate::cli_agent::CliAgentError,
    },
}

impl LlmError {
    /// The class of this failure (see [`ErrorClass`]).
    pub fn class(&self) -> ErrorClass {
        match self {
            LlmError::Http { class, .. } => *class,
            LlmError::Timeout { .. } | LlmError::Network { .. } => ErrorClass::Timeout,
            LlmError::CredentialsExhausted { .. } => ErrorClass::RateLimit,
            LlmError::CircuitOpen { .. } => ErrorClass::CircuitOpen,
            LlmError::CliAgent { source, .. } => source.class(),
            LlmError::Decode { .. }
            | LlmError::ContextOverflow { .. }
            | LlmError::Config { .. }
            | LlmError::UnknownProvider { .. }
            | LlmError::NoProviders
            | LlmError::ScriptExhausted { .. } => ErrorClass::Fatal,
        }
    }

    /// Whether a short retry on the same provider may help.
    pub fn is_transient(&self) -> bool {
        matches!(self.class(), ErrorClass::Server | ErrorClass::Timeout)
    }

    /// When the provider (or the key pool) said the limit resets: the
    /// `Retry-After` (or `x-ratelimit-reset-*`) of a rate-limited answer, or
    /// the time until the first key stops cooling.
    pub fn reset_after(&self) -> Option<Duration> {
        match self {
            LlmError::Http {
                class: ErrorClass::RateLimit,
                retry_after,
                ..
            } => *retry_after,
            LlmError::CredentialsExhausted { retry_in, .. } => *retry_in,
            _ => None,
        }
    }
}

/// The provider's message when an error answer says the prompt is longer
/// than the context window, in any of the ways servers say it: OpenAI's code
/// `context_length_exceeded`, llama.cpp's type `exceed_context_size_error`,
/// Anthropic's "prompt is too long". `answer` is the error body (or the
/// `error` event of a stream).
pub(crate) fn context_overflow_message(answer: &serde_json::Value) -> Option<String> {
    let error = answer.get("error").unwrap_or(answer);
    let field = |name: &str| error.get(name).and_then(serde_json::Value::as_str);
    let message = field("message").unwrap_or_default();
    let overflow = field("code") == Some("context_length_exceeded")
        || field("type") == Some("exceed_context_size_error")
        || message.to_ascii_lowercase().contains("prompt is too long");
    overflow.then(|| {
        if message.is_empty() {
            "the prompt is longer than the context window".to_owned()
        } else {
            message.to_owned()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_classified() {
        let cases = [
            (429, ErrorClass::RateLimit),
            (402, ErrorClass::RateLimit),
            (401, ErrorClass::Auth),
            (403, ErrorClass::Auth),
            (408, ErrorClass::Timeout),
            (500, ErrorClass::Server),
            (502, ErrorClass::Server),
            (529, ErrorClass::Server),
            (400, ErrorClass::Fatal),
            (404, ErrorClass::Fatal),
            (422, ErrorClass::Fatal),
        ];
        for (status, class) in cases {
            assert_eq!(ErrorClass::from_status(status), class, "{status}");
        }
    }

    #[test]
    fn network_failures_are_timeouts_and_transient() {
        let e = LlmError::Network {
            provider: "p".into(),
            message: "connection refused".into(),
        };
        assert_eq!(e.class(), ErrorClass::Timeout);
        assert!(e.is_transient());
        let fatal = LlmError::Decode {
            provider: "p".into(),
            message: "x".into(),
        };
        assert!(!fatal.is_transient());
    }

    #[test]
    fn messages_are_lower_case_and_name_the_provider() {
        let e = LlmError::Http {
            provider: "main".into(),
            status: 429,
            class: ErrorClass::RateLimit,
            message: "slow down".into(),
            retry_after: None,
        };
        assert_eq!(
            e.to_string(),
            "provider `main`: http 429 (rate_limit): slow down"
        );
    }

    #[test]
    fn context_overflow_is_recognised_in_each_servers_words() {
        use serde_json::json;
        let answers = [
            json!({"error": {"message": "This model's maximum context length is 8192 tokens.",
                             "type": "invalid_request_error", "code": "context_length_exceeded"}}),
            json!({"error": {"code": 400, "type": "exceed_context_size_error",
                             "message": "request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it",
                             "n_prompt_tokens": 9000, "n_ctx": 8192}}),
            json!({"type": "error", "error": {"type": "invalid_request_error",
                                              "message": "prompt is too long: 208310 tokens > 200000 maximum"}}),
        ];
        for a in &answers {
            assert!(context_overflow_message(a).is_some(), "{a}");
        }
        for other in [
            json!({"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}}),
            json!({"error": {"message": "max_tokens is too large", "code": "invalid_value"}}),
            json!("plain"),
        ] {
            assert_eq!(context_overflow_message(&other), None, "{other}");
        }
        let e = LlmError::ContextOverflow {
            provider: "local".into(),
            message: "too long".into(),
        };
        assert_eq!(e.class(), ErrorClass::Fatal);
        assert!(!e.is_transient());
    }
}
