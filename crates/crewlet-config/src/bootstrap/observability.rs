//! `observability`: logs and traces.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Logs and traces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Observability {
    /// `service.name` of exported traces.
    #[serde(default = "default_service_name")]
    #[schemars(length(min = 1))]
    pub service_name: String,
    /// OTLP/HTTP endpoint for traces, e.g. `http://127.0.0.1:4318`. The
    /// standard `OTEL_EXPORTER_OTLP_ENDPOINT` variable is used when this is unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// Log line format.
    #[serde(default)]
    pub log_format: LogFormat,
    /// Log filter in `tracing` syntax, e.g. `info,crewlet_turn=debug`;
    /// `RUST_LOG` wins when set. Unset: `info` (`debug` with `debug: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_filter: Option<String>,
}

impl Default for Observability {
    fn default() -> Self {
        Self {
            service_name: default_service_name(),
            otlp_endpoint: None,
            log_format: LogFormat::default(),
            log_filter: None,
        }
    }
}

fn default_service_name() -> String {
    "crewlet".into()
}

/// How log lines look.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// JSON when stderr is not a terminal, text otherwise.
    #[default]
    Auto,
    /// One JSON object per line.
    Json,
    /// Human-readable text.
    Text,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Auto => "auto",
            LogFormat::Json => "json",
            LogFormat::Text => "text",
        }
    }
}
