//! A corporate network on loopback: a private CA made per test
//! ([`TestCa`]), a TLS front that puts any local server behind a certificate
//! of that CA ([`TlsFront`]), and an HTTP `CONNECT` proxy that records every
//! target it was asked for ([`ConnectProxy`]).
//!
//! The front and the proxy are plain byte pipes, so every fake server of this
//! crate (HTTP and websocket alike) can sit behind them unchanged.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// A private CA, its PEM file in a temp dir of its own, and a server
/// certificate it signed for `localhost` and `127.0.0.1`.
pub struct TestCa {
    dir: PathBuf,
    ca_file: PathBuf,
    server: Arc<ServerConfig>,
}

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

impl TestCa {
    /// Makes a fresh CA; panics only if key generation or the temp dir fails.
    pub fn new() -> TestCa {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "Crewlet test private CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf_key = KeyPair::generate().expect("server key");
        let mut leaf_params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .expect("server params");
        leaf_params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        let leaf_cert = leaf_params
            .signed_by(&leaf_key, &issuer)
            .expect("server certificate");

        let dir = std::env::temp_dir().join(format!(
            "crewlet-test-ca-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir for the CA");
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca_cert.pem()).expect("write the CA file");

        let chain: Vec<CertificateDer<'static>> =
            vec![leaf_cert.der().clone(), ca_cert.der().clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("server certificate and key");
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        TestCa {
            dir,
            ca_file,
            server: Arc::new(server),
        }
    }

    /// The CA certificate as a PEM file (what `SSL_CERT_FILE` names).
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// A directory of its own under this CA's temp dir, for other files a
    /// test writes (a bad `SSL_CERT_FILE`, a cert dir).
    pub fn scratch(&self) -> &Path {
        &self.dir
    }

    /// The server side: the signed certificate for `localhost`/`127.0.0.1`.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.server.clone()
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Makes this process look like a machine on a corporate network: trusts
/// only `ca_file` beyond the bundled roots (`SSL_CERT_FILE`), goes through
/// `proxy` for https (`HTTPS_PROXY`), direct for `no_proxy`; every other
/// certificate and proxy variable is removed.
///
/// # Safety
/// Writes the process environment: call it from a test binary's only test,
/// on a current-thread runtime, before any client has read the environment
/// (crewlet-http reads it once, on first use).
pub unsafe fn corporate_env(ca_file: &Path, proxy: &str, no_proxy: Option<&str>) {
    const CLEARED: [&str; 8] = [
        "SSL_CERT_DIR",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ];
    // SAFETY: the caller's contract above.
    unsafe {
        for var in CLEARED {
            std::env::remove_var(var);
        }
        std::env::set_var("SSL_CERT_FILE", ca_file);
        std::env::set_var("HTTPS_PROXY", proxy);
        if let Some(hosts) = no_proxy {
            std::env::set_var("NO_PROXY", hosts);
        }
    }
}

/// TLS on 127.0.0.1 in front of a plain local server: each connection is
/// decrypted with the [`TestCa`]'s certificate and piped to `backend`.
pub struct TlsFront {
    addr: SocketAddr,
    handshakes: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl TlsFront {
    pub async fn start(ca: &TestCa, backend: SocketAddr) -> io::Result<TlsFront> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(ca.server_config());
        let handshakes = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let (ok, bad) = (handshakes.clone(), refused.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, ok, bad) = (acceptor.clone(), ok.clone(), bad.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        bad.fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    ok.fetch_add(1, Ordering::SeqCst);
                    if let Ok(mut plain) = TcpStream::connect(backend).await {
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    }
                });
            }
        });
        Ok(TlsFront {
            addr,
            handshakes,
            refused,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `https://localhost:<port>` (the name the certificate carries, and one
    /// `NO_PROXY` can name apart from `127.0.0.1`).
    pub fn https_url(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    /// TLS handshakes completed.
    pub fn handshakes(&self) -> usize {
        self.handshakes.load(Ordering::SeqCst)
    }

    /// TLS handshakes that failed (a client that did not trust the CA).
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::SeqCst)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTP proxy on 127.0.0.1 that only tunnels: `CONNECT host:port` is
/// recorded, answered 200 and piped; any other method is recorded and
/// answered 405. With [`ConnectProxy::start_with_credentials`] a `CONNECT`
/// without the right `Proxy-Authorization` gets 407.
pub struct ConnectProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

/// One request the proxy received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// `CONNECT` (or another method, refused).
    pub method: String,
    /// `host:port` for a `CONNECT`, the request target otherwise.
    pub target: String,
    /// The `Proxy-Authorization` header, if any.
    pub authorization: Option<String>,
}

const MAX_HEAD: usize = 16 * 1024;

impl ConnectProxy {
    pub async fn start() -> io::Result<ConnectProxy> {
        ConnectProxy::serve(None).await
    }

    /// A proxy that wants `Proxy-Authorization: Basic base64(user:password)`.
    pub async fn start_with_credentials(basic: &str) -> io::Result<ConnectProxy> {
        ConnectProxy::serve(Some(basic.to_owned())).await
    }

    async fn serve(required: Option<String>) -> io::Result<ConnectProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (log, required) = (log.clone(), required.clone());
                tokio::spawn(async move {
                    let _ = tunnel(tcp, &log, required.as_deref()).await;
                });
            }
        });
        Ok(ConnectProxy { addr, seen, task })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Everything the proxy was asked, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().clone()
    }

    /// The `CONNECT` targets (`host:port`), in order.
    pub fn connect_targets(&self) -> Vec<String> {
        self.seen
            .lock()
            .iter()
            .filter(|s| s.method == "CONNECT")
            .map(|s| s.target.clone())
            .collect()
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tunnel(
    mut client: TcpStream,
    log: &Mutex<Vec<Seen>>,
    required: Option<&str>,
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Ok(());
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split_whitespace();
    let method = first.next().unwrap_or("").to_owned();
    let target = first.next().unwrap_or("").to_owned();
    let authorization = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("proxy-authorization")
            .then(|| value.trim().to_owned())
    });
    log.lock().push(Seen {
        method: method.clone(),
        target: target.clone(),
        authorization: authorization.clone(),
    });
    if method != "CONNECT" {
        client
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            .await?;
        return Ok(());
    }
    if required.is_some_and(|r| authorization.as_deref() != Some(r)) {
        client
            .write_all(
                b"HTTP/1.1 407 Proxy Authentication Required\r\n\
                  Proxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\n\r\n",
            )
            .await?;
        return Ok(());
    }
    let Ok(mut upstream) = TcpStream::connect(target.as_str()).await else {
        client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            .await?;
        return Ok(());
    };
    client
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await?;
    if buf.len() > head_end {
        upstream.write_all(&buf[head_end..]).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}
