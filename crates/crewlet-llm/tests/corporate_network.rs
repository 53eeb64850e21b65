//! The real call site on a corporate network: the providers' shared client
//! (`crewlet_llm::http_client`, which reads the environment once through
//! crewlet-http) reaches a model served behind a private CA, through the
//! proxy HTTPS_PROXY names. This binary holds this one test because it
//! writes the process environment.

use std::time::Duration;

use crewlet_llm::{
    CompletionRequest, Message, ProviderConfig, ProviderKind, build_provider, http_client,
};
use crewlet_test_support::fake_llm::{FakeLlmServer, Reply, Script, When};
use crewlet_test_support::network::{ConnectProxy, TestCa, TlsFront, corporate_env};

#[test]
fn the_model_is_reached_through_https_proxy_trusting_ssl_cert_file() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = FakeLlmServer::start(
            Script::new().on(When::any(), Reply::text("hello from behind the proxy")),
        )
        .await
        .unwrap();
        let ca = TestCa::new();
        let front = TlsFront::start(&ca, server.addr()).await.unwrap();
        let proxy = ConnectProxy::start().await.unwrap();
        // SAFETY: the only test of this binary, on a current-thread runtime,
        // before any client has read the environment.
        unsafe { corporate_env(ca.ca_file(), &proxy.url(), None) };
        let cfg = ProviderConfig::new("corp", ProviderKind::OpenAi, "gpt-test")
            .with_base_url(format!("{}/v1", front.https_url()))
            .with_keys(["sk-corp-test-0001"])
            .with_retries(1, Duration::from_millis(10));
        let provider = build_provider(&cfg, &http_client().unwrap()).unwrap();
        let request = CompletionRequest {
            messages: vec![Message::user("hi")],
            ..CompletionRequest::default()
        };
        let completion = provider.complete(&request).await.unwrap();
        assert_eq!(completion.content, "hello from behind the proxy");
        assert_eq!(
            proxy.connect_targets(),
            vec![format!("localhost:{}", front.port())]
        );
        let seen = server.requests();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].api_key.as_deref(), Some("sk-corp-test-0001"));
        assert_eq!(front.handshakes(), 1);
    });
}
