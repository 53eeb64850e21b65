//! Crewlet's outbound connections, built in one place.
//!
//! Every HTTP client the shipped crates build (model providers, the
//! integrations, MCP over HTTP, E2B, the OTLP exporter, the CLI) starts from
//! [`client_builder`] (or [`blocking_client_builder`]), and every websocket
//! they open goes through [`connect_websocket`] (feature `websocket`). All of
//! them then behave alike on a corporate network:
//!
//! - **Trust**: the bundled Mozilla roots, plus the system certificate store;
//!   when `SSL_CERT_FILE` or `SSL_CERT_DIR` is set, those are read in the
//!   system store's place (as OpenSSL does). A file that is missing or holds
//!   no certificate is a warning naming it, never a panic.
//! - **Proxies**: `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY`
//!   (upper or lower case). HTTP goes through reqwest's proxy support;
//!   websockets open a `CONNECT` tunnel first. Both match `NO_PROXY` with the
//!   same matcher (hyper-util's, which reqwest itself uses).
//! - **One TLS stack**: rustls with the aws-lc-rs provider, the one the
//!   workspace already installs for Pulsar; the config is handed to reqwest
//!   (`use_preconfigured_tls`) and to tungstenite (`Connector::Rustls`).
//!
//! The environment is read once, by [`NetworkSettings::from_env`], into the
//! process-wide [`Network::global`]. Tests build a [`Network`] from explicit
//! [`NetworkSettings`] instead and never touch the environment.
//!
//! Not covered here: PostgreSQL (tokio-postgres, no TLS in this workspace)
//! and Pulsar (its own `pulsar+ssl://` settings in crewlet-queue).

mod network;
mod roots;
mod settings;
#[cfg(feature = "websocket")]
mod websocket;

pub use network::Network;
pub use settings::{NetworkSettings, ProxySettings, redact};
#[cfg(feature = "websocket")]
pub use websocket::{Tunnel, WebSocket};

/// A reqwest builder with the process's roots and proxies; add timeouts and
/// the rest, then `build()`.
pub fn client_builder() -> reqwest::ClientBuilder {
    Network::global().client_builder()
}

/// The blocking twin of [`client_builder`].
#[cfg(feature = "blocking")]
pub fn blocking_client_builder() -> reqwest::blocking::ClientBuilder {
    Network::global().blocking_client_builder()
}

/// Opens a websocket (`ws://` or `wss://`) with the process's roots and
/// proxies. See [`Network::connect_websocket`].
#[cfg(feature = "websocket")]
pub async fn connect_websocket<R>(
    request: R,
    config: Option<tokio_tungstenite::tungstenite::protocol::WebSocketConfig>,
) -> Result<
    (
        WebSocket,
        tokio_tungstenite::tungstenite::handshake::client::Response,
    ),
    tokio_tungstenite::tungstenite::Error,
>
where
    R: tokio_tungstenite::tungstenite::client::IntoClientRequest + Unpin,
{
    Network::global().connect_websocket(request, config).await
}
