//! Asking the model: one completion in an `llm {model}` span, streamed
//! when the loop is asked to report progress.

use std::time::{Duration, Instant};

use futures::StreamExt;
use tracing::Instrument;

use crewlet_llm::{Completion, CompletionRequest, LlmError, StreamEvent};

use super::calls::{i64_of, i64_of_duration};
use super::{LoopEnv, LoopStats};
use crate::TurnError;

/// Least time between two progress reports while text streams in.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

/// One completion, in an `llm {model}` span with its token counts.
pub(super) async fn complete(
    env: &LoopEnv<'_>,
    call: &CompletionRequest,
    stats: &LoopStats,
) -> Result<Completion, TurnError> {
    let span = crewlet_telemetry::llm_span(env.provider.name(), env.provider.model());
    let started = Instant::now();
    let result = complete_in_span(env, call, stats)
        .instrument(span.clone())
        .await;
    if !span.is_disabled() {
        if let Ok(c) = &result {
            span.record("llm_input_tokens", i64_of(c.usage.input_tokens));
            span.record("llm_output_tokens", i64_of(c.usage.output_tokens));
        }
        span.record("duration_ms", i64_of_duration(started.elapsed()));
    }
    result
}

async fn complete_in_span(
    env: &LoopEnv<'_>,
    call: &CompletionRequest,
    stats: &LoopStats,
) -> Result<Completion, TurnError> {
    if !env.stream {
        return Ok(env.provider.complete(call).await?);
    }
    let mut stream = env.provider.stream(call).await?;
    let mut text = String::new();
    let mut last_report = Instant::now();
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::TextDelta(delta) => {
                text.push_str(&delta);
                if let Some(observer) = env.progress
                    && last_report.elapsed() >= PROGRESS_INTERVAL
                {
                    observer.progress(&text, &stats.tool_executions).await;
                    last_report = Instant::now();
                }
            }
            StreamEvent::ToolCallDelta { .. } => {}
            StreamEvent::Completed(completion) => {
                if let Some(observer) = env.progress
                    && !completion.content.is_empty()
                {
                    observer
                        .progress(&completion.content, &stats.tool_executions)
                        .await;
                }
                return Ok(completion);
            }
        }
    }
    Err(TurnError::Llm(LlmError::Decode {
        provider: env.provider.name().to_owned(),
        message: "stream ended without a completion".into(),
    }))
}
