//! Pulsar-specific behaviour that the memory broker has no equivalent for:
//! the namespace check, token auth on the wire, TLS, connect errors.

use std::time::Duration;

use crewlet_queue::{PulsarOptions, PulsarQueue, QueueError};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

fn quick(url: &str) -> PulsarOptions {
    let mut o = PulsarOptions::new(url);
    o.operation_timeout = Duration::from_secs(2);
    o.reconnect_max_backoff = Duration::from_millis(200);
    // These brokers never become ready: fail on the first error.
    o.startup_retry = Duration::ZERO;
    o
}

/// Accepts one connection and returns the first bytes the client sends.
async fn capture_first_bytes(listener: TcpListener) -> Vec<u8> {
    let Ok(Ok((mut sock, _))) =
        tokio::time::timeout(Duration::from_secs(20), listener.accept()).await
    else {
        return Vec::new();
    };
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = Vec::new();
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_millis(500), sock.read(&mut buf)).await
    {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    got
}

async fn fake_broker() -> (String, tokio::task::JoinHandle<Vec<u8>>) {
    let listener = match TcpListener::bind("127.0.0.1:0").await {
        Ok(l) => l,
        Err(e) => panic!("bind: {e}"),
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    (
        format!("127.0.0.1:{port}"),
        tokio::spawn(capture_first_bytes(listener)),
    )
}

/// The token goes in the CONNECT frame (auth method `token`). A fake broker
/// captures the frame: no broker with auth enabled is needed.
#[tokio::test]
async fn auth_token_is_sent_in_the_connect_frame() {
    let (addr, captured) = fake_broker().await;
    let token = "eyJhbGciOiJIUzI1NiJ9.test-token-for-crewlet.sig";
    let result =
        PulsarQueue::connect(quick(&format!("pulsar://{addr}")).with_auth_token(token)).await;
    assert!(result.is_err(), "the fake broker never answers CONNECTED");
    let bytes = captured.await.unwrap_or_default();
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    assert!(
        has(token.as_bytes()),
        "token bytes in the CONNECT frame ({} bytes captured)",
        bytes.len()
    );
    assert!(
        has(b"token"),
        "auth method name `token` in the CONNECT frame"
    );
}

/// `pulsar+ssl://` opens a TLS session (the first byte is a TLS handshake record).
#[tokio::test]
async fn ssl_url_speaks_tls() {
    let (addr, captured) = fake_broker().await;
    let _ = PulsarQueue::connect(quick(&format!("pulsar+ssl://{addr}"))).await;
    let bytes = captured.await.unwrap_or_default();
    assert_eq!(
        bytes.first(),
        Some(&0x16),
        "a TLS ClientHello, not a plaintext CONNECT"
    );
}

#[tokio::test]
async fn unreadable_trust_certs_path_is_a_clear_config_error() {
    let mut o = quick("pulsar+ssl://127.0.0.1:1");
    o.tls_trust_certs_path = Some("/nonexistent/crewlet-ca.pem".into());
    match PulsarQueue::connect(o).await {
        Err(e @ QueueError::Config(_)) => {
            assert!(e.to_string().contains("/nonexistent/crewlet-ca.pem"), "{e}")
        }
        Err(e) => panic!("expected a config error, got {e}"),
        Ok(_) => panic!("connected to nothing"),
    }
}

#[tokio::test]
async fn unreachable_broker_is_a_connect_error_naming_the_url() {
    match PulsarQueue::connect(quick("pulsar://127.0.0.1:1")).await {
        Err(e @ QueueError::Connect { .. }) => {
            assert!(e.to_string().contains("pulsar://127.0.0.1:1"), "{e}")
        }
        Err(e) => panic!("expected a connect error, got {e}"),
        Ok(_) => panic!("connected to nothing"),
    }
}

/// A broker that stays unreachable is retried for the startup window, and
/// the error says it was and which setting bounds it.
#[tokio::test]
async fn unreachable_broker_is_retried_for_the_startup_window() {
    let mut o = quick("pulsar://127.0.0.1:1");
    o.startup_retry = Duration::from_secs(2);
    match PulsarQueue::connect(o).await {
        Err(e @ QueueError::Connect { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("pulsar://127.0.0.1:1"), "{msg}");
            assert!(msg.contains("still failing after"), "{msg}");
            assert!(msg.contains("startup_retry_seconds"), "{msg}");
        }
        Err(e) => panic!("expected a connect error, got {e}"),
        Ok(_) => panic!("connected to nothing"),
    }
}

/// The engine never creates tenants or namespaces: a missing one fails at
/// connect with an error that names it and says how to create it, at once
/// (waiting for a broker that is starting does not apply to it).
#[tokio::test]
async fn missing_namespace_fails_at_connect_naming_it() {
    let url = crewlet_test_support::require!(pulsar);
    let tenant = format!("crewlet-missing-{}", uuid::Uuid::new_v4().simple());
    let mut o = quick(&url).with_namespace(tenant.clone(), "prod");
    o.startup_retry = Duration::from_secs(600);
    match PulsarQueue::connect(o).await {
        Err(e @ QueueError::NamespaceNotFound { .. }) => {
            let msg = e.to_string();
            eprintln!("{msg}");
            assert!(msg.contains(&format!("{tenant}/prod")), "{msg}");
            assert!(msg.contains("pulsar-admin namespaces create"), "{msg}");
            assert!(!msg.contains("still failing after"), "retried: {msg}");
        }
        Err(e) => panic!("expected NamespaceNotFound, got {e}"),
        Ok(_) => panic!("connected to a namespace that does not exist"),
    }
}
