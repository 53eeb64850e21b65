use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::McpError;

/// Default time for a server to start and answer `initialize`.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(120);
/// Default time for any one request (`tools/call` included).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// How Crewlet talks to an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout.
    #[default]
    Stdio,
    /// Streamable HTTP: JSON-RPC POSTed to one URL.
    Http,
}

/// One MCP server as the engine maps it from the company YAML.
///
/// `env` values and `headers` values are credentials more often than not:
/// `Debug` shows their names only.
#[derive(Clone, PartialEq)]
pub struct McpServerSpec {
    pub name: String,
    pub transport: McpTransport,
    /// Stdio: the program to run (looked up on `PATH`).
    pub command: Option<String>,
    pub args: Vec<String>,
    /// Stdio: environment of the process, on top of a small inherited set
    /// ([`INHERITED_ENV`]); the engine's own environment is not passed on.
    pub env: BTreeMap<String, String>,
    /// HTTP: the MCP endpoint, e.g. `https://mcp.example.com/mcp`.
    pub url: Option<String>,
    /// HTTP: extra headers on every request (e.g. `Authorization`).
    pub headers: BTreeMap<String, String>,
    pub startup_timeout: Duration,
    pub request_timeout: Duration,
}

/// Variables a stdio server inherits from the engine's environment (when
/// set there): enough to find programs and a home directory, nothing that
/// could carry another seat's credentials.
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

impl McpServerSpec {
    /// A stdio server running `command args...`, with default timeouts.
    pub fn stdio(
        name: impl Into<String>,
        command: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            name: name.into(),
            transport: McpTransport::Stdio,
            command: Some(command.into()),
            args: args.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            url: None,
            headers: BTreeMap::new(),
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// A streamable HTTP server at `url`, with default timeouts.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            transport: McpTransport::Http,
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            url: Some(url.into()),
            headers: BTreeMap::new(),
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    pub fn with_timeouts(mut self, startup: Duration, request: Duration) -> Self {
        self.startup_timeout = startup;
        self.request_timeout = request;
        self
    }

    /// This server as launched for one role: the role's `mcp_env` becomes
    /// environment variables (stdio) or headers (HTTP), overriding the
    /// server's own entries of the same name.
    pub fn for_role(&self, mcp_env: &BTreeMap<String, String>) -> Self {
        let mut spec = self.clone();
        let target = match spec.transport {
            McpTransport::Stdio => &mut spec.env,
            McpTransport::Http => &mut spec.headers,
        };
        target.extend(mcp_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        spec
    }

    /// Checks what the transport needs is there, before anything is started.
    pub fn validate(&self) -> Result<(), McpError> {
        let config = |reason: &str| McpError::Config {
            server: self.name.clone(),
            reason: reason.to_string(),
        };
        if self.name.trim().is_empty() {
            return Err(config("the server has no name"));
        }
        match self.transport {
            McpTransport::Stdio => {
                if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    return Err(config("a stdio server needs `command`"));
                }
            }
            McpTransport::Http => {
                let Some(url) = self.url.as_deref() else {
                    return Err(config("an http server needs `url`"));
                };
                let parsed = reqwest::Url::parse(url)
                    .map_err(|e| config(&format!("`url` is not a valid URL: {e}")))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(config("`url` must be http:// or https://"));
                }
                for (name, value) in &self.headers {
                    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                        return Err(config(&format!("header name `{name}` is not valid")));
                    }
                    if reqwest::header::HeaderValue::from_str(value).is_err() {
                        return Err(config(&format!(
                            "the value of header `{name}` is not valid header text"
                        )));
                    }
                }
            }
        }
        if self.startup_timeout.is_zero() || self.request_timeout.is_zero() {
            return Err(config("timeouts must be greater than zero"));
        }
        Ok(())
    }
}

impl fmt::Debug for McpServerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServerSpec")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("url", &self.url.as_deref().map(redact_url))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("startup_timeout", &self.startup_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// A URL fit for logs and errors: user info and query string removed, since
/// either may carry a token.
pub(crate) fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "<invalid url>".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_credentials() {
        let spec = McpServerSpec::http("gh", "https://user:pw@mcp.example.com/mcp?token=abc")
            .with_header("Authorization", "Bearer ghp_secret")
            .with_env("GITHUB_TOKEN", "ghp_other");
        let dbg = format!("{spec:?}");
        for secret in ["ghp_secret", "ghp_other", "pw", "token=abc"] {
            assert!(!dbg.contains(secret), "{secret} leaked: {dbg}");
        }
        assert!(dbg.contains("Authorization") && dbg.contains("mcp.example.com"));
    }

    #[test]
    fn the_inherited_base_carries_no_credential() {
        // A stdio child sees only these of the engine's variables (the
        // spawn clears the rest; `mcp_fake_server.rs` checks a real child).
        for name in INHERITED_ENV {
            let upper = name.to_ascii_uppercase();
            for word in [
                "KEY", "TOKEN", "SECRET", "PASSWORD", "DSN", "AUTH", "CREWLET",
            ] {
                assert!(!upper.contains(word), "{name} could carry a credential");
            }
        }
        for engine_secret in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "CREWLET_PROVIDERS__DATABASE__DSN",
            "CREWLET_PROVIDERS__QUEUE__AUTH_TOKEN",
            "LD_PRELOAD",
            "NODE_OPTIONS",
        ] {
            assert!(!INHERITED_ENV.contains(&engine_secret), "{engine_secret}");
        }
    }

    #[test]
    fn role_env_becomes_env_or_headers() {
        let mut role = BTreeMap::new();
        role.insert("TOKEN".to_string(), "role-token".to_string());
        let stdio = McpServerSpec::stdio("s", "server", ["--x"])
            .with_env("TOKEN", "shared")
            .for_role(&role);
        assert_eq!(stdio.env["TOKEN"], "role-token");
        assert!(stdio.headers.is_empty());
        let http = McpServerSpec::http("h", "http://127.0.0.1:1/mcp").for_role(&role);
        assert_eq!(http.headers["TOKEN"], "role-token");
        assert!(http.env.is_empty());
    }

    #[test]
    fn validation_names_the_server_and_the_fix() {
        let mut s = McpServerSpec::stdio("files", "", Vec::<String>::new());
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("files") && e.contains("command"), "{e}");
        s.command = Some("x".into());
        s.validate().unwrap();
        let h = McpServerSpec::http("web", "ftp://x");
        assert!(h.validate().unwrap_err().to_string().contains("http://"));
        let h = McpServerSpec::http("web", "http://x/mcp").with_header("Bad Header", "v");
        assert!(h.validate().is_err());
        let h = McpServerSpec::http("web", "http://x/mcp").with_header("X-Ok", "line\nbreak");
        assert!(h.validate().is_err());
        let mut t = McpServerSpec::http("web", "http://x/mcp");
        t.request_timeout = Duration::ZERO;
        assert!(t.validate().is_err());
    }
}
