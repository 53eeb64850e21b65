//! An in-process model with no network and no latency, for benchmarks and
//! unit tests. Its answers come from a closure over the request.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use crate::{Completion, CompletionRequest, LlmError, LlmProvider};

type Responder = dyn Fn(&CompletionRequest) -> Result<Completion, LlmError> + Send + Sync;

/// A provider that answers by calling a function.
pub struct ScriptedProvider {
    name: String,
    model: String,
    responder: Arc<Responder>,
    calls: AtomicU64,
    decides_at_once: bool,
}

impl ScriptedProvider {
    pub fn new<F>(name: impl Into<String>, model: impl Into<String>, responder: F) -> Self
    where
        F: Fn(&CompletionRequest) -> Result<Completion, LlmError> + Send + Sync + 'static,
    {
        Self {
            name: name.into(),
            model: model.into(),
            responder: Arc::new(responder),
            calls: AtomicU64::new(0),
            decides_at_once: false,
        }
    }

    /// Declares itself a model that decides at once
    /// ([`LlmProvider::decides_at_once`]), as the local provider does.
    #[must_use]
    pub fn deciding_at_once(mut self) -> Self {
        self.decides_at_once = true;
        self
    }

    /// How many calls it has answered (or failed).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for ScriptedProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedProvider")
            .field("name", &self.name)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl LlmProvider for ScriptedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn decides_at_once(&self) -> bool {
        self.decides_at_once
    }

    async fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut completion = (self.responder)(request)?;
        if completion.model.is_empty() {
            completion.model.clone_from(&self.model);
        }
        completion.provider.clone_from(&self.name);
        Ok(completion)
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;
    use crate::{StreamEvent, Usage};

    #[tokio::test]
    async fn answers_from_the_closure_and_streams_the_same() -> Result<(), LlmError> {
        let p = ScriptedProvider::new("s", "m", |req| {
            Ok(Completion {
                content: format!("{} messages", req.messages.len()),
                usage: Usage {
                    input_tokens: 3,
                    output_tokens: 1,
                    cache_read_tokens: 0,
                },
                ..Completion::default()
            })
        });
        let c = p.complete(&CompletionRequest::default()).await?;
        assert_eq!(
            (c.content.as_str(), c.model.as_str(), c.provider.as_str()),
            ("0 messages", "m", "s")
        );
        let events: Vec<_> = p
            .stream(&CompletionRequest::default())
            .await?
            .collect()
            .await;
        assert!(matches!(events.first(), Some(Ok(StreamEvent::TextDelta(t))) if t == "0 messages"));
        assert!(matches!(events.last(), Some(Ok(StreamEvent::Completed(_)))));
        assert_eq!(p.calls(), 2);
        Ok(())
    }
}
