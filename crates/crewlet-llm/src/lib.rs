//! Talking to models.
//!
//! Owns: the [`LlmProvider`] trait and its HTTP implementations (OpenAI chat
//! completions, Anthropic messages with explicit prompt caching, any
//! OpenAI-compatible `base_url`), the per-entry [`KeyPool`] with rate-limit
//! and auth cooldowns, error classification, per-phase model resolution
//! ([`RoleLlm`], [`LlmRegistry`]) and fallback chains ([`ProviderChain`]),
//! the guard every engine call goes through ([`GuardedProvider`]: provider
//! quotas shared through `crewlet_core::quota::ProviderQuotas`, rate-limit
//! waits, a circuit breaker, a retry budget per turn), and the
//! [`Embedder`] trait, and the subscription backend that drives a coding
//! CLI as a model ([`cli_agent`]).
//!
//! Does not own: what a turn does with a completion (budgets, tools, events:
//! `crewlet-turn`), nor parsing the company YAML (`crewlet-config`). A chain
//! is only an ordered list here; restarting a phase on the next provider is
//! the turn engine's job, because only it knows where a phase begins.

mod anthropic;
mod breaker;
pub mod cli_agent;
mod config;
mod embed;
mod error;
mod guard;
mod http;
mod key_pool;
mod openai;
mod provider;
mod resolve;
mod retry;
mod scripted;
mod types;

pub use anthropic::{ANTHROPIC_BASE_URL, ANTHROPIC_VERSION, AnthropicProvider};
pub use breaker::BreakerSettings;
pub use cli_agent::{CliAgentError, CliAgentProvider, CliAgentSettings, with_seat};
pub use config::{DEFAULT_ANTHROPIC_MAX_TOKENS, DEFAULT_TIMEOUT, ProviderConfig, ProviderKind};
pub use embed::{
    DEFAULT_EMBEDDING_DIMENSIONS, DEFAULT_EMBEDDING_MODEL, Embedder, MemoryEmbedder, OpenAiEmbedder,
};
pub use error::{ErrorClass, LlmError};
pub use guard::{
    BreakerObserver, DEFAULT_OUTPUT_ESTIMATE, GuardOptions, GuardedProvider, MAX_RATE_LIMIT_WAIT,
    estimate_tokens,
};
pub use key_pool::{
    AUTH_COOLDOWN_BASE, AUTH_COOLDOWN_MAX_DOUBLINGS, KeyLease, KeyPool, RATE_LIMIT_COOLDOWN,
};
pub use openai::{OPENAI_BASE_URL, OpenAiProvider};
pub use provider::{CompletionStream, LlmProvider, build_provider, http_client, replay_as_stream};
pub use resolve::{LlmRegistry, Phase, ProviderChain, RoleLlm};
pub use retry::{RETRIES_PER_CALL, RETRIES_PER_TURN, retries_left, with_retry_budget};
pub use scripted::ScriptedProvider;
pub use types::{
    ApiKey, Completion, CompletionRequest, Message, StreamEvent, SystemBlock, ToolCall, ToolChoice,
    ToolSpec, Usage,
};
