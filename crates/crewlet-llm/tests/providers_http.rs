//! The providers against the fake model server, over real HTTP.

use std::sync::Arc;
use std::time::Duration;

use crewlet_llm::{
    Completion, CompletionRequest, Embedder, ErrorClass, LlmError, LlmProvider, LlmRegistry,
    Message, OpenAiEmbedder, Phase, ProviderConfig, ProviderKind, RoleLlm, StreamEvent,
    SystemBlock, ToolChoice, ToolSpec, Usage, build_provider, http_client,
};
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When, Wire};
use futures::StreamExt;
use serde_json::json;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn openai(server: &FakeLlmServer, keys: &[&str]) -> Result<Arc<dyn LlmProvider>, LlmError> {
    let cfg = ProviderConfig::new("gpt", ProviderKind::OpenAi, "gpt-test")
        .with_base_url(server.openai_base_url())
        .with_keys(keys.iter().copied())
        .with_retries(1, Duration::from_millis(10));
    build_provider(&cfg, &http_client()?)
}

fn anthropic(server: &FakeLlmServer, keys: &[&str]) -> Result<Arc<dyn LlmProvider>, LlmError> {
    let cfg = ProviderConfig::new("claude", ProviderKind::Anthropic, "claude-test")
        .with_base_url(server.anthropic_base_url())
        .with_keys(keys.iter().copied())
        .with_retries(1, Duration::from_millis(10));
    build_provider(&cfg, &http_client()?)
}

fn lookup_tool() -> ToolSpec {
    ToolSpec {
        name: "lookup".into(),
        description: "look a thing up".into(),
        parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
    }
}

fn request() -> CompletionRequest {
    CompletionRequest {
        system: vec![
            SystemBlock::stable("you are a test"),
            SystemBlock::volatile("trigger: x"),
        ],
        messages: vec![Message::user("find the answer")],
        tools: vec![
            ToolSpec {
                name: "note".into(),
                description: "write a note".into(),
                parameters: json!({"type": "object"}),
            },
            lookup_tool(),
        ],
        tool_choice: ToolChoice::Auto,
        ..CompletionRequest::default()
    }
}

fn script() -> Script {
    Script::new()
        .on(
            When::after_tool_result(),
            Reply::text("the answer is 42").usage(120, 8),
        )
        .on(
            When::tool_offered("lookup"),
            Reply::tool_call("lookup", json!({"q": "answer"}))
                .with_text("let me look")
                .usage(100, 20)
                .cache_read(60),
        )
}

async fn collect(stream: crewlet_llm::CompletionStream) -> Result<(String, Completion), LlmError> {
    let events: Vec<_> = stream.collect().await;
    let mut text = String::new();
    let mut done = None;
    for e in events {
        match e? {
            StreamEvent::TextDelta(t) => text.push_str(&t),
            StreamEvent::ToolCallDelta { .. } => {}
            StreamEvent::Completed(c) => done = Some(c),
        }
    }
    done.map(|c| (text, c)).ok_or(LlmError::NoProviders)
}

#[tokio::test]
async fn openai_completes_with_tool_calls_and_usage() -> TestResult {
    let server = FakeLlmServer::start(script()).await?;
    let p = openai(&server, &["sk-test-key-one-0001"])?;
    let c = p.complete(&request()).await?;
    assert_eq!(c.content, "let me look");
    assert_eq!(c.tool_calls.len(), 1);
    assert_eq!(c.tool_calls[0].name, "lookup");
    assert_eq!(c.tool_calls[0].parsed_arguments()?, json!({"q": "answer"}));
    assert_eq!(
        c.usage,
        Usage {
            input_tokens: 100,
            output_tokens: 20,
            cache_read_tokens: 60
        }
    );
    assert_eq!((c.model.as_str(), c.provider.as_str()), ("gpt-test", "gpt"));

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].wire, Wire::OpenAi);
    assert_eq!(reqs[0].api_key.as_deref(), Some("sk-test-key-one-0001"));
    assert_eq!(reqs[0].body["tools"][1]["function"]["name"], "lookup");
    assert_eq!(reqs[0].body["tool_choice"], "auto");
    assert_eq!(reqs[0].body["messages"][0]["role"], "system");

    // the tool result goes back and the model answers in text
    let mut follow = request();
    follow
        .messages
        .push(Message::assistant(c.content.clone(), c.tool_calls.clone()));
    follow.messages.push(Message::Tool {
        call_id: c.tool_calls[0].id.clone(),
        name: "lookup".into(),
        content: "42".into(),
        is_error: false,
    });
    let c2 = p.complete(&follow).await?;
    assert_eq!(c2.content, "the answer is 42");
    assert!(c2.tool_calls.is_empty());
    let body = &server.requests()[1].body;
    assert_eq!(body["messages"][3]["role"], "tool");
    assert_eq!(
        body["messages"][3]["tool_call_id"],
        c.tool_calls[0].id.as_str()
    );
    Ok(())
}

#[tokio::test]
async fn openai_streams_deltas_then_the_completion() -> TestResult {
    let server = FakeLlmServer::start(script()).await?;
    let p = openai(&server, &["k"])?;
    let (text, c) = collect(p.stream(&request()).await?).await?;
    assert_eq!(text, "let me look");
    assert_eq!(c.tool_calls[0].name, "lookup");
    assert_eq!(c.tool_calls[0].parsed_arguments()?, json!({"q": "answer"}));
    assert_eq!(c.usage.total(), 120);
    assert_eq!(c.usage.cache_read_tokens, 60);
    assert!(server.requests()[0].stream);
    assert_eq!(
        server.requests()[0].body["stream_options"]["include_usage"],
        true
    );
    Ok(())
}

#[tokio::test]
async fn anthropic_completes_and_streams_the_same_answer() -> TestResult {
    let server = FakeLlmServer::start(script()).await?;
    let p = anthropic(&server, &["ak-1"])?;
    let whole = p.complete(&request()).await?;
    let (text, streamed) = collect(p.stream(&request()).await?).await?;
    for c in [&whole, &streamed] {
        assert_eq!(c.content, "let me look");
        assert_eq!(c.tool_calls[0].name, "lookup");
        assert_eq!(c.tool_calls[0].parsed_arguments()?, json!({"q": "answer"}));
        assert_eq!(
            c.usage,
            Usage {
                input_tokens: 100,
                output_tokens: 20,
                cache_read_tokens: 60
            }
        );
    }
    assert_eq!(text, "let me look");
    let reqs = server.requests();
    assert_eq!(reqs[0].wire, Wire::Anthropic);
    assert_eq!(reqs[0].api_key.as_deref(), Some("ak-1"));
    assert_eq!(
        reqs[0].headers.get("anthropic-version").map(String::as_str),
        Some("2023-06-01")
    );
    assert!(!reqs[0].headers.contains_key("authorization"));
    Ok(())
}

#[tokio::test]
async fn anthropic_cache_control_on_the_system_prompt_and_last_tool() -> TestResult {
    let server = FakeLlmServer::start(script()).await?;
    let p = anthropic(&server, &["ak-1"])?;
    p.complete(&request()).await?;
    let body = &server.requests()[0].body;
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(body["system"][0]["text"], "you are a test");
    assert_eq!(body["system"][0]["cache_control"], ephemeral);
    assert!(body["system"][1].get("cache_control").is_none());
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    assert_eq!(tools.len(), 2);
    assert!(tools[0].get("cache_control").is_none());
    assert_eq!(tools[1]["name"], "lookup");
    assert_eq!(tools[1]["cache_control"], ephemeral);
    Ok(())
}

#[tokio::test]
async fn rate_limited_key_rotates_to_the_next_and_stays_cool() -> TestResult {
    let server = FakeLlmServer::start(
        Script::new()
            .on(When::api_key("key-a"), Reply::rate_limited(120))
            .on(When::any(), Reply::text("ok").usage(5, 1)),
    )
    .await?;
    let p = openai(&server, &["key-a", "key-b"])?;
    assert_eq!(p.complete(&request()).await?.content, "ok");
    assert_eq!(p.complete(&request()).await?.content, "ok");
    assert_eq!(
        server.keys_used(),
        vec![
            Some("key-a".into()),
            Some("key-b".into()),
            Some("key-b".into())
        ]
    );
    Ok(())
}

#[tokio::test]
async fn refused_key_rotates_and_all_cooling_is_credentials_exhausted() -> TestResult {
    let server = FakeLlmServer::start(
        Script::new()
            .on(When::api_key("bad"), Reply::status(401))
            .on(When::api_key("limited"), Reply::status(402))
            .on(When::any(), Reply::text("ok")),
    )
    .await?;
    let p = openai(&server, &["bad", "good"])?;
    assert_eq!(p.complete(&request()).await?.content, "ok");
    assert_eq!(
        server.keys_used(),
        vec![Some("bad".into()), Some("good".into())]
    );

    let q = openai(&server, &["bad", "limited"])?;
    let err = q.complete(&request()).await.err();
    assert!(
        matches!(err, Some(LlmError::CredentialsExhausted { .. })),
        "{err:?}"
    );
    // and it stays exhausted without another request
    let before = server.request_count();
    assert!(q.complete(&request()).await.is_err());
    assert_eq!(server.request_count(), before);
    Ok(())
}

#[tokio::test]
async fn server_errors_are_retried_then_reported_as_server_class() -> TestResult {
    let server = FakeLlmServer::start(
        Script::new()
            .on(When::any(), Reply::status(503).times(1))
            .on(When::api_key("flaky"), Reply::text("recovered"))
            .on(When::any(), Reply::status(500)),
    )
    .await?;
    let flaky = openai(&server, &["flaky"])?;
    assert_eq!(flaky.complete(&request()).await?.content, "recovered");
    assert_eq!(server.request_count(), 2);

    let down = openai(&server, &["down"])?;
    let err = down.complete(&request()).await.err();
    assert_eq!(
        err.as_ref().map(LlmError::class),
        Some(ErrorClass::Server),
        "{err:?}"
    );
    // one try + one retry
    assert_eq!(server.request_count(), 4);
    Ok(())
}

#[tokio::test]
async fn bad_request_is_fatal_and_not_retried() -> TestResult {
    let server = FakeLlmServer::start(Script::new().on(When::any(), Reply::status(400))).await?;
    let p = openai(&server, &["k"])?;
    let err = p.complete(&request()).await.err();
    assert_eq!(err.as_ref().map(LlmError::class), Some(ErrorClass::Fatal));
    assert_eq!(server.request_count(), 1);
    Ok(())
}

#[tokio::test]
async fn slow_model_times_out_per_entry_timeout() -> TestResult {
    let server = FakeLlmServer::start(Script::new().on(
        When::any(),
        Reply::text("late").delay(Duration::from_secs(5)),
    ))
    .await?;
    let cfg = ProviderConfig::new("slow", ProviderKind::OpenAiCompatible, "m")
        .with_base_url(server.openai_base_url())
        .with_timeout(Duration::from_millis(200))
        .with_retries(0, Duration::ZERO);
    let p = build_provider(&cfg, &http_client()?)?;
    let err = p.complete(&request()).await.err();
    assert!(matches!(err, Some(LlmError::Timeout { .. })), "{err:?}");
    let err = p.stream(&request()).await.err();
    assert!(matches!(err, Some(LlmError::Timeout { .. })), "{err:?}");
    Ok(())
}

#[tokio::test]
async fn connection_refused_is_a_network_failure() -> TestResult {
    let cfg = ProviderConfig::new("gone", ProviderKind::OpenAiCompatible, "m")
        .with_base_url("http://127.0.0.1:1/v1")
        .with_retries(0, Duration::ZERO);
    let p = build_provider(&cfg, &http_client()?)?;
    let err = p.complete(&request()).await.err();
    assert!(matches!(err, Some(LlmError::Network { .. })), "{err:?}");
    assert_eq!(err.map(|e| e.class()), Some(ErrorClass::Timeout));
    Ok(())
}

#[tokio::test]
async fn error_messages_never_carry_the_key() -> TestResult {
    let key = "sk-secret-abcdefghijklmnop";
    let server = FakeLlmServer::start(Script::new().on(When::any(), Reply::status(400))).await?;
    let p = openai(&server, &[key])?;
    let err = p.complete(&request()).await.err();
    let shown = format!(
        "{err:?} {}",
        err.as_ref().map(ToString::to_string).unwrap_or_default()
    );
    assert!(!shown.contains(key), "{shown}");
    Ok(())
}

#[tokio::test]
async fn registry_resolves_phase_chains_to_built_providers() -> TestResult {
    let server = FakeLlmServer::start(script()).await?;
    let registry = LlmRegistry::from_configs([
        ProviderConfig::new("gpt", ProviderKind::OpenAi, "gpt-test")
            .with_base_url(server.openai_base_url()),
        ProviderConfig::new("claude", ProviderKind::Anthropic, "claude-test")
            .with_base_url(server.anthropic_base_url()),
    ])?;
    let role = RoleLlm::chain(["claude", "gpt"]).with_phase(Phase::Review, ["gpt"]);
    assert_eq!(
        registry.resolve(&role, Phase::Plan)?.names(),
        ["claude", "gpt"]
    );
    assert_eq!(registry.resolve(&role, Phase::Review)?.names(), ["gpt"]);
    assert_eq!(
        registry.resolve(&RoleLlm::default(), Phase::Plan)?.names(),
        ["gpt"]
    );
    let missing = registry
        .resolve(&RoleLlm::chain(["nope"]), Phase::Plan)
        .err();
    assert!(matches!(missing, Some(LlmError::UnknownProvider { .. })));
    Ok(())
}

#[tokio::test]
async fn openai_embedder_over_http() -> TestResult {
    let server = FakeLlmServer::start(Script::new()).await?;
    let cfg = ProviderConfig::new("emb", ProviderKind::OpenAiCompatible, "")
        .with_base_url(server.openai_base_url())
        .with_keys(["ek"]);
    let e = OpenAiEmbedder::new(&cfg, http_client()?, 1536)?;
    let texts = vec!["alpha".to_owned(), "beta".to_owned(), "alpha".to_owned()];
    let v = e.embed(&texts).await?;
    assert_eq!(v.len(), 3);
    assert!(v.iter().all(|x| x.len() == 1536));
    assert_eq!(v[0], v[2]);
    assert_ne!(v[0], v[1]);
    let req = &server.requests()[0];
    assert_eq!(req.body["model"], "text-embedding-3-small");
    assert!(req.body.get("dimensions").is_none());
    assert_eq!(req.api_key.as_deref(), Some("ek"));

    // a width the server does not produce is an error, not a silent mismatch
    let narrow = OpenAiEmbedder::new(&cfg, http_client()?, 8)?;
    assert_eq!(narrow.embed(&texts).await?[0].len(), 8);
    assert_eq!(server.requests()[1].body["dimensions"], 8);
    Ok(())
}

#[tokio::test]
async fn a_stream_that_stalls_mid_way_times_out() -> TestResult {
    let server = FakeLlmServer::start(
        Script::new().on(
            When::any(),
            Reply::text("a long answer that stalls")
                .usage(1, 1)
                .stream_gap(Duration::from_secs(120)),
        ),
    )
    .await?;
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let (kind, base) = match wire {
            Wire::Anthropic => (ProviderKind::Anthropic, server.anthropic_base_url()),
            _ => (ProviderKind::OpenAi, server.openai_base_url()),
        };
        let cfg = ProviderConfig::new("stall", kind, "m")
            .with_base_url(base)
            .with_timeout(Duration::from_secs(3));
        let p = build_provider(&cfg, &http_client()?)?;
        // the head arrives in time (3 s is roomy on a loaded machine); the
        // gap between events (120 s) does not
        let stream = p.stream(&request()).await?;
        let err = collect(stream).await.err();
        assert!(
            matches!(err, Some(LlmError::Timeout { .. })),
            "{wire:?}: {err:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn concurrent_calls_spread_over_the_keys_in_flight() -> TestResult {
    let server = FakeLlmServer::start(Script::new().on(
        When::any(),
        Reply::text("ok").delay(Duration::from_millis(200)),
    ))
    .await?;
    let p = openai(&server, &["key-a", "key-b", "key-c"])?;
    let req = request();
    let (a, b, c) = tokio::join!(p.complete(&req), p.complete(&req), p.complete(&req));
    for r in [a, b, c] {
        assert_eq!(r?.content, "ok");
    }
    let mut keys: Vec<String> = server.keys_used().into_iter().flatten().collect();
    keys.sort();
    assert_eq!(keys, ["key-a", "key-b", "key-c"]);
    Ok(())
}
