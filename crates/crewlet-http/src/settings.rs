//! What the outbound network takes from the environment, read in one place.
//!
//! [`NetworkSettings::from_env`] is the only reader of `SSL_CERT_FILE`,
//! `SSL_CERT_DIR` and the proxy variables; everything else gets the values as
//! input, so tests build clients from explicit settings without touching the
//! process environment.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

/// The extra roots and the proxies for every outbound connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkSettings {
    /// `SSL_CERT_FILE`: a PEM bundle read instead of the system store.
    pub cert_file: Option<PathBuf>,
    /// `SSL_CERT_DIR`: directories (`:`-separated) of PEM files read instead
    /// of the system store.
    pub cert_dirs: Vec<PathBuf>,
    /// `HTTPS_PROXY` and friends.
    pub proxy: ProxySettings,
}

/// The proxy variables, as given (credentials included: never log these
/// values, log [`redact`]ed ones).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ProxySettings {
    /// `HTTP_PROXY` / `http_proxy`: the proxy for `http://` and `ws://` targets.
    pub http: Option<String>,
    /// `HTTPS_PROXY` / `https_proxy`: the proxy for `https://` and `wss://` targets.
    pub https: Option<String>,
    /// `ALL_PROXY` / `all_proxy`: the proxy for either when the specific one is unset.
    pub all: Option<String>,
    /// `NO_PROXY` / `no_proxy`: hosts reached directly (comma-separated
    /// domains, which also cover their subdomains, IPs, CIDR ranges, or `*`).
    pub no_proxy: Option<String>,
}

impl ProxySettings {
    /// Whether any proxy is set.
    pub fn any(&self) -> bool {
        self.http.is_some() || self.https.is_some() || self.all.is_some()
    }
}

impl fmt::Debug for ProxySettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |v: &Option<String>| v.as_deref().map(redact);
        f.debug_struct("ProxySettings")
            .field("http", &shown(&self.http))
            .field("https", &shown(&self.https))
            .field("all", &shown(&self.all))
            .field("no_proxy", &self.no_proxy)
            .finish()
    }
}

impl NetworkSettings {
    /// Reads the settings from the process environment.
    pub fn from_env() -> NetworkSettings {
        NetworkSettings::from_lookup(|name| std::env::var_os(name))
    }

    /// Reads the settings through `get` (the environment, or a map in tests).
    ///
    /// Upper case wins over lower case, as in reqwest and curl for every
    /// variable but `http_proxy`; an empty value counts as unset; a proxy
    /// without a scheme is `http://`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<OsString>) -> NetworkSettings {
        let text = |names: &[&str]| {
            names.iter().find_map(|name| {
                let value = get(name)?.into_string().ok()?;
                let value = value.trim();
                (!value.is_empty()).then(|| value.to_owned())
            })
        };
        let proxy_url = |names: &[&str]| text(names).map(|v| with_scheme(&v));
        NetworkSettings {
            cert_file: get("SSL_CERT_FILE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            cert_dirs: get("SSL_CERT_DIR")
                .map(|dirs| {
                    std::env::split_paths(&dirs)
                        .filter(|p| !p.as_os_str().is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            proxy: ProxySettings {
                http: proxy_url(&["HTTP_PROXY", "http_proxy"]),
                https: proxy_url(&["HTTPS_PROXY", "https_proxy"]),
                all: proxy_url(&["ALL_PROXY", "all_proxy"]),
                no_proxy: text(&["NO_PROXY", "no_proxy"]),
            },
        }
    }
}

/// `proxy:3128` means `http://proxy:3128` (reqwest and hyper-util agree on
/// that only when the scheme is written, so it is written here).
fn with_scheme(value: &str) -> String {
    if value.contains("://") {
        value.to_owned()
    } else {
        format!("http://{value}")
    }
}

/// A proxy URL fit for a log: scheme, host and port; credentials become `***`
/// and any path is dropped.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    // The last `@` anywhere: a password written with a raw `/` or `@` in it
    // must not leak through the cut at the path.
    let (credentials, after) = match rest.rsplit_once('@') {
        Some((_, after)) => (true, after),
        None => (false, rest),
    };
    let host_port = after.split(['/', '?', '#']).next().unwrap_or("");
    let host = if credentials {
        format!("***@{host_port}")
    } else {
        host_port.to_owned()
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{host}"),
        None => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> NetworkSettings {
        let map: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        NetworkSettings::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn nothing_set_is_all_default() {
        assert_eq!(settings(&[]), NetworkSettings::default());
        assert!(!settings(&[]).proxy.any());
    }

    #[test]
    fn cert_file_and_dirs() {
        let s = settings(&[
            ("SSL_CERT_FILE", "/etc/corp/ca.pem"),
            ("SSL_CERT_DIR", "/etc/a::/etc/b"),
        ]);
        assert_eq!(s.cert_file, Some(PathBuf::from("/etc/corp/ca.pem")));
        assert_eq!(
            s.cert_dirs,
            vec![PathBuf::from("/etc/a"), PathBuf::from("/etc/b")]
        );
        let empty = settings(&[("SSL_CERT_FILE", ""), ("SSL_CERT_DIR", "")]);
        assert_eq!(empty.cert_file, None);
        assert!(empty.cert_dirs.is_empty());
    }

    #[test]
    fn upper_case_wins_and_lower_case_is_read() {
        let s = settings(&[
            ("HTTPS_PROXY", "http://upper:1"),
            ("https_proxy", "http://lower:1"),
            ("http_proxy", "http://plain:2"),
            ("all_proxy", "http://all:3"),
            ("no_proxy", "localhost,.corp"),
        ]);
        assert_eq!(s.proxy.https.as_deref(), Some("http://upper:1"));
        assert_eq!(s.proxy.http.as_deref(), Some("http://plain:2"));
        assert_eq!(s.proxy.all.as_deref(), Some("http://all:3"));
        assert_eq!(s.proxy.no_proxy.as_deref(), Some("localhost,.corp"));
        assert!(s.proxy.any());
    }

    #[test]
    fn empty_is_unset_and_a_bare_host_is_http() {
        let s = settings(&[
            ("HTTPS_PROXY", "  "),
            ("https_proxy", "proxy.corp:3128"),
            ("NO_PROXY", ""),
        ]);
        assert_eq!(s.proxy.https.as_deref(), Some("http://proxy.corp:3128"));
        assert_eq!(s.proxy.no_proxy, None);
    }

    #[test]
    fn redaction_hides_credentials_everywhere() {
        assert_eq!(
            redact("http://alice:s3cret@proxy.corp:3128/path?x=1"),
            "http://***@proxy.corp:3128"
        );
        assert_eq!(redact("http://proxy.corp:3128"), "http://proxy.corp:3128");
        assert_eq!(redact("bob:pw@proxy:1"), "***@proxy:1");
        assert_eq!(redact("http://bob:p/w@d@proxy:1/x"), "http://***@proxy:1");
        let s = settings(&[("HTTPS_PROXY", "http://alice:s3cret@proxy.corp:3128")]);
        let shown = format!("{s:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(!shown.contains("alice"), "{shown}");
        assert!(shown.contains("proxy.corp:3128"), "{shown}");
    }
}
