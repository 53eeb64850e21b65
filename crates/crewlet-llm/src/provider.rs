//! The one trait every model backend implements.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;

use crate::{
    Completion, CompletionRequest, LlmError, ProviderConfig, ProviderKind, StreamEvent,
    anthropic::AnthropicProvider, openai::OpenAiProvider,
};

/// Deltas of a streamed completion, ending with [`StreamEvent::Completed`].
pub type CompletionStream = BoxStream<'static, Result<StreamEvent, LlmError>>;

/// A model behind one `providers.llm` entry.
#[async_trait]
pub trait LlmProvider: Send + Sync {
    /// The entry's name in `providers.llm`.
    fn name(&self) -> &str;

    /// The configured model.
    fn model(&self) -> &str;

    /// The output cap the provider sends when a request names none; `None`
    /// when it sends none (the model's own default applies).
    fn max_tokens(&self) -> Option<u32> {
        None
    }

    /// True for a model whose free text before a decision is noise (a small
    /// model in this process): Plan and Review then ask it for the phase's
    /// decision call at once, over that one tool, rather than offering the
    /// read-only tools and free text first.
    fn decides_at_once(&self) -> bool {
        false
    }

    /// One call, answered whole.
    async fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError>;

    /// One call, answered as it is produced. The default answers whole and
    /// replays the answer as deltas.
    async fn stream(&self, request: &CompletionRequest) -> Result<CompletionStream, LlmError> {
        let completion = self.complete(request).await?;
        Ok(replay_as_stream(completion))
    }
}

/// A finished completion as a stream: its text, its tool calls, then itself.
pub fn replay_as_stream(completion: Completion) -> CompletionStream {
    let mut events = Vec::new();
    if !completion.content.is_empty() {
        events.push(Ok(StreamEvent::TextDelta(completion.content.clone())));
    }
    for (index, call) in completion.tool_calls.iter().enumerate() {
        events.push(Ok(StreamEvent::ToolCallDelta {
            index,
            id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            arguments: call.arguments.clone(),
        }));
    }
    events.push(Ok(StreamEvent::Completed(completion)));
    futures::stream::iter(events).boxed()
}

/// Builds the provider an entry describes, sharing `client`'s connections.
pub fn build_provider(
    config: &ProviderConfig,
    client: &reqwest::Client,
) -> Result<Arc<dyn LlmProvider>, LlmError> {
    if config.model.trim().is_empty() {
        return Err(LlmError::Config {
            provider: config.name.clone(),
            message: "`model` is empty".into(),
        });
    }
    Ok(match config.kind {
        ProviderKind::OpenAi | ProviderKind::OpenAiCompatible => {
            Arc::new(OpenAiProvider::new(config, client.clone())?)
        }
        ProviderKind::Anthropic => Arc::new(AnthropicProvider::new(config, client.clone())?),
    })
}

/// The HTTP client the providers share: crewlet-http's roots and proxies.
pub fn http_client() -> Result<reqwest::Client, LlmError> {
    crewlet_http::client_builder()
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .build()
        .map_err(|e| LlmError::Config {
            provider: "*".into(),
            message: format!("cannot build the http client: {e}"),
        })
}
