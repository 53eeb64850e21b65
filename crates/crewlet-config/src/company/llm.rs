//! Model providers and how a seat chooses among them.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A turn phase, for choosing a model per phase (the one definition, in
/// `crewlet-core`).
pub use crewlet_core::Phase;

/// One named chat model endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LlmProvider {
    /// The API the endpoint speaks.
    #[serde(rename = "type", default = "default_llm_kind")]
    pub kind: LlmKind,
    /// Model name sent with every request, e.g. `gpt-4.1` or `claude-sonnet-4-5`.
    /// For `type: local`, a model of the catalogue (`crewlet models list`,
    /// e.g. `smollm2-135m-instruct`), fetched on first start; or any label
    /// when `path` names the file.
    #[serde(default = "default_llm_model")]
    #[schemars(length(min = 1))]
    pub model: String,
    /// API keys, usually `${VAR}` references. Calls go to the key with the
    /// fewest calls in flight; a rate-limited or refused key cools down.
    /// Empty: the conventional variable of the type (`OPENAI_API_KEY` for
    /// `openai` and `openai-compatible`, `ANTHROPIC_API_KEY` for `anthropic`).
    #[serde(default)]
    pub api_keys: Vec<String>,
    /// How long a refused key rests, by kind of refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "key rest times are fixed (see docs/llm.md)"))]
    pub cooldowns: Option<super::later::Cooldowns>,
    /// Endpoint base URL; required for `openai-compatible` (vLLM, Ollama,
    /// LiteLLM, ...), optional otherwise (a proxy or a test server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Per-request timeout, in seconds.
    #[serde(default = "default_llm_timeout")]
    #[schemars(range(min = 0.001))]
    pub timeout_seconds: f64,
    /// Reasoning (extended thinking) for models that offer it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "reasoning settings are not sent yet"))]
    pub reasoning: Option<bool>,
    /// OpenAI reasoning effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "reasoning settings are not sent yet"))]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Anthropic thinking budget, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "reasoning settings are not sent yet"))]
    pub reasoning_budget_tokens: Option<u32>,
    /// `type: local` only: a GGUF model file to run instead of a catalogue
    /// model (`~` and `${VAR}` are expanded). Checked when the engine starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `type: local` only: how the model runs in this process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalRun>,
    /// The coding CLI a `cli-agent` provider drives (required for that type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli: Option<super::cli_agent::CliAgent>,
    /// Sampling temperature; the provider's default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,
    /// Cap on tokens generated per completion; the provider's default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<u32>,
    /// Requests per minute this provider allows. Calls from every seat (and,
    /// with a database, every process) share it: each call waits for its
    /// slot instead of being refused. Unset: no request limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub rpm: Option<u32>,
    /// Tokens per minute this provider allows (prompt and completion; a
    /// call is estimated before it is sent and settled on its real usage).
    /// Shared like `rpm`. Unset: no token limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub tpm: Option<u64>,
}

fn default_llm_timeout() -> f64 {
    120.0
}

fn default_llm_kind() -> LlmKind {
    LlmKind::Openai
}

fn default_llm_model() -> String {
    "gpt-4o".into()
}

/// How a `type: local` model runs in this process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalRun {
    /// Answers generated at once by this process; more wait their turn in
    /// a queue (on a CPU, two at once are each half as fast).
    #[serde(default = "default_local_concurrency")]
    #[schemars(range(min = 1, max = 64))]
    pub max_concurrent: u32,
    /// Tokens a prompt and its answer may span; the model's own context
    /// when unset (8,192 for SmolLM2), and never more than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 256))]
    pub context_tokens: Option<u32>,
    /// Recent conversations whose attention cache is kept, so the next
    /// round of a phase runs only what is new in its prompt.
    #[serde(default = "default_local_cached")]
    #[schemars(range(min = 1, max = 64))]
    pub cached_conversations: u32,
    /// Plan and Review ask the model for their decision call at once, with
    /// no free text and no look-ups first: a small model's text before a
    /// decision is noise that costs seconds. `false` gives a larger local
    /// model the same read-only tools the hosted ones get.
    #[serde(default = "default_true")]
    pub decide_at_once: bool,
}

impl Default for LocalRun {
    fn default() -> Self {
        Self {
            max_concurrent: default_local_concurrency(),
            context_tokens: None,
            cached_conversations: default_local_cached(),
            decide_at_once: true,
        }
    }
}

fn default_local_concurrency() -> u32 {
    1
}

fn default_local_cached() -> u32 {
    4
}

fn default_true() -> bool {
    true
}

/// OpenAI reasoning effort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    Low,
    Medium,
    High,
    Max,
}

impl LlmProvider {
    /// A provider of `kind` with every default (`model: gpt-4o`, no keys:
    /// the conventional variable).
    pub fn with_defaults(kind: LlmKind) -> Self {
        Self {
            kind,
            model: default_llm_model(),
            api_keys: Vec::new(),
            cooldowns: None,
            base_url: None,
            timeout_seconds: default_llm_timeout(),
            reasoning: None,
            reasoning_effort: None,
            reasoning_budget_tokens: None,
            path: None,
            local: None,
            cli: None,
            temperature: None,
            max_tokens: None,
            rpm: None,
            tpm: None,
        }
    }
}

/// Which API an LLM endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LlmKind {
    /// OpenAI chat completions.
    Openai,
    /// Anthropic messages, with prompt caching.
    Anthropic,
    /// Any server with an OpenAI-compatible chat completions API at `base_url`.
    OpenaiCompatible,
    /// A coding CLI on a subscription (see `cli` and docs/cli-agent.md),
    /// run once per call with no API key.
    CliAgent,
    /// A GGUF model run on the CPU inside the engine: no key, no server
    /// (see docs/models.md).
    Local,
}

impl LlmKind {
    /// The variable read when `api_keys` is empty.
    pub fn conventional_key_var(self) -> Option<&'static str> {
        match self {
            LlmKind::Openai | LlmKind::OpenaiCompatible => Some("OPENAI_API_KEY"),
            LlmKind::Anthropic => Some("ANTHROPIC_API_KEY"),
            LlmKind::CliAgent | LlmKind::Local => None,
        }
    }
}

impl fmt::Display for LlmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LlmKind::Openai => "openai",
            LlmKind::Anthropic => "anthropic",
            LlmKind::OpenaiCompatible => "openai-compatible",
            LlmKind::CliAgent => "cli-agent",
            LlmKind::Local => "local",
        })
    }
}

/// The embedding model endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsProvider {
    /// The API the endpoint speaks.
    #[serde(rename = "type", default = "default_embeddings_kind")]
    pub kind: EmbeddingsKind,
    /// Embedding model name.
    #[serde(default = "default_embedding_model")]
    pub model: String,
    /// API key, usually a `${VAR}` reference; empty: `OPENAI_API_KEY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Crewlet addition: several keys, used in turn (after `api_key`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_keys: Vec<String>,
    /// Endpoint base URL; required for `openai-compatible`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Vector width the model returns; unset: 384 for `local`, 1536
    /// otherwise. At most the database's `providers.database.embedding_dim`
    /// (Tier A, fixed at the first migration): a narrower vector is stored
    /// zero-padded.
    // Read it with `EmbeddingsProvider::dimensions()`, which applies the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub dimensions: Option<u32>,
    /// `local` only: the folder holding `model.safetensors`,
    /// `tokenizer.json` and `config.json`. Unset: the catalogue's
    /// `all-minilm-l6-v2` in the models cache, fetched on first start
    /// (`crewlet models pull all-minilm-l6-v2` fetches it ahead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Per-request timeout.
    #[serde(default = "default_embedding_timeout")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: u64,
}

fn default_embeddings_kind() -> EmbeddingsKind {
    EmbeddingsKind::Openai
}

impl EmbeddingsProvider {
    /// The vector width: `dimensions` when set, else the model's native
    /// width ([`LOCAL_EMBEDDING_DIMENSIONS`] for `local`, 1536 otherwise).
    pub fn dimensions(&self) -> u32 {
        self.dimensions.unwrap_or(match self.kind {
            EmbeddingsKind::Local => LOCAL_EMBEDDING_DIMENSIONS,
            EmbeddingsKind::Openai | EmbeddingsKind::OpenaiCompatible => {
                DEFAULT_EMBEDDING_DIMENSIONS
            }
        })
    }

    /// Every key configured: `api_key`, then `api_keys`, blanks left out.
    pub fn keys(&self) -> Vec<&str> {
        self.api_key
            .iter()
            .chain(self.api_keys.iter())
            .map(String::as_str)
            .filter(|k| !k.trim().is_empty())
            .collect()
    }
}

fn default_embedding_model() -> String {
    "text-embedding-3-small".into()
}

/// Width of `text-embedding-3-small`, the default of the HTTP providers.
pub const DEFAULT_EMBEDDING_DIMENSIONS: u32 = 1536;
/// Width of all-MiniLM-L6-v2, the `local` embedder's model.
pub const LOCAL_EMBEDDING_DIMENSIONS: u32 = 384;

fn default_embedding_timeout() -> u64 {
    60
}

/// Which API an embeddings endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EmbeddingsKind {
    /// OpenAI embeddings.
    Openai,
    /// Any server with an OpenAI-compatible embeddings API at `base_url`.
    OpenaiCompatible,
    /// all-MiniLM-L6-v2 in-process on the CPU (384 dimensions), from the
    /// model folder at `path`; no network, no key.
    Local,
}

/// One provider name, or a fallback chain tried in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum LlmChoice {
    /// A provider name from `providers.llm`.
    One(String),
    /// Provider names tried in order: when one is unavailable the phase
    /// restarts on the next.
    Chain(Vec<String>),
}

impl LlmChoice {
    pub fn names(&self) -> Vec<&str> {
        match self {
            LlmChoice::One(name) => vec![name.as_str()],
            LlmChoice::Chain(names) => names.iter().map(String::as_str).collect(),
        }
    }
}

/// A seat's model: a provider name, a fallback chain, or a choice per phase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum LlmSpec {
    /// A provider name from `providers.llm`.
    One(String),
    /// Provider names tried in order (fallback chain).
    Chain(Vec<String>),
    /// A provider (or chain) per phase, with `default` for the rest.
    // Boxed: most roles name one provider, and every seat holds its role.
    Phases(Box<LlmPhases>),
}

/// A provider name or chain per turn phase.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LlmPhases {
    /// Used by every phase not listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<LlmChoice>,
    /// Model for Plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<LlmChoice>,
    /// Model for Execute (the tool loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execute: Option<LlmChoice>,
    /// Model for Review.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<LlmChoice>,
    /// Model for side work (diary filtering, reflection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auxiliary: Option<LlmChoice>,
    /// Model for sub-agents; `llm_subagent` wins over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<LlmChoice>,
    /// Model for judging work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "there is no judge phase yet"))]
    pub judge: Option<LlmChoice>,
    /// Model for code-sandbox work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-crewlet-inert" = "the code sandbox is not built yet"))]
    pub sandbox: Option<LlmChoice>,
}

impl LlmPhases {
    pub fn get(&self, phase: Phase) -> Option<&LlmChoice> {
        match phase {
            Phase::Plan => self.plan.as_ref(),
            Phase::Execute => self.execute.as_ref(),
            Phase::Review => self.review.as_ref(),
            Phase::Auxiliary => self.auxiliary.as_ref(),
        }
    }

    /// Every `(key, choice)` set in the map, `default` first.
    pub fn entries(&self) -> Vec<(&'static str, &LlmChoice)> {
        let mut out = Vec::new();
        if let Some(d) = &self.default {
            out.push(("default", d));
        }
        for phase in Phase::ALL {
            if let Some(c) = self.get(phase) {
                out.push((phase.as_str(), c));
            }
        }
        out
    }
}

impl LlmSpec {
    /// The chain for `phase` from this spec alone: the phase's entry, then
    /// `default`, or the single name / chain for every phase.
    pub fn for_phase(&self, phase: Phase) -> Option<Vec<&str>> {
        match self {
            LlmSpec::One(name) => Some(vec![name.as_str()]),
            LlmSpec::Chain(names) => Some(names.iter().map(String::as_str).collect()),
            LlmSpec::Phases(p) => p.get(phase).or(p.default.as_ref()).map(LlmChoice::names),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_resolves_phase_then_default() {
        let spec = LlmSpec::Phases(Box::new(LlmPhases {
            default: Some(LlmChoice::One("a".into())),
            plan: Some(LlmChoice::Chain(vec!["b".into(), "c".into()])),
            ..LlmPhases::default()
        }));
        assert_eq!(spec.for_phase(Phase::Plan), Some(vec!["b", "c"]));
        assert_eq!(spec.for_phase(Phase::Review), Some(vec!["a"]));
        assert_eq!(
            LlmSpec::One("x".into()).for_phase(Phase::Execute),
            Some(vec!["x"])
        );
        let no_default = LlmSpec::Phases(Box::default());
        assert_eq!(no_default.for_phase(Phase::Plan), None);
    }

    #[test]
    fn kinds_use_kebab_case_names() {
        assert_eq!(LlmKind::OpenaiCompatible.to_string(), "openai-compatible");
        let json = serde_json::to_string(&LlmKind::OpenaiCompatible).unwrap_or_default();
        assert_eq!(json, "\"openai-compatible\"");
    }
}
