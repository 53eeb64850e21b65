//! Rate limits over real HTTP: the fake model server answers 429 with a
//! reset time, and a guarded provider waits for it instead of failing.
//! (Real time, a few seconds; nothing asserts on how long it took.)

use std::sync::Arc;
use std::time::Duration;

use crewlet_llm::{
    CompletionRequest, GuardOptions, GuardedProvider, LlmError, LlmProvider, Message,
    ProviderConfig, ProviderKind, build_provider, http_client, with_retry_budget,
};
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn openai(server: &FakeLlmServer) -> Result<Arc<dyn LlmProvider>, LlmError> {
    let cfg = ProviderConfig::new("gpt", ProviderKind::OpenAi, "gpt-test")
        .with_base_url(server.openai_base_url())
        .with_keys(["sk-test"])
        .with_retries(1, Duration::from_millis(10));
    build_provider(&cfg, &http_client()?)
}

fn request() -> CompletionRequest {
    CompletionRequest {
        messages: vec![Message::user("hi")],
        ..CompletionRequest::default()
    }
}

#[tokio::test]
async fn a_429_with_retry_after_waits_and_the_call_succeeds() -> TestResult {
    let server = FakeLlmServer::start(
        Script::new()
            .on(When::any(), Reply::rate_limited(1).times(1))
            .on(When::any(), Reply::text("done").usage(10, 2)),
    )
    .await?;
    let bare = openai(&server)?;
    let p = GuardedProvider::new(bare, GuardOptions::default());
    // Inside a turn's retry budget, as the turn engine calls it.
    let c = with_retry_budget(8, p.complete(&request())).await?;
    assert_eq!(c.content, "done");
    let statuses: Vec<Option<usize>> = server.requests().iter().map(|r| r.rule).collect();
    assert_eq!(statuses, [Some(0), Some(1)], "the 429, then the answer");
    Ok(())
}

#[tokio::test]
async fn a_provider_enforcing_its_rate_is_waited_out_by_every_seat() -> TestResult {
    let server = FakeLlmServer::start(Script::new().on(When::any(), Reply::text("ok"))).await?;
    // One request per 2 s; three seats ask at once.
    server.cap_requests(1, Duration::from_secs(2));
    let p = Arc::new(GuardedProvider::new(
        openai(&server)?,
        GuardOptions::default(),
    ));
    let seats: Vec<_> = (0..3)
        .map(|_| {
            let p = p.clone();
            tokio::spawn(async move { p.complete(&request()).await })
        })
        .collect();
    for seat in seats {
        assert_eq!(seat.await??.content, "ok");
    }
    assert_eq!(server.accepted_count(), 3);
    assert!(server.rate_limited_count() >= 1);
    Ok(())
}

#[tokio::test]
async fn without_the_guard_a_rate_limit_fails_the_call() -> TestResult {
    let server = FakeLlmServer::start(
        Script::new()
            .on(When::any(), Reply::rate_limited(1).times(1))
            .on(When::any(), Reply::text("done")),
    )
    .await?;
    let err = openai(&server)?.complete(&request()).await.err();
    assert!(
        matches!(
            err,
            Some(LlmError::CredentialsExhausted {
                retry_in: Some(_),
                ..
            })
        ),
        "{err:?}"
    );
    Ok(())
}
