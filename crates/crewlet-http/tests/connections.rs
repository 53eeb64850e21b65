//! Real TLS and real sockets on loopback: a server behind a private CA made
//! per test, a CONNECT proxy that records its targets, and clients built from
//! explicit settings (never the process environment, so these tests run in
//! parallel and ignore whatever SSL_CERT_FILE or proxy the machine sets).

use std::error::Error;
use std::net::SocketAddr;
use std::path::PathBuf;

use axum::Router;
use axum::extract::ws::{Message as AxumMessage, WebSocketUpgrade};
use axum::routing::get;
use crewlet_http::{Network, NetworkSettings, ProxySettings};
use crewlet_test_support::network::{ConnectProxy, TestCa, TlsFront};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

/// A plain backend (`/hello` and an echoing `/ws`) behind a TLS front.
struct Site {
    ca: TestCa,
    front: TlsFront,
    _server: tokio::task::JoinHandle<()>,
}

impl Site {
    async fn start() -> Site {
        let app = Router::new()
            .route("/hello", get(|| async { "hello" }))
            .route(
                "/ws",
                get(|ws: WebSocketUpgrade| async move {
                    ws.on_upgrade(|mut socket| async move {
                        while let Some(Ok(msg)) = socket.recv().await {
                            if let AxumMessage::Text(text) = msg {
                                let echo = format!("echo {}", text.as_str());
                                if socket.send(AxumMessage::Text(echo.into())).await.is_err() {
                                    break;
                                }
                            }
                        }
                    })
                }),
            );
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let backend: SocketAddr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let ca = TestCa::new();
        let front = TlsFront::start(&ca, backend).await.unwrap();
        Site {
            ca,
            front,
            _server: server,
        }
    }

    fn https(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.front.port())
    }

    fn wss(&self, host: &str) -> String {
        format!("wss://{host}:{}/ws", self.front.port())
    }

    fn trusting(&self) -> NetworkSettings {
        NetworkSettings {
            cert_file: Some(self.ca.ca_file().to_path_buf()),
            ..NetworkSettings::default()
        }
    }
}

fn chain(e: &dyn Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

async fn get_text(network: &Network, url: &str) -> Result<String, String> {
    let client = network.client_builder().build().map_err(|e| chain(&e))?;
    let response = client.get(url).send().await.map_err(|e| chain(&e))?;
    let status = response.status();
    let body = response.text().await.map_err(|e| chain(&e))?;
    if status.is_success() {
        Ok(body)
    } else {
        Err(format!("{status}: {body}"))
    }
}

async fn ws_echo(network: &Network, url: &str) -> Result<String, String> {
    let (mut ws, _) = network
        .connect_websocket(url, None)
        .await
        .map_err(|e| chain(&e))?;
    ws.send(Message::Text("ping".into()))
        .await
        .map_err(|e| e.to_string())?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(text))) => return Ok(text.to_string()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.to_string()),
            None => return Err("closed".into()),
        }
    }
}

fn with_proxy(mut settings: NetworkSettings, proxy: ProxySettings) -> NetworkSettings {
    settings.proxy = proxy;
    settings
}

#[tokio::test]
async fn a_private_ca_is_refused_by_default() {
    let site = Site::start().await;
    let network = Network::new(&NetworkSettings::default());
    let err = get_text(&network, &site.https("localhost", "/hello"))
        .await
        .unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
    let err = ws_echo(&network, &site.wss("localhost")).await.unwrap_err();
    assert!(err.contains("UnknownIssuer"), "{err}");
    assert_eq!(site.front.handshakes(), 0);
}

#[tokio::test]
async fn ssl_cert_file_adds_the_private_ca_beside_the_bundled_roots() {
    let site = Site::start().await;
    let network = Network::new(&site.trusting());
    assert!(network.warnings().is_empty(), "{:?}", network.warnings());
    assert_eq!(
        get_text(&network, &site.https("localhost", "/hello")).await,
        Ok("hello".into())
    );
    assert_eq!(
        ws_echo(&network, &site.wss("127.0.0.1")).await,
        Ok("echo ping".into())
    );
    let summary = network.summary();
    assert!(summary.contains("and 1 from SSL_CERT_FILE="), "{summary}");
    let bundled: usize = summary
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(bundled > 100, "{summary}");
}

#[tokio::test]
async fn ssl_cert_dir_adds_the_private_ca() {
    let site = Site::start().await;
    let dir = site.ca.scratch().join("certs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(site.ca.ca_file(), dir.join("corp.pem")).unwrap();
    let network = Network::new(&NetworkSettings {
        cert_dirs: vec![dir],
        ..NetworkSettings::default()
    });
    assert!(network.warnings().is_empty(), "{:?}", network.warnings());
    assert_eq!(
        get_text(&network, &site.https("localhost", "/hello")).await,
        Ok("hello".into())
    );
}

#[tokio::test]
async fn a_bad_ssl_cert_file_is_a_warning_naming_it() {
    let site = Site::start().await;
    let missing = site.ca.scratch().join("no-such-ca.pem");
    let garbage = site.ca.scratch().join("garbage.pem");
    std::fs::write(&garbage, "this is not a certificate\n").unwrap();
    for (file, says) in [(&missing, "No such file"), (&garbage, "no PEM certificate")] {
        let network = Network::new(&NetworkSettings {
            cert_file: Some(PathBuf::from(file)),
            ..NetworkSettings::default()
        });
        let warnings = network.warnings().join("\n");
        assert!(
            warnings.contains(&format!("SSL_CERT_FILE={}", file.display())),
            "{warnings}"
        );
        assert!(warnings.contains(says), "{warnings}");
        // The clients still build, trust the bundled roots, and not the CA.
        let err = get_text(&network, &site.https("localhost", "/hello"))
            .await
            .unwrap_err();
        assert!(err.contains("UnknownIssuer"), "{err}");
        assert!(network.summary().contains("and 0 from SSL_CERT_FILE="));
    }
}

#[tokio::test]
async fn https_and_wss_go_through_the_proxy() {
    let site = Site::start().await;
    let proxy = ConnectProxy::start().await.unwrap();
    let network = Network::new(&with_proxy(
        site.trusting(),
        ProxySettings {
            https: Some(proxy.url()),
            ..ProxySettings::default()
        },
    ));
    let port = site.front.port();
    assert_eq!(
        get_text(&network, &site.https("localhost", "/hello")).await,
        Ok("hello".into())
    );
    assert_eq!(proxy.connect_targets(), vec![format!("localhost:{port}")]);
    assert_eq!(
        ws_echo(&network, &site.wss("localhost")).await,
        Ok("echo ping".into())
    );
    assert_eq!(
        proxy.connect_targets(),
        vec![format!("localhost:{port}"), format!("localhost:{port}")]
    );
    // HTTPS_PROXY is for https:// and wss:// only.
    assert_eq!(network.proxy_for("http://localhost:1/"), None);
    assert_eq!(network.proxy_for("ws://localhost:1/"), None);
    assert_eq!(network.proxy_for("wss://localhost:1/"), Some(proxy.url()));
}

#[tokio::test]
async fn no_proxy_hosts_go_direct_and_the_rest_through_the_proxy() {
    let site = Site::start().await;
    let proxy = ConnectProxy::start().await.unwrap();
    let network = Network::new(&with_proxy(
        site.trusting(),
        ProxySettings {
            https: Some(proxy.url()),
            no_proxy: Some("example.invalid, localhost".into()),
            ..ProxySettings::default()
        },
    ));
    let port = site.front.port();
    assert_eq!(
        get_text(&network, &site.https("localhost", "/hello")).await,
        Ok("hello".into())
    );
    assert_eq!(
        ws_echo(&network, &site.wss("localhost")).await,
        Ok("echo ping".into())
    );
    assert!(proxy.seen().is_empty(), "{:?}", proxy.seen());
    assert_eq!(site.front.handshakes(), 2);
    // 127.0.0.1 is not named in NO_PROXY: through the proxy, both ways.
    assert_eq!(
        get_text(&network, &site.https("127.0.0.1", "/hello")).await,
        Ok("hello".into())
    );
    assert_eq!(
        ws_echo(&network, &site.wss("127.0.0.1")).await,
        Ok("echo ping".into())
    );
    assert_eq!(
        proxy.connect_targets(),
        vec![format!("127.0.0.1:{port}"), format!("127.0.0.1:{port}")]
    );
}

#[tokio::test]
async fn all_proxy_covers_both_schemes_and_no_proxy_matches_like_curl() {
    let site = Site::start().await;
    let proxy = ConnectProxy::start().await.unwrap();
    let network = Network::new(&with_proxy(
        site.trusting(),
        ProxySettings {
            all: Some(proxy.url()),
            no_proxy: Some(".corp.example, 10.0.0.0/8, ::1".into()),
            ..ProxySettings::default()
        },
    ));
    assert_eq!(
        ws_echo(&network, &site.wss("localhost")).await,
        Ok("echo ping".into())
    );
    assert_eq!(
        proxy.connect_targets(),
        vec![format!("localhost:{}", site.front.port())]
    );
    let through = Some(proxy.url());
    assert_eq!(network.proxy_for("http://api.example.com/"), through);
    assert_eq!(network.proxy_for("https://api.example.com/"), through);
    assert_eq!(network.proxy_for("https://corp.example/"), None);
    assert_eq!(network.proxy_for("wss://chat.corp.example/"), None);
    assert_eq!(network.proxy_for("https://notcorp.example/"), through);
    assert_eq!(network.proxy_for("https://10.1.2.3/"), None);
    assert_eq!(network.proxy_for("https://11.1.2.3/"), through);
    assert_eq!(network.proxy_for("https://[::1]:8443/"), None);
}

#[tokio::test]
async fn proxy_credentials_are_sent_and_never_shown() {
    let site = Site::start().await;
    let proxy = ConnectProxy::start_with_credentials("Basic YWxpY2U6czNjcmV0")
        .await
        .unwrap();
    let with_creds = format!("http://alice:s3cret@{}", proxy.addr());
    let network = Network::new(&with_proxy(
        site.trusting(),
        ProxySettings {
            https: Some(with_creds.clone()),
            ..ProxySettings::default()
        },
    ));
    assert_eq!(
        get_text(&network, &site.https("localhost", "/hello")).await,
        Ok("hello".into())
    );
    assert_eq!(
        ws_echo(&network, &site.wss("localhost")).await,
        Ok("echo ping".into())
    );
    let seen = proxy.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(
        seen.iter()
            .all(|s| s.authorization.as_deref() == Some("Basic YWxpY2U6czNjcmV0"))
    );
    let summary = network.summary();
    assert!(
        !summary.contains("s3cret") && !summary.contains("alice"),
        "{summary}"
    );
    assert!(summary.contains(&format!("https=http://***@{}", proxy.addr())));

    // Wrong credentials: a 407 that names the proxy, not the password.
    let wrong = Network::new(&with_proxy(
        site.trusting(),
        ProxySettings {
            https: Some(format!("http://alice:wr0ng@{}", proxy.addr())),
            ..ProxySettings::default()
        },
    ));
    let err = ws_echo(&wrong, &site.wss("localhost")).await.unwrap_err();
    assert!(err.contains("407"), "{err}");
    assert!(err.contains(&proxy.addr().to_string()), "{err}");
    assert!(!err.contains("wr0ng"), "{err}");
}

#[tokio::test]
async fn an_unusable_proxy_url_is_a_redacted_warning() {
    let network = Network::new(&NetworkSettings {
        proxy: ProxySettings {
            https: Some("socks5://bob:hunter2@127.0.0.1:1080".into()),
            ..ProxySettings::default()
        },
        ..NetworkSettings::default()
    });
    let warnings = network.warnings().join("\n");
    assert!(
        warnings.contains("HTTPS_PROXY=socks5://***@127.0.0.1:1080"),
        "{warnings}"
    );
    assert!(!warnings.contains("hunter2"), "{warnings}");
    assert_eq!(network.proxy_for("https://example.com/"), None);
}

#[tokio::test]
async fn the_blocking_client_trusts_and_proxies_alike() {
    let site = Site::start().await;
    let proxy = ConnectProxy::start().await.unwrap();
    let network = Network::new(&with_proxy(
        site.trusting(),
        ProxySettings {
            https: Some(proxy.url()),
            ..ProxySettings::default()
        },
    ));
    let url = site.https("localhost", "/hello");
    let body = tokio::task::spawn_blocking(move || {
        let client = network.blocking_client_builder().build().unwrap();
        client.get(url).send().and_then(|r| r.text())
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(body, "hello");
    assert_eq!(
        proxy.connect_targets(),
        vec![format!("localhost:{}", site.front.port())]
    );
}

#[tokio::test]
async fn an_https_proxy_is_reached_over_tls_with_the_same_roots() {
    let site = Site::start().await;
    let proxy = ConnectProxy::start().await.unwrap();
    // The proxy itself behind TLS signed by the same private CA.
    let tls_proxy = TlsFront::start(&site.ca, proxy.addr()).await.unwrap();
    let network = Network::new(&with_proxy(
        site.trusting(),
        ProxySettings {
            https: Some(format!("https://localhost:{}", tls_proxy.port())),
            ..ProxySettings::default()
        },
    ));
    assert_eq!(
        get_text(&network, &site.https("127.0.0.1", "/hello")).await,
        Ok("hello".into())
    );
    assert_eq!(
        ws_echo(&network, &site.wss("127.0.0.1")).await,
        Ok("echo ping".into())
    );
    let port = site.front.port();
    assert_eq!(
        proxy.connect_targets(),
        vec![format!("127.0.0.1:{port}"), format!("127.0.0.1:{port}")]
    );
    assert_eq!(tls_proxy.handshakes(), 2);

    // Without the private CA the proxy's own certificate is refused.
    let untrusting = Network::new(&NetworkSettings {
        proxy: ProxySettings {
            https: Some(format!("https://localhost:{}", tls_proxy.port())),
            ..ProxySettings::default()
        },
        ..NetworkSettings::default()
    });
    let err = ws_echo(&untrusting, &site.wss("127.0.0.1"))
        .await
        .unwrap_err();
    assert!(err.contains("TLS to the proxy https://localhost:"), "{err}");
    assert!(err.contains("UnknownIssuer"), "{err}");
}
