//! How one `providers.llm` entry is described to this crate.
//!
//! This is the crate's own shape, so it does not depend on how the company
//! YAML is parsed; `crewlet-config` entries convert into it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::ApiKey;

/// Default per-call timeout of a provider entry (`timeout_seconds`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Default `max_tokens` sent to Anthropic, which requires one.
pub const DEFAULT_ANTHROPIC_MAX_TOKENS: u32 = 4096;

/// The wire protocol of a provider entry (`type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// OpenAI chat completions at `https://api.openai.com/v1` (or `base_url`).
    OpenAi,
    /// Anthropic messages at `https://api.anthropic.com` (or `base_url`).
    Anthropic,
    /// Any server speaking OpenAI chat completions; `base_url` is required.
    OpenAiCompatible,
}

impl ProviderKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAiCompatible => "openai-compatible",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProviderKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "openai" => Ok(ProviderKind::OpenAi),
            "anthropic" => Ok(ProviderKind::Anthropic),
            "openai-compatible" => Ok(ProviderKind::OpenAiCompatible),
            other => Err(format!(
                "unknown provider type `{other}` (expected openai, anthropic or openai-compatible)"
            )),
        }
    }
}

/// One provider entry. `Debug` shows key labels only, never the keys.
#[derive(Clone, Debug)]
pub struct ProviderConfig {
    /// The entry's name in `providers.llm`.
    pub name: String,
    pub kind: ProviderKind,
    pub model: String,
    /// Already interpolated (`${VAR}` replaced); empty for keyless servers.
    pub api_keys: Vec<ApiKey>,
    pub base_url: Option<String>,
    /// Per call (`timeout_seconds`, default 120 s). For a streamed call it
    /// bounds the wait for the answer to start and every gap between chunks.
    pub timeout: Duration,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
    /// Retries on the same provider after a 5xx or a network failure before
    /// the caller falls back to the next provider.
    pub retries: u32,
    /// First retry delay; doubles per retry.
    pub retry_backoff: Duration,
}

impl ProviderConfig {
    pub fn new(name: impl Into<String>, kind: ProviderKind, model: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            kind,
            model: model.into(),
            api_keys: Vec::new(),
            base_url: None,
            timeout: DEFAULT_TIMEOUT,
            temperature: None,
            max_tokens: None,
            retries: 1,
            retry_backoff: Duration::from_millis(500),
        }
    }

    pub fn with_keys<I, K>(mut self, keys: I) -> Self
    where
        I: IntoIterator<Item = K>,
        K: Into<String>,
    {
        self.api_keys = keys.into_iter().map(|k| ApiKey::new(k)).collect();
        self
    }

    pub fn with_base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn with_retries(mut self, retries: u32, backoff: Duration) -> Self {
        self.retries = retries;
        self.retry_backoff = backoff;
        self
    }

    pub fn with_temperature(mut self, t: f32) -> Self {
        self.temperature = Some(t);
        self
    }

    pub fn with_max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_keys() {
        let cfg = ProviderConfig::new("main", ProviderKind::OpenAi, "m")
            .with_keys(["sk-live-secret-0123456789abcd", "short"]);
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(!shown.contains("short"), "{shown}");
        assert!(shown.contains("...abcd"), "{shown}");
    }

    #[test]
    fn kinds_parse_from_their_yaml_names() {
        for kind in [
            ProviderKind::OpenAi,
            ProviderKind::Anthropic,
            ProviderKind::OpenAiCompatible,
        ] {
            assert_eq!(kind.as_str().parse::<ProviderKind>(), Ok(kind));
        }
        assert!("azure".parse::<ProviderKind>().is_err());
    }
}
