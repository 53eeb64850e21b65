//! [`LocalProvider`]: the `local` entry of `providers.llm`, answering
//! completions from a [`LocalModel`] in this process.
//!
//! Generation runs on a blocking thread, at most `max_concurrent` at once
//! per model (the rest wait their turn: on a CPU two answers at once are
//! each half as fast). The answer streams out token by token; dropping the
//! stream (a turn that was cut) stops generation at the next token.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use crewlet_llm::{
    Completion, CompletionRequest, CompletionStream, LlmError, LlmProvider, StreamEvent, ToolCall,
    Usage,
};
use futures::StreamExt;
use tokio::sync::{Semaphore, mpsc};

use crate::grammar::{AnswerShape, CALL_OPEN, parse_calls};
use crate::{GenerateOptions, LocalModel, StopReason, prompt};

/// Output cap when neither the request nor the entry sets one.
pub const DEFAULT_MAX_TOKENS: u32 = 512;

/// How a local provider entry runs.
#[derive(Clone, Debug)]
pub struct LocalSettings {
    /// The entry's name in `providers.llm`.
    pub name: String,
    /// The model label reported with each completion.
    pub model: String,
    pub max_tokens: Option<u32>,
    /// 0: always the most likely token (the default: reproducible answers).
    pub temperature: Option<f32>,
    pub max_concurrent: usize,
    /// Plan and Review ask for their decision call at once
    /// ([`LlmProvider::decides_at_once`]).
    pub decide_at_once: bool,
}

/// A model in this process behind the provider trait.
pub struct LocalProvider {
    settings: LocalSettings,
    model: Arc<LocalModel>,
    gate: Arc<Semaphore>,
    calls: AtomicU64,
}

impl LocalProvider {
    pub fn new(settings: LocalSettings, model: Arc<LocalModel>) -> Self {
        let gate = Arc::new(Semaphore::new(settings.max_concurrent.max(1)));
        Self {
            settings,
            model,
            gate,
            calls: AtomicU64::new(0),
        }
    }

    pub fn local_model(&self) -> &Arc<LocalModel> {
        &self.model
    }

    /// Places taken by generations running right now.
    pub fn queued(&self) -> usize {
        self.settings
            .max_concurrent
            .saturating_sub(self.gate.available_permits())
    }

    fn overflow(&self, prompt: usize) -> LlmError {
        LlmError::ContextOverflow {
            provider: self.settings.name.clone(),
            message: format!(
                "the prompt is {prompt} tokens; the local model's context is {} (answer included)",
                self.model.context
            ),
        }
    }
}

#[async_trait]
impl LlmProvider for LocalProvider {
    fn name(&self) -> &str {
        &self.settings.name
    }

    fn model(&self) -> &str {
        &self.settings.model
    }

    fn max_tokens(&self) -> Option<u32> {
        Some(self.settings.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS))
    }

    fn decides_at_once(&self) -> bool {
        self.settings.decide_at_once
    }

    async fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        let mut stream = self.stream(request).await?;
        while let Some(event) = stream.next().await {
            if let StreamEvent::Completed(c) = event? {
                return Ok(c);
            }
        }
        Err(LlmError::Decode {
            provider: self.settings.name.clone(),
            message: "the local model stopped without an answer".into(),
        })
    }

    async fn stream(&self, request: &CompletionRequest) -> Result<CompletionStream, LlmError> {
        let name = self.settings.name.clone();
        let runtime = |message: String| LlmError::Decode {
            provider: name.clone(),
            message,
        };
        let shape = AnswerShape::of(&request.tools, &request.tool_choice);
        let chat = prompt::chat(request, &shape);
        let tokens = self
            .model
            .prompt_tokens(&chat)
            .map_err(|e| runtime(e.to_string()))?;
        // At least one token of answer must fit.
        if tokens.len() + 1 > self.model.context {
            return Err(self.overflow(tokens.len()));
        }
        let matcher = shape
            .grammar()
            .map(|g| self.model.matcher(g))
            .transpose()
            .map_err(|e| runtime(e.to_string()))?;
        let options = GenerateOptions {
            max_tokens: request
                .max_tokens
                .or(self.settings.max_tokens)
                .unwrap_or(DEFAULT_MAX_TOKENS) as usize,
            temperature: request
                .temperature
                .or(self.settings.temperature)
                .unwrap_or(0.0),
        };
        let permit = self
            .gate
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| runtime("the local model is shutting down".into()))?;
        let call_no = self.calls.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel::<Result<StreamEvent, LlmError>>(256);
        let model = self.model.clone();
        let label = self.settings.model.clone();
        let provider = self.settings.name.clone();
        let has_calls = !shape.tools().is_empty();
        tokio::task::spawn_blocking(move || {
            let mut held = String::new();
            let mut is_text = !has_calls;
            let result = model.generate(&tokens, matcher, &options, |piece| {
                if tx.is_closed() {
                    return ControlFlow::Break(());
                }
                if !is_text {
                    // Hold text back until it cannot be the start of a call.
                    held.push_str(piece);
                    let lead = held.trim_start();
                    if lead.is_empty() || CALL_OPEN.starts_with(lead) || lead.starts_with(CALL_OPEN)
                    {
                        return ControlFlow::Continue(());
                    }
                    is_text = true;
                    let out = std::mem::take(&mut held);
                    return send(&tx, StreamEvent::TextDelta(out));
                }
                send(&tx, StreamEvent::TextDelta(piece.to_owned()))
            });
            // The place frees before the answer is handed over: whoever
            // reads the answer may call again at once.
            drop(permit);
            let event = match result {
                Ok(g) if g.stop == StopReason::Cancelled => return,
                Ok(g) => {
                    let usage = Usage {
                        input_tokens: g.prompt_tokens as u64,
                        output_tokens: g.output_tokens as u64,
                        cache_read_tokens: g.cached_tokens as u64,
                    };
                    let calls = if has_calls {
                        parse_calls(&g.text)
                    } else {
                        None
                    };
                    let (content, tool_calls) = match calls {
                        Some(calls) => {
                            let calls: Vec<ToolCall> = calls
                                .into_iter()
                                .enumerate()
                                .map(|(i, (name, arguments))| ToolCall {
                                    id: format!("call_{call_no}_{i}"),
                                    name,
                                    arguments,
                                })
                                .collect();
                            for (index, call) in calls.iter().enumerate() {
                                let _ = send(
                                    &tx,
                                    StreamEvent::ToolCallDelta {
                                        index,
                                        id: Some(call.id.clone()),
                                        name: Some(call.name.clone()),
                                        arguments: call.arguments.clone(),
                                    },
                                );
                            }
                            (String::new(), calls)
                        }
                        None => {
                            if !held.is_empty() {
                                let _ =
                                    send(&tx, StreamEvent::TextDelta(std::mem::take(&mut held)));
                            }
                            (g.text.trim().to_owned(), Vec::new())
                        }
                    };
                    Ok(StreamEvent::Completed(Completion {
                        content,
                        tool_calls,
                        usage,
                        model: label,
                        provider,
                    }))
                }
                Err(e) => Err(LlmError::Decode {
                    provider,
                    message: e.to_string(),
                }),
            };
            let _ = tx.blocking_send(event);
        });
        Ok(tokio_stream_of(rx))
    }
}

fn send(tx: &mpsc::Sender<Result<StreamEvent, LlmError>>, event: StreamEvent) -> ControlFlow<()> {
    match tx.blocking_send(Ok(event)) {
        Ok(()) => ControlFlow::Continue(()),
        Err(_) => ControlFlow::Break(()),
    }
}

fn tokio_stream_of(mut rx: mpsc::Receiver<Result<StreamEvent, LlmError>>) -> CompletionStream {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}
