//! A provider entry behind its quota, its circuit breaker and the
//! rate-limit waits: what every call of the engine goes through.
//!
//! One call, in order:
//! 1. the breaker ([`crate::BreakerSettings`]): open, the call fails at once
//!    with `CircuitOpen` and the seat's chain falls back;
//! 2. the quota: with `rpm`/`tpm`, the call reserves its start from the
//!    shared schedule ([`ProviderQuotas`]) and waits for it, estimated at its
//!    prompt (4 bytes a token) plus its `max_tokens`; its real usage settles
//!    the estimate afterwards;
//! 3. the call. A rate-limited answer with a reset time of at most
//!    [`MAX_RATE_LIMIT_WAIT`] (`Retry-After`, `x-ratelimit-reset-*`, or the
//!    key pool's earliest key) pauses the provider's schedule for every seat
//!    and process (or, without a quota, this call alone), waits for it plus
//!    a little jitter, and goes again, as long as the turn has retries left
//!    ([`crate::with_retry_budget`]). A later or unknown reset, or no
//!    retries left, fails the call and the chain falls back.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewlet_core::quota::{ProviderQuotas, QuotaLimits};
use futures::StreamExt;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::breaker::{Breaker, BreakerSettings, Permit, Transition};
use crate::retry::{in_some_budget, random_up_to, take_retry};
use crate::{
    Completion, CompletionRequest, CompletionStream, ErrorClass, LlmError, LlmProvider, Message,
    StreamEvent,
};

/// The longest provider reset a call waits for; a later one fails the call.
pub const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(120);
/// The shortest wait after a rate limit (a reset of 0 cannot spin).
const MIN_RATE_LIMIT_WAIT: Duration = Duration::from_millis(250);
/// At most this much jitter is added to a rate-limit wait.
const MAX_JITTER: Duration = Duration::from_secs(1);
/// Completion tokens assumed for a call that does not set `max_tokens`.
pub const DEFAULT_OUTPUT_ESTIMATE: u32 = 1024;

/// Told when a provider's circuit opens or closes (the engine publishes
/// `provider_circuit_opened` / `provider_circuit_closed`).
pub trait BreakerObserver: Send + Sync {
    fn opened(&self, provider: &str, failures: u32, cool_down: Duration, error: &LlmError);
    fn closed(&self, provider: &str, open_for: Duration);
}

/// How a provider is guarded.
#[derive(Clone, Default)]
pub struct GuardOptions {
    /// The shared schedule, the provider's key in it and its limits
    /// (unlimited limits: no schedule).
    pub quota: Option<(Arc<dyn ProviderQuotas>, String, QuotaLimits)>,
    pub breaker: BreakerSettings,
    pub observer: Option<Arc<dyn BreakerObserver>>,
    /// Completion tokens assumed for a call without `max_tokens` (the
    /// entry's `max_tokens`, when it has one); unset:
    /// [`DEFAULT_OUTPUT_ESTIMATE`].
    pub output_estimate: Option<u32>,
}

impl GuardOptions {
    /// Schedules calls within `limits` in `store` under `key`.
    pub fn quota(
        mut self,
        store: Arc<dyn ProviderQuotas>,
        key: impl Into<String>,
        limits: QuotaLimits,
    ) -> Self {
        self.quota = Some((store, key.into(), limits));
        self
    }

    pub fn breaker(mut self, settings: BreakerSettings) -> Self {
        self.breaker = settings;
        self
    }

    pub fn observer(mut self, observer: Arc<dyn BreakerObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    pub fn output_estimate(mut self, tokens: u32) -> Self {
        self.output_estimate = Some(tokens);
        self
    }
}

/// A provider's share of the quota store.
struct Quota {
    store: Arc<dyn ProviderQuotas>,
    key: String,
    limits: QuotaLimits,
}

struct Guard {
    name: String,
    quota: Option<Quota>,
    breaker: Breaker,
    observer: Option<Arc<dyn BreakerObserver>>,
}

/// What happens after a failed attempt.
enum Next {
    Retry,
    Fail(LlmError),
}

/// A provider behind its quota, breaker and rate-limit waits (see the
/// module docs).
pub struct GuardedProvider {
    inner: Arc<dyn LlmProvider>,
    guard: Arc<Guard>,
    output_estimate: u32,
}

impl GuardedProvider {
    pub fn new(inner: Arc<dyn LlmProvider>, options: GuardOptions) -> Self {
        let quota = options
            .quota
            .filter(|(_, _, limits)| !limits.is_unlimited())
            .map(|(store, key, limits)| Quota { store, key, limits });
        let guard = Guard {
            name: inner.name().to_owned(),
            quota,
            breaker: Breaker::new(options.breaker),
            observer: options.observer,
        };
        Self {
            inner,
            guard: Arc::new(guard),
            output_estimate: options
                .output_estimate
                .unwrap_or(DEFAULT_OUTPUT_ESTIMATE)
                .max(1),
        }
    }

    /// Whether the breaker refuses calls now.
    pub fn is_circuit_open(&self) -> bool {
        self.guard.breaker.is_open(Instant::now())
    }

    fn estimate(&self, request: &CompletionRequest) -> u64 {
        estimate_tokens(request, self.output_estimate)
    }
}

impl Guard {
    fn admit(&self) -> Result<Permit, LlmError> {
        self.breaker
            .admit(Instant::now())
            .map_err(|retry_in| LlmError::CircuitOpen {
                provider: self.name.clone(),
                retry_in,
            })
    }

    /// Waits for the call's slot in the quota (none: at once).
    async fn wait_for_slot(&self, tokens: u64) {
        let Some(q) = &self.quota else { return };
        match q.store.reserve(&q.key, &q.limits, tokens).await {
            Ok(slot) if !slot.wait.is_zero() => {
                debug!(provider = %self.name, wait_ms = slot.wait.as_millis() as u64, tokens, "llm call waits for its quota slot");
                tokio::time::sleep(slot.wait).await;
            }
            Ok(_) => {}
            Err(e) => {
                warn!(provider = %self.name, error = %e, "provider quota unavailable; calling without it");
            }
        }
    }

    /// Corrects the quota's estimate by what the call used (in the
    /// background: the answer does not wait for it).
    fn settle(&self, estimate: u64, used: u64) {
        let Some(q) = &self.quota else { return };
        let delta = i64::try_from(used)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(estimate).unwrap_or(i64::MAX));
        if delta == 0 || q.limits.tokens.is_none() {
            return;
        }
        let (store, key, limits, name) =
            (q.store.clone(), q.key.clone(), q.limits, self.name.clone());
        tokio::spawn(async move {
            if let Err(e) = store.settle(&key, &limits, delta).await {
                warn!(provider = %name, error = %e, "cannot settle a call's tokens in the provider quota");
            }
        });
    }

    fn succeeded(&self, permit: Permit) {
        if let Some(Transition::Closed { open_for }) =
            self.breaker.succeeded(permit, Instant::now())
        {
            info!(provider = %self.name, open_s = open_for.as_secs(), "llm provider answered its trial call; circuit closed");
            if let Some(o) = &self.observer {
                o.closed(&self.name, open_for);
            }
        }
    }

    /// Records a failure with the breaker (or releases the permit when the
    /// failure says nothing about the provider's health).
    fn failed(&self, permit: Permit, error: &LlmError) {
        if !matches!(error.class(), ErrorClass::Server | ErrorClass::Timeout) {
            self.breaker.released(permit);
            return;
        }
        if let Some(Transition::Opened {
            failures,
            cool_down,
        }) = self.breaker.failed(permit, Instant::now())
        {
            warn!(provider = %self.name, failures, cool_down_s = cool_down.as_secs(), %error,
                  "llm provider keeps failing; circuit open, its calls fall back until a trial call succeeds");
            if let Some(o) = &self.observer {
                o.opened(&self.name, failures, cool_down, error);
            }
        }
    }

    /// After a failed attempt: wait for a rate limit's reset and retry, or
    /// give the error back.
    async fn after_failure(&self, permit: Permit, estimate: u64, error: LlmError) -> Next {
        self.settle(estimate, 0);
        let Some(wait) = self.rate_limit_wait(&error) else {
            self.failed(permit, &error);
            return Next::Fail(error);
        };
        self.breaker.released(permit);
        let jitter = random_up_to((wait / 4).min(MAX_JITTER));
        let paused = match &self.quota {
            Some(q) => match q.store.pause(&q.key, wait).await {
                Ok(()) => true,
                Err(e) => {
                    warn!(provider = %self.name, error = %e, "cannot pause the provider quota; this call waits alone");
                    false
                }
            },
            None => false,
        };
        info!(provider = %self.name, wait_ms = wait.as_millis() as u64, shared = paused,
              "llm provider rate limited; waiting for its reset");
        // Paused, the next reservation waits for the reset; only the jitter is ours.
        tokio::time::sleep(if paused { jitter } else { wait + jitter }).await;
        Next::Retry
    }

    /// How long to wait before retrying a rate-limited call, if it may be.
    fn rate_limit_wait(&self, error: &LlmError) -> Option<Duration> {
        if error.class() != ErrorClass::RateLimit {
            return None;
        }
        let Some(reset) = error.reset_after() else {
            debug!(provider = %self.name, "rate limited without a reset time; not waiting");
            return None;
        };
        if reset > MAX_RATE_LIMIT_WAIT {
            info!(provider = %self.name, reset_s = reset.as_secs(), "rate limit resets too late to wait for");
            return None;
        }
        if !take_retry() {
            warn!(provider = %self.name, "rate limited and the turn's retries are spent");
            return None;
        }
        Some(reset.max(MIN_RATE_LIMIT_WAIT))
    }
}

#[async_trait]
impl LlmProvider for GuardedProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn max_tokens(&self) -> Option<u32> {
        self.inner.max_tokens()
    }

    fn decides_at_once(&self) -> bool {
        self.inner.decides_at_once()
    }

    async fn complete(&self, request: &CompletionRequest) -> Result<Completion, LlmError> {
        let g = &self.guard;
        let estimate = self.estimate(request);
        in_some_budget(async {
            loop {
                let permit = g.admit()?;
                g.wait_for_slot(estimate).await;
                match self.inner.complete(request).await {
                    Ok(completion) => {
                        g.settle(estimate, completion.usage.total());
                        g.succeeded(permit);
                        return Ok(completion);
                    }
                    Err(e) => match g.after_failure(permit, estimate, e).await {
                        Next::Retry => {}
                        Next::Fail(e) => return Err(e),
                    },
                }
            }
        })
        .await
    }

    async fn stream(&self, request: &CompletionRequest) -> Result<CompletionStream, LlmError> {
        let g = &self.guard;
        let estimate = self.estimate(request);
        in_some_budget(async {
            loop {
                let permit = g.admit()?;
                g.wait_for_slot(estimate).await;
                match self.inner.stream(request).await {
                    Ok(stream) => return Ok(watch(g.clone(), stream, permit, estimate)),
                    Err(e) => match g.after_failure(permit, estimate, e).await {
                        Next::Retry => {}
                        Next::Fail(e) => return Err(e),
                    },
                }
            }
        })
        .await
    }
}

/// The stream, telling the breaker and the quota how it ended.
fn watch(
    guard: Arc<Guard>,
    stream: CompletionStream,
    permit: Permit,
    estimate: u64,
) -> CompletionStream {
    let mut permit = Some(permit);
    stream
        .map(move |item| {
            match &item {
                Ok(StreamEvent::Completed(c)) => {
                    if let Some(p) = permit.take() {
                        guard.settle(estimate, c.usage.total());
                        guard.succeeded(p);
                    }
                }
                Err(e) => {
                    if let Some(p) = permit.take() {
                        guard.settle(estimate, 0);
                        guard.failed(p, e);
                    }
                }
                Ok(_) => {}
            }
            item
        })
        .boxed()
}

/// A call's token estimate: its prompt at 4 bytes a token, plus the
/// completion it may produce (`max_tokens`, else `output`).
pub fn estimate_tokens(request: &CompletionRequest, output: u32) -> u64 {
    let system: usize = request.system.iter().map(|b| b.text.len()).sum();
    let messages: usize = request
        .messages
        .iter()
        .map(|m| match m {
            Message::User { content } => content.len(),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                content.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>()
            }
            Message::Tool { content, name, .. } => content.len() + name.len(),
        })
        .sum();
    let tools: usize = request
        .tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
        .sum();
    let prompt = u64::try_from((system + messages + tools).div_ceil(4)).unwrap_or(u64::MAX);
    prompt.saturating_add(u64::from(request.max_tokens.unwrap_or(output)))
}
