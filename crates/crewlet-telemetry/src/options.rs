//! What a process tells [`init`](crate::init): the Tier A `debug` and
//! `observability` settings, the secrets to keep out of logs, and (for tests)
//! where log lines and spans go.

use std::fmt;

use crewlet_config::{Bootstrap, LogFormat};
use opentelemetry_sdk::trace::{SimpleSpanProcessor, SpanExporter, TracerProviderBuilder};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

use crate::error::TelemetryError;
use crate::redact::RedactingProcessor;

/// `RUST_LOG`: a `tracing` filter that wins over `observability.log_filter`.
pub const RUST_LOG: &str = "RUST_LOG";
/// The OTLP base URL (`http://host:4318`) or, as the seed writes it, the full
/// traces URL (`http://host:4318/v1/traces`); both are accepted.
pub const OTEL_EXPORTER_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The full traces URL, used as is.
pub const OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";

/// The path OTLP/HTTP receivers take traces on.
pub const TRACES_PATH: &str = "/v1/traces";

type ProcessorHook = Box<dyn FnOnce(TracerProviderBuilder) -> TracerProviderBuilder + Send>;

/// Settings for [`init`](crate::init) / [`build`](crate::build).
///
/// [`TelemetryOptions::new`] and [`TelemetryOptions::from_bootstrap`] read
/// `RUST_LOG` and the `OTEL_EXPORTER_OTLP_*` variables into the public
/// fields, so a test can set or clear them without touching the process
/// environment.
pub struct TelemetryOptions {
    /// `service.name` of exported spans.
    pub service_name: String,
    /// DEBUG for Crewlet's own targets (`crewlet=debug`), on top of the filter.
    pub debug: bool,
    /// JSON, text, or JSON unless stderr is a terminal.
    pub log_format: LogFormat,
    /// Tier A `observability.log_filter`.
    pub log_filter: Option<String>,
    /// Tier A `observability.otlp_endpoint` (base or full traces URL); wins
    /// over the environment.
    pub otlp_endpoint: Option<String>,
    /// `RUST_LOG` as read at construction; wins over `log_filter`.
    pub rust_log: Option<String>,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as read at construction.
    pub env_traces_endpoint: Option<String>,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` as read at construction.
    pub env_endpoint: Option<String>,
    /// Values registered with [`register_secret`](crate::register_secret) at init.
    pub secrets: Vec<String>,
    pub(crate) writer: Option<BoxMakeWriter>,
    pub(crate) processors: Vec<ProcessorHook>,
}

impl fmt::Debug for TelemetryOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryOptions")
            .field("service_name", &self.service_name)
            .field("debug", &self.debug)
            .field("log_format", &self.log_format)
            .field("log_filter", &self.log_filter)
            .field("otlp_endpoint", &self.otlp_endpoint)
            .field("rust_log", &self.rust_log)
            .field("env_traces_endpoint", &self.env_traces_endpoint)
            .field("env_endpoint", &self.env_endpoint)
            .field("secrets", &format_args!("[{} values]", self.secrets.len()))
            .field("custom_writer", &self.writer.is_some())
            .field("extra_processors", &self.processors.len())
            .finish()
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl TelemetryOptions {
    /// Defaults (INFO, auto format, no export unless the environment asks)
    /// for `service_name`, with `RUST_LOG` and `OTEL_EXPORTER_OTLP_*` read
    /// from the process environment.
    pub fn new(service_name: impl Into<String>) -> Self {
        Self {
            service_name: service_name.into(),
            debug: false,
            log_format: LogFormat::Auto,
            log_filter: None,
            otlp_endpoint: None,
            rust_log: env_var(RUST_LOG),
            env_traces_endpoint: env_var(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT),
            env_endpoint: env_var(OTEL_EXPORTER_OTLP_ENDPOINT),
            secrets: Vec::new(),
            writer: None,
            processors: Vec::new(),
        }
    }

    /// The Tier A `debug` and `observability` block, plus the secrets the
    /// bootstrap holds (database password, Pulsar token, API bearer tokens).
    /// `--debug` on the command line: `.with_debug(bootstrap.debug || cli.debug)`.
    pub fn from_bootstrap(bootstrap: &Bootstrap) -> Self {
        let o = &bootstrap.observability;
        let mut opts = Self::new(o.service_name.clone());
        opts.debug = bootstrap.debug;
        opts.log_format = o.log_format;
        opts.log_filter = o.log_filter.clone();
        opts.otlp_endpoint = o.otlp_endpoint.clone();
        opts.secrets = secrets_in_bootstrap(bootstrap);
        opts
    }

    pub fn with_service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    pub fn with_debug(mut self, debug: bool) -> Self {
        self.debug = debug;
        self
    }

    pub fn with_log_format(mut self, format: LogFormat) -> Self {
        self.log_format = format;
        self
    }

    pub fn with_log_filter(mut self, filter: impl Into<String>) -> Self {
        self.log_filter = Some(filter.into());
        self
    }

    pub fn with_otlp_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.otlp_endpoint = Some(endpoint.into());
        self
    }

    pub fn with_secret(mut self, secret: impl Into<String>) -> Self {
        self.secrets.push(secret.into());
        self
    }

    /// Forgets what was read from `RUST_LOG` and `OTEL_EXPORTER_OTLP_*`
    /// (tests, and processes that want only their config file to count).
    pub fn ignore_env(mut self) -> Self {
        self.rust_log = None;
        self.env_traces_endpoint = None;
        self.env_endpoint = None;
        self
    }

    /// Log lines go to `writer` instead of stderr (still redacted). With
    /// `LogFormat::Auto` a custom writer gets JSON.
    pub fn with_writer<W>(mut self, writer: W) -> Self
    where
        W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
    {
        self.writer = Some(BoxMakeWriter::new(writer));
        self
    }

    /// Also hands every finished span to `exporter`, one at a time as it
    /// ends (tests: `opentelemetry_sdk`'s in-memory exporter). Attribute
    /// values are redacted first, as for OTLP export.
    pub fn with_span_exporter<E: SpanExporter + 'static>(mut self, exporter: E) -> Self {
        self.processors.push(Box::new(move |builder| {
            builder.with_span_processor(RedactingProcessor::new(SimpleSpanProcessor::new(exporter)))
        }));
        self
    }

    /// The filter the log lines use: `RUST_LOG`, else `log_filter`, else
    /// `info`; with `debug`, `crewlet=debug` is added (which covers every
    /// `crewlet_*` crate: filter targets match by prefix).
    pub fn log_directives(&self) -> String {
        let base = self
            .rust_log
            .as_deref()
            .or(self.log_filter.as_deref())
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .unwrap_or("info");
        if self.debug {
            format!("{base},crewlet=debug")
        } else {
            base.to_owned()
        }
    }

    /// The traces URL spans are exported to, if any: `otlp_endpoint`, else
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (as is), else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`. A base URL gets `/v1/traces` appended;
    /// a URL already ending in `/v1/traces` is kept.
    pub fn traces_endpoint(&self) -> Result<Option<String>, TelemetryError> {
        fn clean(v: &Option<String>) -> Option<&str> {
            v.as_deref().map(str::trim).filter(|s| !s.is_empty())
        }
        if let Some(raw) = clean(&self.otlp_endpoint) {
            return traces_url(raw, "observability.otlp_endpoint", true).map(Some);
        }
        if let Some(raw) = clean(&self.env_traces_endpoint) {
            return traces_url(raw, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, false).map(Some);
        }
        if let Some(raw) = clean(&self.env_endpoint) {
            return traces_url(raw, OTEL_EXPORTER_OTLP_ENDPOINT, true).map(Some);
        }
        Ok(None)
    }
}

/// Checks an endpoint and, when `append` is set, turns a base URL into the
/// traces URL.
fn traces_url(
    raw: &str,
    source_name: &'static str,
    append: bool,
) -> Result<String, TelemetryError> {
    let bad = |reason: &str| TelemetryError::OtlpEndpoint {
        endpoint: raw.to_owned(),
        source_name,
        reason: reason.to_owned(),
    };
    let rest = raw
        .strip_prefix("http://")
        .or_else(|| raw.strip_prefix("https://"))
        .ok_or_else(|| bad("it must start with http:// or https://"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(bad("it names no host"));
    }
    if raw.chars().any(char::is_whitespace) {
        return Err(bad("it contains white space"));
    }
    let url = raw.trim_end_matches('/');
    if !append || url.ends_with(TRACES_PATH) {
        return Ok(url.to_owned());
    }
    Ok(format!("{url}{TRACES_PATH}"))
}

/// The secret values a bootstrap file holds: the database password, the
/// Pulsar token, and the API bearer tokens.
pub fn secrets_in_bootstrap(bootstrap: &Bootstrap) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(db) = &bootstrap.providers.database
        && let Some(password) = dsn_password(&db.dsn)
    {
        out.push(password);
    }
    if let Some(token) = bootstrap
        .providers
        .queue
        .as_ref()
        .and_then(|q| q.auth_token.clone())
    {
        out.push(token);
    }
    out.extend(bootstrap.api.auth.tokens.iter().map(|t| t.token.clone()));
    out
}

/// Keys of a company file whose values are credentials (wherever they sit:
/// providers, integrations, seats' accounts, MCP servers).
///
/// Per-source webhook credentials are declared by each source in
/// `crewlet-integrations` (`WebhookSource::secret_fields`); this crate does
/// not depend on it, so a test there asserts this list covers them.
pub const COMPANY_SECRET_KEYS: &[&str] = &[
    "api_keys",
    "token",
    "bot_token",
    "signing_secret",
    "webhook_secret",
    "webhook_token",
    "password",
    "api_key",
];

/// The secret values a company holds, with `${VAR}` references expanded
/// through `env` (unset variables are skipped): model keys, webhook secrets,
/// bot and account tokens. Register them with
/// [`register_secrets`](crate::register_secrets) at boot, so no log line
/// carries one even when nothing logs it on purpose.
pub fn secrets_in_company(
    company: &crewlet_config::Company,
    env: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    fn walk(v: &serde_json::Value, secret: bool, out: &mut Vec<serde_json::Value>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    walk(v, secret || COMPANY_SECRET_KEYS.contains(&k.as_str()), out);
                }
            }
            serde_json::Value::Array(items) => {
                for v in items {
                    walk(v, secret, out);
                }
            }
            serde_json::Value::String(_) if secret => out.push(v.clone()),
            _ => {}
        }
    }
    let Ok(json) = serde_json::to_value(company) else {
        return Vec::new();
    };
    let mut raw = Vec::new();
    walk(&json, false, &mut raw);
    raw.iter()
        .filter_map(|v| v.as_str())
        .filter_map(|s| crewlet_config::interpolate(s, &env).ok())
        .filter(|s| !s.trim().is_empty())
        .collect()
}

/// The password of a `postgres://user:password@host/db` URL, or of a
/// `key=value` DSN's `password=`.
fn dsn_password(dsn: &str) -> Option<String> {
    if let Some((_, rest)) = dsn.split_once("://") {
        let authority = rest.split(['/', '?']).next()?;
        let userinfo = authority.rsplit_once('@')?.0;
        let password = userinfo.split_once(':')?.1;
        return (!password.is_empty()).then(|| password.to_owned());
    }
    dsn.split_whitespace()
        .find_map(|kv| kv.strip_prefix("password="))
        .map(|p| p.trim_matches('\'').to_owned())
        .filter(|p| !p.is_empty())
}

#[cfg(test)]
mod company_secret_tests {
    use super::*;

    #[test]
    fn company_credentials_are_found_and_expanded() {
        let yaml = r#"
name: Acme
providers:
  llm:
    main: {type: openai, model: m, api_keys: ["${KEY_A}", "literal-key-b"]}
integrations:
  github: {webhook_secret: gh-hook-secret, token: "${GH_TOKEN}"}
roles:
  - name: Eng
    handle: eng
    integrations:
      slack: {signing_secret: slack-sign, bot_token: xoxb-seat-token, bot_user_id: U1}
"#;
        let (company, _) =
            crewlet_config::check_company("t.yaml", yaml).unwrap_or_else(|p| panic!("{p:?}"));
        let env = |k: &str| match k {
            "KEY_A" => Some("expanded-key-a".to_owned()),
            _ => None,
        };
        let mut found = secrets_in_company(&company, env);
        found.sort();
        assert_eq!(
            found,
            [
                "expanded-key-a",
                "gh-hook-secret",
                "literal-key-b",
                "slack-sign",
                "xoxb-seat-token"
            ]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> TelemetryOptions {
        TelemetryOptions::new("t").ignore_env()
    }

    #[test]
    fn filter_defaults_to_info_and_debug_adds_crewlet() {
        assert_eq!(opts().log_directives(), "info");
        assert_eq!(
            opts().with_debug(true).log_directives(),
            "info,crewlet=debug"
        );
        let o = opts().with_log_filter("warn,crewlet_turn=trace");
        assert_eq!(o.log_directives(), "warn,crewlet_turn=trace");
        let mut o = o.with_debug(true);
        o.rust_log = Some("error".into());
        assert_eq!(o.log_directives(), "error,crewlet=debug", "RUST_LOG wins");
    }

    #[test]
    fn endpoint_accepts_base_and_full_traces_urls() -> Result<(), TelemetryError> {
        assert_eq!(opts().traces_endpoint()?, None);
        let mut o = opts();
        o.env_endpoint = Some("http://127.0.0.1:4318".into());
        assert_eq!(
            o.traces_endpoint()?.as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        o.env_endpoint = Some("http://127.0.0.1:4318/v1/traces".into());
        assert_eq!(
            o.traces_endpoint()?.as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        o.env_endpoint = Some("https://otel.example.com/otlp/".into());
        assert_eq!(
            o.traces_endpoint()?.as_deref(),
            Some("https://otel.example.com/otlp/v1/traces")
        );
        o.env_traces_endpoint = Some("http://traces:9999/custom".into());
        assert_eq!(
            o.traces_endpoint()?.as_deref(),
            Some("http://traces:9999/custom"),
            "the per-signal variable is used as is and wins over the base one"
        );
        let o = o.with_otlp_endpoint("http://config:4318");
        assert_eq!(
            o.traces_endpoint()?.as_deref(),
            Some("http://config:4318/v1/traces"),
            "the config file wins over the environment"
        );
        Ok(())
    }

    #[test]
    fn bad_endpoints_name_their_source() {
        let o = opts().with_otlp_endpoint("localhost:4318");
        let err = o
            .traces_endpoint()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("observability.otlp_endpoint"), "{err}");
        assert!(err.contains("localhost:4318"), "{err}");
        let mut o = opts();
        o.env_endpoint = Some("http://".into());
        let err = o
            .traces_endpoint()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains(OTEL_EXPORTER_OTLP_ENDPOINT), "{err}");
    }

    #[test]
    fn bootstrap_secrets_are_collected() -> Result<(), crewlet_config::ConfigError> {
        let b = Bootstrap::from_yaml(
            "config.yaml",
            "debug: true\n\
             providers:\n  database:\n    dsn: postgres://crewlet:db-pass-123@127.0.0.1:5432/crewlet\n  \
             queue:\n    type: pulsar\n    url: pulsar://127.0.0.1:6650\n    auth_token: pulsar-jwt-xyz\n\
             api:\n  auth:\n    tokens:\n      - id: ops\n        token: api-token-abc\n\
             observability:\n  service_name: crewlet-test\n  log_format: json\n  log_filter: warn\n  otlp_endpoint: http://127.0.0.1:4318\n",
        )?;
        let o = TelemetryOptions::from_bootstrap(&b);
        assert!(o.debug);
        assert_eq!(o.service_name, "crewlet-test");
        assert_eq!(o.log_format, LogFormat::Json);
        assert_eq!(o.log_filter.as_deref(), Some("warn"));
        assert_eq!(
            o.secrets,
            ["db-pass-123", "pulsar-jwt-xyz", "api-token-abc"]
        );
        Ok(())
    }

    #[test]
    fn dsn_passwords_in_both_spellings() {
        assert_eq!(
            dsn_password("postgresql://u:p%40ss@h:5432/db?sslmode=require").as_deref(),
            Some("p%40ss")
        );
        assert_eq!(dsn_password("postgres://u@h/db"), None);
        assert_eq!(
            dsn_password("host=h user=u password='s3cret' dbname=d").as_deref(),
            Some("s3cret")
        );
    }
}
