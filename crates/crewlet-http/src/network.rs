//! [`Network`]: the TLS config and proxy rules every outbound client shares.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use hyper_util::client::proxy::matcher::Matcher;
use rustls::ClientConfig;

use crate::settings::{NetworkSettings, ProxySettings, redact};

/// The roots and proxies outbound connections use, built from settings.
pub struct Network {
    /// `None` only when rustls refused the provider (never with aws-lc-rs's
    /// defaults); then reqwest falls back to its bundled roots and
    /// websockets over TLS fail with the reason.
    pub(crate) tls: Option<Arc<ClientConfig>>,
    /// The proxies that passed validation (http:// or https:// URLs).
    proxy: ProxySettings,
    pub(crate) matcher: Matcher,
    bundled_roots: usize,
    local_roots: usize,
    roots_source: String,
    warnings: Vec<String>,
}

/// `reqwest::Proxy::https` and its siblings.
type MakeProxy = fn(&str) -> reqwest::Result<reqwest::Proxy>;

static GLOBAL: OnceLock<Network> = OnceLock::new();
static REPORTED: AtomicBool = AtomicBool::new(false);

impl Network {
    /// Builds the roots and proxy rules `settings` describe. Problems (an
    /// unreadable `SSL_CERT_FILE`, a proxy URL of an unknown scheme) are kept
    /// in [`Network::warnings`]; the rest still works.
    pub fn new(settings: &NetworkSettings) -> Network {
        let roots = crate::roots::load(settings);
        let mut warnings = roots.warnings;
        let roots_source = if settings.cert_file.is_none() && settings.cert_dirs.is_empty() {
            "the system store".to_owned()
        } else {
            let mut parts: Vec<String> = Vec::new();
            if let Some(file) = &settings.cert_file {
                parts.push(format!("SSL_CERT_FILE={}", file.display()));
            }
            for dir in &settings.cert_dirs {
                parts.push(format!("SSL_CERT_DIR={}", dir.display()));
            }
            parts.join(", ")
        };
        let bundled_roots = webpki_roots::TLS_SERVER_ROOTS.len();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = match ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
        {
            Ok(builder) => {
                let mut config = builder
                    .with_root_certificates(roots.store)
                    .with_no_client_auth();
                // reqwest and tungstenite both speak HTTP/1.1 here.
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                Some(Arc::new(config))
            }
            Err(e) => {
                warnings.push(format!(
                    "cannot build the TLS client config ({e}); HTTP clients trust only the \
                     bundled roots and websockets over TLS fail"
                ));
                None
            }
        };
        let proxy = validated(&settings.proxy, &mut warnings);
        let matcher = Matcher::builder()
            .http(proxy.http.clone().unwrap_or_default())
            .https(proxy.https.clone().unwrap_or_default())
            .all(proxy.all.clone().unwrap_or_default())
            .no(proxy.no_proxy.clone().unwrap_or_default())
            .build();
        Network {
            tls,
            proxy,
            matcher,
            bundled_roots,
            local_roots: roots.local,
            roots_source,
            warnings,
        }
    }

    /// The process-wide network, built from the environment on first use.
    /// Its warnings and a one-line summary are logged once, as soon as a
    /// tracing subscriber is installed.
    pub fn global() -> &'static Network {
        let network = GLOBAL.get_or_init(|| Network::new(&NetworkSettings::from_env()));
        if !REPORTED.load(Ordering::Relaxed)
            && tracing::dispatcher::has_been_set()
            && !REPORTED.swap(true, Ordering::Relaxed)
        {
            network.report();
        }
        network
    }

    /// What went wrong reading the settings, one line each, naming the file
    /// or variable (proxy credentials never appear).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// One line for a log or a doctor: the roots and proxies in force, with
    /// proxy credentials redacted.
    pub fn summary(&self) -> String {
        let shown = |v: &Option<String>| v.as_deref().map(redact).unwrap_or_else(|| "-".into());
        format!(
            "TLS trusts {} bundled Mozilla roots and {} from {}; proxies: https={} http={} \
             all={} no_proxy={}",
            self.bundled_roots,
            self.local_roots,
            self.roots_source,
            shown(&self.proxy.https),
            shown(&self.proxy.http),
            shown(&self.proxy.all),
            self.proxy.no_proxy.as_deref().unwrap_or("-"),
        )
    }

    fn report(&self) {
        for warning in &self.warnings {
            tracing::warn!(target: "crewlet_http", "{warning}");
        }
        tracing::info!(target: "crewlet_http", "outbound network: {}", self.summary());
    }

    /// The proxy a request to `url` goes through, redacted, or `None` when it
    /// goes direct (no proxy for its scheme, or `NO_PROXY` matches).
    pub fn proxy_for(&self, url: &str) -> Option<String> {
        let uri: http::Uri = url.parse().ok()?;
        let uri = match uri.scheme_str() {
            Some("ws") => with_scheme(&uri, "http")?,
            Some("wss") => with_scheme(&uri, "https")?,
            _ => uri,
        };
        self.matcher
            .intercept(&uri)
            .map(|proxy| redact(&proxy.uri().to_string()))
    }

    /// The rustls config every connection uses.
    pub fn tls_config(&self) -> Option<Arc<ClientConfig>> {
        self.tls.clone()
    }

    /// A reqwest builder with these roots and proxies.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        let mut builder = reqwest::Client::builder().no_proxy();
        for proxy in self.reqwest_proxies() {
            builder = builder.proxy(proxy);
        }
        match &self.tls {
            Some(tls) => builder.use_preconfigured_tls(ClientConfig::clone(tls)),
            None => builder,
        }
    }

    /// The blocking twin of [`Network::client_builder`].
    #[cfg(feature = "blocking")]
    pub fn blocking_client_builder(&self) -> reqwest::blocking::ClientBuilder {
        let mut builder = reqwest::blocking::Client::builder().no_proxy();
        for proxy in self.reqwest_proxies() {
            builder = builder.proxy(proxy);
        }
        match &self.tls {
            Some(tls) => builder.use_preconfigured_tls(ClientConfig::clone(tls)),
            None => builder,
        }
    }

    /// reqwest's rules for the same settings: the scheme-specific proxies
    /// first, then `ALL_PROXY`, each with the same `NO_PROXY` list. reqwest
    /// builds each into the hyper-util matcher [`Network::proxy_for`] and the
    /// websockets use, so both decide alike.
    fn reqwest_proxies(&self) -> Vec<reqwest::Proxy> {
        let no_proxy = || {
            self.proxy
                .no_proxy
                .as_deref()
                .and_then(reqwest::NoProxy::from_string)
        };
        let rules: [(&Option<String>, MakeProxy); 3] = [
            (&self.proxy.https, |u| reqwest::Proxy::https(u)),
            (&self.proxy.http, |u| reqwest::Proxy::http(u)),
            (&self.proxy.all, |u| reqwest::Proxy::all(u)),
        ];
        rules
            .into_iter()
            .filter_map(|(url, make)| make(url.as_deref()?).ok())
            .map(|proxy| proxy.no_proxy(no_proxy()))
            .collect()
    }
}

/// Keeps the proxies both reqwest and the websocket tunnel can use: an
/// `http://` or `https://` URL with a host. Anything else is dropped with a
/// warning (redacted), so HTTP and websockets never disagree.
fn validated(proxy: &ProxySettings, warnings: &mut Vec<String>) -> ProxySettings {
    let mut keep = |var: &str, value: &Option<String>| {
        let url = value.as_deref()?;
        let usable = url.parse::<http::Uri>().is_ok_and(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https"))
                && uri.host().is_some_and(|h| !h.is_empty())
        }) && reqwest::Proxy::all(url).is_ok();
        if usable {
            Some(url.to_owned())
        } else {
            warnings.push(format!(
                "{var}={} is not an http:// or https:// proxy URL; it is ignored and those \
                 connections go direct",
                redact(url)
            ));
            None
        }
    };
    ProxySettings {
        http: keep("HTTP_PROXY", &proxy.http),
        https: keep("HTTPS_PROXY", &proxy.https),
        all: keep("ALL_PROXY", &proxy.all),
        no_proxy: proxy.no_proxy.clone(),
    }
}

fn with_scheme(uri: &http::Uri, scheme: &str) -> Option<http::Uri> {
    let authority = uri.authority()?;
    format!("{scheme}://{authority}/").parse().ok()
}
