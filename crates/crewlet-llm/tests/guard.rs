//! The guarded provider: quotas shared by many seats, rate-limit waits,
//! the retry budget and the circuit breaker. Timing runs on tokio's paused
//! clock (virtual time), never the wall clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crewlet_core::quota::{ProviderQuotas, QuotaLimits};
use crewlet_llm::{
    BreakerObserver, BreakerSettings, Completion, CompletionRequest, ErrorClass, GuardOptions,
    GuardedProvider, LlmError, LlmProvider, Message, ScriptedProvider, StreamEvent, Usage,
    with_retry_budget,
};
use crewlet_store::MemoryProviderQuotas;
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::time::Instant;

fn answer() -> Completion {
    Completion {
        content: "ok".into(),
        usage: Usage {
            input_tokens: 100,
            output_tokens: 20,
            cache_read_tokens: 0,
        },
        ..Completion::default()
    }
}

fn http(status: u16, retry_after: Option<Duration>) -> LlmError {
    LlmError::Http {
        provider: "main".into(),
        status,
        class: ErrorClass::from_status(status),
        message: format!("fake {status}"),
        retry_after,
    }
}

fn request() -> CompletionRequest {
    CompletionRequest {
        messages: vec![Message::user("hello")],
        max_tokens: Some(100),
        ..CompletionRequest::default()
    }
}

/// A model that answers from `respond(call number)` and notes when each
/// call arrived (virtual time).
fn model(
    respond: impl Fn(u64) -> Result<Completion, LlmError> + Send + Sync + 'static,
) -> (Arc<ScriptedProvider>, Arc<Mutex<Vec<Instant>>>) {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen = arrivals.clone();
    let n = AtomicU64::new(0);
    let p = ScriptedProvider::new("main", "m", move |_| {
        seen.lock().push(Instant::now());
        respond(n.fetch_add(1, Ordering::Relaxed))
    });
    (Arc::new(p), arrivals)
}

#[derive(Default)]
struct Transitions(Mutex<Vec<String>>);

impl BreakerObserver for Transitions {
    fn opened(&self, provider: &str, failures: u32, cool_down: Duration, error: &LlmError) {
        self.0.lock().push(format!(
            "opened {provider} after {failures} for {}s: {}",
            cool_down.as_secs(),
            error.class().as_str()
        ));
    }

    fn closed(&self, provider: &str, open_for: Duration) {
        self.0
            .lock()
            .push(format!("closed {provider} after {}s", open_for.as_secs()));
    }
}

#[tokio::test(start_paused = true)]
async fn calls_from_many_seats_keep_to_the_providers_rpm() {
    let (inner, arrivals) = model(|_| Ok(answer()));
    let quotas: Arc<dyn ProviderQuotas> = Arc::new(MemoryProviderQuotas::new());
    let limits = QuotaLimits::per_minute(Some(10), None);
    // Two guarded copies of the entry (two processes) sharing one schedule.
    let guarded: Vec<Arc<GuardedProvider>> = (0..2)
        .map(|_| {
            let options = GuardOptions::default().quota(quotas.clone(), "co/main", limits);
            Arc::new(GuardedProvider::new(inner.clone(), options))
        })
        .collect();
    let seats = (0..30).map(|i| {
        let p = guarded[i % 2].clone();
        tokio::spawn(async move { p.complete(&request()).await.map(|c| c.content) })
    });
    for seat in seats {
        assert_eq!(seat.await.ok().and_then(Result::ok).as_deref(), Some("ok"));
    }
    let mut at = arrivals.lock().clone();
    at.sort();
    assert_eq!(at.len(), 30);
    // No 61 s holds more than 10 calls, and none of the schedule is wasted.
    for w in at.windows(11) {
        assert!(
            w[10] - w[0] >= Duration::from_secs(61),
            "{:?}",
            w[10] - w[0]
        );
    }
    let total = at[29] - at[0];
    assert!(
        total < Duration::from_secs_f64(29.0 * 6.1 + 1.0),
        "{total:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn tokens_per_minute_hold_back_a_call_that_does_not_fit() {
    let (inner, arrivals) = model(|_| Ok(answer()));
    let quotas: Arc<dyn ProviderQuotas> = Arc::new(MemoryProviderQuotas::new());
    // Each call is estimated at 102 tokens (2 of prompt, 100 max_tokens).
    let limits = QuotaLimits::per_minute(None, Some(250));
    let options = GuardOptions::default().quota(quotas, "co/main", limits);
    let p = GuardedProvider::new(inner, options);
    let started = Instant::now();
    for _ in 0..3 {
        assert!(p.complete(&request()).await.is_ok());
    }
    let at = arrivals.lock().clone();
    // The first two fit the bucket; the third waits for tokens to come back.
    assert_eq!(at[0] - started, Duration::ZERO);
    assert!(at[1] - started < Duration::from_secs(1));
    assert!(
        at[2] - started > Duration::from_secs(5),
        "{:?}",
        at[2] - started
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_limited_call_waits_for_the_reset_and_succeeds() {
    for shared in [false, true] {
        let (inner, arrivals) = model(|n| match n {
            0 => Err(http(429, Some(Duration::from_secs(20)))),
            _ => Ok(answer()),
        });
        let mut options = GuardOptions::default();
        if shared {
            let quotas: Arc<dyn ProviderQuotas> = Arc::new(MemoryProviderQuotas::new());
            options = options.quota(quotas, "co/main", QuotaLimits::per_minute(Some(600), None));
        }
        let p = GuardedProvider::new(inner.clone(), options);
        let started = Instant::now();
        let got = with_retry_budget(2, p.complete(&request())).await;
        assert_eq!(got.ok().map(|c| c.content).as_deref(), Some("ok"));
        assert_eq!(inner.calls(), 2);
        let waited = arrivals.lock()[1] - started;
        assert!(
            waited >= Duration::from_secs(20) && waited <= Duration::from_secs(22),
            "shared {shared}: {waited:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_reset_too_far_off_or_no_retries_left_fails_the_call() {
    // An hour away: not worth waiting for, the chain falls back.
    let (inner, _) = model(|_| Err(http(429, Some(Duration::from_secs(3600)))));
    let p = GuardedProvider::new(inner.clone(), GuardOptions::default());
    let err = p.complete(&request()).await.err();
    assert_eq!(err.map(|e| e.class()), Some(ErrorClass::RateLimit));
    assert_eq!(inner.calls(), 1);

    // No reset time (a 402 without Retry-After): not waited for either.
    let (inner, _) = model(|_| Err(http(402, None)));
    let p = GuardedProvider::new(inner.clone(), GuardOptions::default());
    assert!(p.complete(&request()).await.is_err());
    assert_eq!(inner.calls(), 1);

    // Always limited: the turn's two retries, then the error.
    let (inner, _) = model(|_| Err(http(429, Some(Duration::from_secs(5)))));
    let p = GuardedProvider::new(inner.clone(), GuardOptions::default());
    let err = with_retry_budget(2, async {
        let first = p.complete(&request()).await.err();
        // the budget is the turn's: a second call has none left
        let second = p.complete(&request()).await.err();
        (first, second)
    })
    .await;
    assert!(err.0.is_some() && err.1.is_some());
    assert_eq!(inner.calls(), 4);

    // Outside a turn, a call has three retries of its own.
    let (inner, _) = model(|_| Err(http(429, Some(Duration::from_secs(5)))));
    let p = GuardedProvider::new(inner.clone(), GuardOptions::default());
    assert!(p.complete(&request()).await.is_err());
    assert_eq!(inner.calls(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_failing_provider_opens_its_circuit_then_a_trial_call_closes_it() {
    let (inner, _) = model(|n| {
        if n < 4 {
            Err(http(503, None))
        } else {
            Ok(answer())
        }
    });
    let seen = Arc::new(Transitions::default());
    let settings = BreakerSettings {
        failures: 3,
        cool_down: Duration::from_secs(30),
        max_cool_down: Duration::from_secs(300),
    };
    let options = GuardOptions::default()
        .breaker(settings)
        .observer(seen.clone());
    let p = GuardedProvider::new(inner.clone(), options);
    for _ in 0..3 {
        let err = p.complete(&request()).await.err();
        assert_eq!(err.map(|e| e.class()), Some(ErrorClass::Server));
    }
    assert!(p.is_circuit_open());
    // Open: refused at once, nothing sent.
    let err = p.complete(&request()).await.err();
    assert!(
        matches!(err, Some(LlmError::CircuitOpen { retry_in, .. }) if retry_in == Duration::from_secs(30)),
        "{err:?}"
    );
    assert_eq!(inner.calls(), 3);
    // After the cool-down the trial fails: open again, twice as long.
    tokio::time::advance(Duration::from_secs(30)).await;
    assert!(p.complete(&request()).await.is_err());
    tokio::time::advance(Duration::from_secs(59)).await;
    assert!(p.is_circuit_open());
    tokio::time::advance(Duration::from_secs(1)).await;
    // The next trial succeeds and closes it.
    assert!(p.complete(&request()).await.is_ok());
    assert!(!p.is_circuit_open());
    assert!(p.complete(&request()).await.is_ok());
    assert_eq!(
        *seen.0.lock(),
        [
            "opened main after 3 for 30s: server",
            "opened main after 1 for 60s: server",
            "closed main after 90s",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limits_and_bad_requests_do_not_open_the_circuit() {
    let (inner, _) = model(|n| match n % 2 {
        0 => Err(http(400, None)),
        _ => Err(http(429, None)),
    });
    let settings = BreakerSettings {
        failures: 2,
        ..BreakerSettings::default()
    };
    let p = GuardedProvider::new(inner.clone(), GuardOptions::default().breaker(settings));
    for _ in 0..6 {
        assert!(p.complete(&request()).await.is_err());
    }
    assert!(!p.is_circuit_open());
    assert_eq!(inner.calls(), 6);
}

#[tokio::test(start_paused = true)]
async fn streamed_calls_are_scheduled_and_counted_too() {
    let (inner, arrivals) = model(|n| {
        if n < 2 {
            Err(http(500, None))
        } else {
            Ok(answer())
        }
    });
    let quotas: Arc<dyn ProviderQuotas> = Arc::new(MemoryProviderQuotas::new());
    let options = GuardOptions::default()
        .quota(quotas, "co/main", QuotaLimits::per_minute(Some(60), None))
        .breaker(BreakerSettings {
            failures: 2,
            ..BreakerSettings::default()
        });
    let p = GuardedProvider::new(inner, options);
    assert!(p.stream(&request()).await.is_err());
    assert!(p.stream(&request()).await.is_err());
    assert!(p.is_circuit_open());
    tokio::time::advance(Duration::from_secs(30)).await;
    let events: Vec<_> = match p.stream(&request()).await {
        Ok(s) => s.collect().await,
        Err(e) => panic!("{e}"),
    };
    assert!(matches!(events.last(), Some(Ok(StreamEvent::Completed(_)))));
    assert!(!p.is_circuit_open());
    let at = arrivals.lock().clone();
    assert!(
        at[1] - at[0] >= Duration::from_millis(1016),
        "{:?}",
        at[1] - at[0]
    );
}

#[test]
fn the_guard_passes_on_the_providers_output_cap() {
    // The budget gate bounds a call's cost with the provider's own
    // `max_tokens`: the guard must not hide it.
    let config = crewlet_llm::ProviderConfig::new(
        "main",
        crewlet_llm::ProviderKind::OpenAiCompatible,
        "fake-model",
    )
    .with_base_url("http://127.0.0.1:9/v1")
    .with_max_tokens(12_345);
    let client = crewlet_llm::http_client().unwrap_or_else(|e| panic!("{e}"));
    let inner = crewlet_llm::build_provider(&config, &client).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(inner.max_tokens(), Some(12_345));
    let guarded = GuardedProvider::new(inner, GuardOptions::default());
    assert_eq!(guarded.max_tokens(), Some(12_345));
}
