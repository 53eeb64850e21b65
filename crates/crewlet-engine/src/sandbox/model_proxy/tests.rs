//! The proxy's routing and header rules, and the proxy end to end
//! against the fake model server: the real key upstream, the token's
//! life, streaming, charging and a spent budget.
use super::*;

#[test]
fn only_the_vendors_model_paths_are_forwarded_with_their_methods() {
    let a = Vendor::Anthropic;
    assert_eq!(route(a, &Method::POST, "/v1/messages").ok(), Some(true));
    assert_eq!(
        route(a, &Method::POST, "/v1/messages/count_tokens").ok(),
        Some(false)
    );
    assert_eq!(route(a, &Method::GET, "/v1/models").ok(), Some(false));
    assert_eq!(
        route(a, &Method::GET, "/v1/models/claude-x").ok(),
        Some(false)
    );
    for (m, p) in [
        (Method::POST, "/v1/chat/completions"),
        (Method::GET, "/v1/models/../../etc"),
        (Method::GET, "/v1/models/a/b"),
        (Method::POST, "/v1/files"),
        (Method::GET, "/"),
    ] {
        let r = route(a, &m, p);
        assert_eq!(
            r.as_ref().err().map(|r| r.status()),
            Some(StatusCode::NOT_FOUND),
            "{m} {p}"
        );
    }
    let r = route(a, &Method::GET, "/v1/messages");
    assert_eq!(
        r.err().map(|r| r.status()),
        Some(StatusCode::METHOD_NOT_ALLOWED)
    );
    let o = Vendor::OpenAi;
    for p in [
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/embeddings",
        "/v1/completions",
    ] {
        assert_eq!(route(o, &Method::POST, p).ok(), Some(true), "{p}");
    }
    assert!(route(o, &Method::POST, "/v1/messages").is_err());
}

#[test]
fn upstream_urls_follow_each_vendors_base_url_convention() {
    let up = |vendor, base: &str| Upstream {
        vendor,
        base: base.into(),
        key: None,
    };
    assert_eq!(
        up(Vendor::Anthropic, "https://api.anthropic.com/").url("/v1/messages", Some("beta=true")),
        "https://api.anthropic.com/v1/messages?beta=true"
    );
    assert_eq!(
        up(Vendor::OpenAi, "http://gw:4000/v1").url("/v1/chat/completions", None),
        "http://gw:4000/v1/chat/completions"
    );
    // The real key never shows in a debug print.
    let secret = Upstream {
        vendor: Vendor::OpenAi,
        base: "b".into(),
        key: Some("sk-real".into()),
    };
    assert!(!format!("{secret:?}").contains("sk-real"));
}

#[test]
fn credentials_from_the_box_never_go_on() {
    let mut h = HeaderMap::new();
    for (k, v) in [
        ("authorization", "Bearer crewlet-run-x"),
        ("x-api-key", "crewlet-run-x"),
        ("cookie", "a=b"),
        ("proxy-authorization", "Basic x"),
        ("api-key", "azure"),
        ("content-type", "application/json"),
        ("anthropic-beta", "tools-2024"),
        ("x-stainless-lang", "js"),
        ("accept-encoding", "gzip"),
    ] {
        h.insert(
            axum::http::HeaderName::from_static(k),
            HeaderValue::from_static(v),
        );
    }
    let out = forwarded(&h, Vendor::Anthropic);
    let names: Vec<&str> = out.keys().map(|k| k.as_str()).collect();
    for gone in [
        "authorization",
        "x-api-key",
        "cookie",
        "proxy-authorization",
        "api-key",
        "accept-encoding",
    ] {
        assert!(!names.contains(&gone), "{gone} forwarded: {names:?}");
    }
    assert_eq!(
        out.get("anthropic-version").map(|v| v.as_bytes()),
        Some(crewlet_llm::ANTHROPIC_VERSION.as_bytes())
    );
    assert!(out.contains_key("anthropic-beta") && out.contains_key("x-stainless-lang"));
    assert_eq!(presented(&h), Some("crewlet-run-x"));
    let mut bearer = HeaderMap::new();
    bearer.insert(
        header::AUTHORIZATION,
        HeaderValue::from_static("bearer tok"),
    );
    assert_eq!(presented(&bearer), Some("tok"));
}

#[test]
fn a_streamed_chat_completion_asks_for_its_usage() {
    let asked = with_stream_usage(Bytes::from_static(br#"{"model":"m","stream":true}"#));
    let v: Value = serde_json::from_slice(&asked).unwrap_or_default();
    assert_eq!(v["stream_options"]["include_usage"], true);
    // Even when the client said no: an uncounted call cannot be charged.
    let own = with_stream_usage(Bytes::from_static(
        br#"{"stream":true,"stream_options":{"include_usage":false}}"#,
    ));
    let v: Value = serde_json::from_slice(&own).unwrap_or_default();
    assert_eq!(v["stream_options"]["include_usage"], true);
    // A whole answer carries its usage anyway: left alone.
    let whole = Bytes::from_static(br#"{"stream":false}"#);
    assert_eq!(with_stream_usage(whole.clone()), whole);
}

mod live {
    //! The proxy listening for real, in front of the fake model server.

    use std::sync::Arc;
    use std::time::Duration;

    use crewlet_store::{MemoryTokenLedger, TokenLedger};
    use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When, Wire};
    use crewlet_turn::BudgetLimits;
    use serde_json::{Value, json};
    use uuid::Uuid;

    use super::super::{Grant, ModelProxy, ProxySettings, Upstream, Vendor};
    use crate::sandbox::budget::Payer;

    const REAL: &str = "sk-real-model-key-0123456789";

    /// The events published, as they are published.
    #[derive(Default)]
    struct Published(parking_lot::Mutex<Vec<crewlet_core::Event>>);

    #[async_trait::async_trait]
    impl crewlet_queue::PublishListener for Published {
        async fn on_publish(
            &self,
            _topic: &str,
            event: &crewlet_core::Event,
        ) -> Result<(), crewlet_queue::HandlerError> {
            self.0.lock().push(event.clone());
            Ok(())
        }
    }

    impl Published {
        fn of(&self, kind: crewlet_core::EventType) -> Vec<crewlet_core::Event> {
            self.0
                .lock()
                .iter()
                .filter(|e| e.event_type == kind)
                .cloned()
                .collect()
        }
    }

    async fn proxy(ledger: Arc<MemoryTokenLedger>) -> ModelProxy {
        proxy_publishing(ledger).await.0
    }

    async fn proxy_publishing(ledger: Arc<MemoryTokenLedger>) -> (ModelProxy, Arc<Published>) {
        let queue: Arc<dyn crewlet_queue::EventQueue> =
            Arc::new(crewlet_queue::MemoryBroker::new().client());
        let published = Arc::new(Published::default());
        queue.add_publish_listener(published.clone());
        let proxy = ModelProxy::start(&ProxySettings::default(), ledger, queue)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        (proxy, published)
    }

    fn grant(run: Uuid, vendor: Vendor, base: String, agent_max: u64) -> Grant {
        Grant::new(
            run,
            "eng",
            "t1",
            Arc::new(Upstream {
                vendor,
                base,
                key: Some(REAL.into()),
            }),
            Payer {
                agent_id: crewlet_core::AgentId::for_seat("C", "eng"),
                limits: BudgetLimits {
                    agent_max,
                    warn_at: 0.8,
                    ..BudgetLimits::default()
                },
            },
        )
    }

    /// Waits until the seat's lifetime usage is `tokens` (charges settle
    /// once an answer has streamed back, a moment after the client has it).
    async fn charged(ledger: &MemoryTokenLedger, tokens: u64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let used = ledger
                .usage()
                .await
                .unwrap_or_default()
                .iter()
                .find(|u| u.agent_handle == "eng")
                .map_or(0, |u| u.tokens_used);
            if used == tokens {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "usage is {used}, not {tokens}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn error_code(body: &Value) -> &str {
        body["error"]["code"].as_str().unwrap_or_default()
    }

    #[tokio::test]
    async fn a_run_reaches_its_model_with_the_real_key_until_its_budget_is_spent_or_its_token_revoked()
     {
        let llm = FakeLlmServer::start(Script::new().on(
            When::any(),
            Reply::text("hello from the model").usage(40, 10),
        ))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let ledger = Arc::new(MemoryTokenLedger::new());
        let (p, published) = proxy_publishing(ledger.clone()).await;
        let run = Uuid::now_v7();
        let token = p.issue(grant(run, Vendor::Anthropic, llm.anthropic_base_url(), 120));
        let env = p.run_env(Vendor::Anthropic, token.clone());
        assert_eq!(env.get("ANTHROPIC_API_KEY"), Some(&token));
        assert!(
            env.values().all(|v| !v.contains(REAL)),
            "the real key is in the run's env"
        );
        let base = env.get("ANTHROPIC_BASE_URL").cloned().unwrap_or_default();
        assert!(base.starts_with("http://127.0.0.1:"), "{base}");
        let client = reqwest::Client::new();
        let call = |key: &str, stream: bool| {
            client
                .post(format!("{base}/v1/messages?beta=true"))
                .header("x-api-key", key)
                .header("authorization", "Bearer box-credential")
                .header("cookie", "session=box")
                .json(&json!({"model": "m", "max_tokens": 50, "stream": stream,
                              "messages": [{"role": "user", "content": "hi"}]}))
                .send()
        };

        // A whole answer: as the model gave it, charged.
        let whole = call(&token, false).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(whole.status(), 200);
        let body: Value = whole.json().await.unwrap_or_default();
        assert_eq!(body["content"][0]["text"], "hello from the model");
        charged(&ledger, 50).await;

        // A streamed answer: the events pass through as they come.
        let streamed = call(&token, true).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(streamed.status(), 200);
        assert!(
            streamed
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.starts_with("text/event-stream"))
        );
        let text = streamed.text().await.unwrap_or_default();
        assert!(
            text.starts_with("event: message_start")
                && text.contains("content_block_delta")
                && text
                    .trim_end()
                    .ends_with(r#"data: {"type":"message_stop"}"#),
            "{text}"
        );
        charged(&ledger, 100).await;

        // Still room (100 of 120): forwarded, and charged past the cap.
        assert_eq!(
            call(&token, false).await.map(|r| r.status().as_u16()).ok(),
            Some(200)
        );
        charged(&ledger, 150).await;
        let budget = ledger.budgets().await.unwrap_or_default();
        assert!(
            budget
                .iter()
                .any(|b| b.scope.starts_with("agent") && b.used_tokens == 150),
            "{budget:?}"
        );

        // Spent: refused before it reaches the model, and told not to retry.
        let refused = call(&token, false).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(refused.status(), 429);
        assert_eq!(
            refused
                .headers()
                .get("x-should-retry")
                .and_then(|v| v.to_str().ok()),
            Some("false")
        );
        let body: Value = refused.json().await.unwrap_or_default();
        assert_eq!(error_code(&body), "budget_exhausted", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("150 of 120")),
            "{body}"
        );
        // Said once per run, as a turn says it; a second refusal adds none.
        assert_eq!(
            call(&token, false).await.map(|r| r.status().as_u16()).ok(),
            Some(429)
        );
        let exhausted = published.of(crewlet_core::EventType::BudgetExhausted);
        assert_eq!(exhausted.len(), 1, "{exhausted:?}");
        assert_eq!(exhausted[0].agent_handle(), Some("eng"));
        assert_eq!(exhausted[0].task_id.as_deref(), Some("t1"));
        assert_eq!(exhausted[0].payload["used_tokens"], 150);
        // Crossing 80% of the cap (at 100 of 120) warned, once (published
        // by the settlement, after the usage it waits for above).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let warned = loop {
            let w = published.of(crewlet_core::EventType::BudgetWarning);
            if !w.is_empty() || tokio::time::Instant::now() >= deadline {
                break w;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert_eq!(warned[0].payload["used_tokens"], 100);

        // The model saw the real key, and none of the box's credentials.
        let seen: Vec<_> = llm
            .requests()
            .into_iter()
            .filter(|r| r.wire == Wire::Anthropic)
            .collect();
        assert_eq!(seen.len(), 3, "the refused call was forwarded");
        for r in &seen {
            assert_eq!(r.api_key.as_deref(), Some(REAL));
            assert!(!r.headers.contains_key("authorization"), "{:?}", r.headers);
            assert!(!r.headers.contains_key("cookie"), "{:?}", r.headers);
            assert_eq!(
                r.headers.get("anthropic-version").map(String::as_str),
                Some(crewlet_llm::ANTHROPIC_VERSION)
            );
        }

        // Revoked with its run: what it spent, then 401 with the reason.
        let spent = p.revoke(run).map(|g| g.spent());
        assert_eq!(spent, Some((3, 150)));
        let after = call(&token, false).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(after.status(), 401);
        let body: Value = after.json().await.unwrap_or_default();
        assert_eq!(error_code(&body), "invalid_token", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("ended")),
            "{body}"
        );
        // No token at all, or the real key itself: refused too.
        let bare = client
            .post(format!("{base}/v1/messages"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(bare.status(), 401);
        assert_eq!(
            call(REAL, false).await.map(|r| r.status().as_u16()).ok(),
            Some(401)
        );
        assert_eq!(llm.requests().len(), 3);
    }

    #[tokio::test]
    async fn an_openai_stream_passes_through_with_its_usage_asked_for_and_charged() {
        let llm = FakeLlmServer::start(
            Script::new().on(When::any(), Reply::text("streamed words").usage(30, 12)),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        let ledger = Arc::new(MemoryTokenLedger::new());
        let p = proxy(ledger.clone()).await;
        let run = Uuid::now_v7();
        let token = p.issue(grant(run, Vendor::OpenAi, llm.openai_base_url(), 0));
        let env = p.run_env(Vendor::OpenAi, token.clone());
        let base = env.get("OPENAI_BASE_URL").cloned().unwrap_or_default();
        assert!(base.ends_with("/v1"), "{base}");
        let client = reqwest::Client::new();
        let resp = client
            .post(format!("{base}/chat/completions"))
            .bearer_auth(&token)
            .json(&json!({"model": "m", "stream": true,
                          "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.unwrap_or_default();
        assert!(
            text.starts_with("data: ")
                && text.contains(r#""delta":{"content":"strea"}"#)
                && text.trim_end().ends_with("data: [DONE]"),
            "{text}"
        );
        charged(&ledger, 42).await;
        let seen = llm.requests();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].api_key.as_deref(), Some(REAL));
        assert_eq!(seen[0].body["stream_options"]["include_usage"], true);
        // A path that is not the model API's is not forwarded.
        let other = client
            .get(format!("{base}/files"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(other.status(), 404);
        assert_eq!(llm.requests().len(), 1);
        assert_eq!(p.revoke(run).map(|g| g.spent()), Some((1, 42)));
    }

    /// An upstream that sends the first event of its stream, then the rest
    /// only when told.
    async fn gated_upstream() -> (String, tokio::sync::oneshot::Sender<()>) {
        use axum::body::{Body, Bytes};
        use futures::StreamExt as _;
        let (go, gate) = tokio::sync::oneshot::channel::<()>();
        let gate = Arc::new(parking_lot::Mutex::new(Some(gate)));
        let app = axum::Router::new().route(
            "/v1/messages",
            axum::routing::post(move || {
                let gate = gate.lock().take();
                async move {
                    let first = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":1}}}\n\n";
                    let rest = "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
                    let events = futures::stream::once(async move {
                        Ok::<_, std::io::Error>(Bytes::from_static(first.as_bytes()))
                    })
                    .chain(futures::stream::once(async move {
                        if let Some(g) = gate {
                            let _ = g.await;
                        }
                        Ok(Bytes::from_static(rest.as_bytes()))
                    }));
                    axum::response::Response::builder()
                        .header("content-type", "text/event-stream")
                        .body(Body::from_stream(events))
                        .unwrap_or_default()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (format!("http://{addr}"), go)
    }

    #[tokio::test]
    async fn a_stream_is_passed_on_event_by_event_and_charged_when_it_ends() {
        use futures::StreamExt as _;
        let (upstream, go) = gated_upstream().await;
        let ledger = Arc::new(MemoryTokenLedger::new());
        let p = proxy(ledger.clone()).await;
        let token = p.issue(grant(Uuid::now_v7(), Vendor::Anthropic, upstream, 0));
        let base = p.base_url(Vendor::Anthropic);
        let resp = reqwest::Client::new()
            .post(format!("{base}/v1/messages"))
            .header("x-api-key", &token)
            .json(&json!({"model": "m", "max_tokens": 9, "stream": true, "messages": []}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(resp.status(), 200);
        let mut body = resp.bytes_stream();
        // The first event arrives while the upstream still holds the rest:
        // a proxy that waited for the whole answer would never get here.
        let first = tokio::time::timeout(Duration::from_secs(60), body.next())
            .await
            .unwrap_or_else(|_| panic!("the first event did not come before the stream ended"));
        let first = first.and_then(Result::ok).unwrap_or_default();
        assert!(
            String::from_utf8_lossy(&first).starts_with("event: message_start"),
            "{first:?}"
        );
        let _ = go.send(());
        let mut rest = String::new();
        while let Some(chunk) = body.next().await {
            rest.push_str(&String::from_utf8_lossy(&chunk.unwrap_or_default()));
        }
        assert!(rest.contains("message_stop"), "{rest}");
        charged(&ledger, 12).await;
    }
}
