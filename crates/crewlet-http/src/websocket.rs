//! Websockets with the same roots and proxies as the HTTP clients: a direct
//! TCP connection, or a `CONNECT` tunnel through the proxy `NO_PROXY` does not
//! rule out, then TLS with the shared config and the upgrade.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::proxy::matcher::Intercept;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::UrlError;
use tokio_tungstenite::tungstenite::handshake::client::Response;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, http::Uri};
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

use crate::{Network, redact};

/// A websocket opened by [`Network::connect_websocket`].
pub type WebSocket = WebSocketStream<MaybeTlsStream<Tunnel>>;

/// The byte stream under a websocket: TCP to the server or to an `http://`
/// proxy, or TLS to an `https://` proxy.
pub enum Tunnel {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The longest `CONNECT` reply head read before giving up.
const MAX_PROXY_REPLY: usize = 16 * 1024;

impl Network {
    /// Opens a websocket (`ws://` or `wss://`): through a `CONNECT` tunnel
    /// when a proxy applies to the target (`HTTPS_PROXY` for `wss://`,
    /// `HTTP_PROXY` for `ws://`, `ALL_PROXY` for either, unless `NO_PROXY`
    /// names the host), then TLS with the shared roots, then the upgrade.
    /// The caller bounds the time (a `tokio::time::timeout` around it).
    pub async fn connect_websocket<R>(
        &self,
        request: R,
        config: Option<WebSocketConfig>,
    ) -> Result<(WebSocket, Response), WsError>
    where
        R: IntoClientRequest + Unpin,
    {
        let request = request.into_client_request()?;
        let stream = self.open(request.uri()).await?;
        let connector = match &self.tls {
            Some(tls) => Connector::Rustls(tls.clone()),
            None if request.uri().scheme_str() == Some("wss") => {
                return Err(io_error(
                    "no TLS client config could be built (see the crewlet_http warnings)".into(),
                ));
            }
            None => Connector::Plain,
        };
        tokio_tungstenite::client_async_tls_with_config(request, stream, config, Some(connector))
            .await
    }

    async fn open(&self, uri: &Uri) -> Result<Tunnel, WsError> {
        let secure = match uri.scheme_str() {
            Some("wss") => true,
            Some("ws") => false,
            _ => return Err(WsError::Url(UrlError::UnsupportedUrlScheme)),
        };
        let host = uri.host().ok_or(WsError::Url(UrlError::NoHostName))?;
        let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
        // `host` keeps an IPv6 address's brackets, as CONNECT wants them.
        let authority = format!("{host}:{port}");
        let probe: Uri = format!("{}://{authority}/", if secure { "https" } else { "http" })
            .parse()
            .map_err(|_| WsError::Url(UrlError::NoHostName))?;
        match self.matcher.intercept(&probe) {
            None => {
                let tcp = TcpStream::connect((bare(host), port)).await?;
                tcp.set_nodelay(true)?;
                Ok(Tunnel::Tcp(tcp))
            }
            Some(proxy) => self.tunnel(&proxy, &authority).await,
        }
    }

    /// Connects to the proxy and asks it for a tunnel to `authority`.
    async fn tunnel(&self, proxy: &Intercept, authority: &str) -> Result<Tunnel, WsError> {
        let proxy_uri = proxy.uri();
        // The intercept's URI holds no credentials; redact all the same.
        let shown = redact(&proxy_uri.to_string());
        let secure = proxy_uri.scheme_str() == Some("https");
        let host = proxy_uri.host().ok_or(WsError::Url(UrlError::NoHostName))?;
        let port = proxy_uri
            .port_u16()
            .unwrap_or(if secure { 443 } else { 80 });
        tracing::debug!(target: "crewlet_http", proxy = %shown, target = %authority, "websocket through a CONNECT tunnel");
        let tcp = TcpStream::connect((bare(host), port))
            .await
            .map_err(|e| io_error(format!("cannot reach the proxy {shown}: {e}")))?;
        tcp.set_nodelay(true)?;
        let mut stream = if secure {
            let Some(tls) = &self.tls else {
                return Err(io_error(format!(
                    "the proxy {shown} is https:// but no TLS client config could be built"
                )));
            };
            let name = ServerName::try_from(bare(host).to_owned())
                .map_err(|_| io_error(format!("the proxy {shown} has no valid TLS name")))?;
            let tls = TlsConnector::from(tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| io_error(format!("TLS to the proxy {shown} failed: {e}")))?;
            Tunnel::Tls(Box::new(tls))
        } else {
            Tunnel::Tcp(tcp)
        };
        let mut head = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
        if let Some(auth) = proxy.basic_auth().and_then(|v| v.to_str().ok()) {
            head.push_str("Proxy-Authorization: ");
            head.push_str(auth);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await?;
        stream.flush().await?;
        let reply = read_head(&mut stream, &shown).await?;
        let status_line = reply.lines().next().unwrap_or("").trim().to_owned();
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse::<u16>().ok());
        match status {
            Some(200..=299) => Ok(stream),
            Some(407) => Err(io_error(format!(
                "the proxy {shown} wants credentials for CONNECT {authority} (407); put them in \
                 the proxy URL (http://user:password@host:port)"
            ))),
            _ => Err(io_error(format!(
                "the proxy {shown} refused CONNECT {authority}: {status_line}"
            ))),
        }
    }
}

/// Reads the proxy's reply up to its blank line, one byte at a time so
/// nothing of the tunnelled stream is consumed.
async fn read_head(stream: &mut Tunnel, shown: &str) -> Result<String, WsError> {
    let mut head = Vec::with_capacity(128);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_PROXY_REPLY {
            return Err(io_error(format!(
                "the proxy {shown} sent a CONNECT reply longer than {MAX_PROXY_REPLY} bytes"
            )));
        }
        if stream.read(&mut byte).await? == 0 {
            return Err(io_error(format!(
                "the proxy {shown} closed the connection before answering CONNECT"
            )));
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

fn bare(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

fn io_error(message: String) -> WsError {
    WsError::Io(io::Error::other(message))
}

impl AsyncRead for Tunnel {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tunnel::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Tunnel {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Tunnel::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tunnel::Tcp(s) => Pin::new(s).poll_flush(cx),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tunnel::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Tunnel::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
