/// What can go wrong setting up logs and traces, or joining a trace.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(
        "log filter `{filter}` is not valid `tracing` filter syntax ({reason}); \
         write e.g. `info,crewlet_turn=debug` in observability.log_filter or RUST_LOG"
    )]
    Filter { filter: String, reason: String },
    #[error(
        "otlp endpoint `{endpoint}` ({source_name}) is not an http(s) url: {reason}; \
         write e.g. `http://127.0.0.1:4318`"
    )]
    OtlpEndpoint {
        endpoint: String,
        /// Where the value came from: the config key or the variable name.
        source_name: &'static str,
        reason: String,
    },
    #[error("could not build the otlp/http span exporter for `{endpoint}`: {reason}")]
    Exporter { endpoint: String, reason: String },
    #[error(
        "a global tracing subscriber is already installed (telemetry is set up once per process)"
    )]
    AlreadyInstalled,
    #[error("the span is disabled by the filters, so it has no trace to join")]
    SpanDisabled,
    #[error("the span was already entered; restore its parent before entering it")]
    SpanAlreadyStarted,
    #[error("no opentelemetry layer is installed (crewlet_telemetry::init was not called)")]
    NoTraceLayer,
}
