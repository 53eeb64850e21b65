//! Crewlet's logs and traces.
//!
//! Owns: the process-wide `tracing` subscriber ([`init`]): JSON lines when
//! stderr is not a terminal, readable text on one; `debug`/`--debug` and
//! `RUST_LOG`/`observability.log_filter`; secret redaction in every line and
//! exported span ([`register_secret`]; the company fields that hold
//! credentials are [`COMPANY_SECRET_KEYS`], which `crewlet-integrations`
//! tests against each webhook source's declared secret fields, since this
//! crate does not depend on it); OpenTelemetry spans for every
//! `tracing` span, exported over OTLP/HTTP (protobuf, batched) only when
//! `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `observability.otlp_endpoint` is set; the bridge between spans and the
//! trace context on [`Event`](crewlet_core::Event)s ([`stamp`],
//! [`span_from_event`], [`current_trace_context`]); the standard spans
//! ([`webhook_span`], [`turn_span`], ...).
//!
//! Does not own: the event store, the per-agent token counters or budgets
//! (engine, store, turn), or where events go (queue).
//!
//! ```text
//! let _telemetry = crewlet_telemetry::init(
//!     TelemetryOptions::from_bootstrap(&bootstrap).with_debug(bootstrap.debug || cli.debug));
//! // producer
//! let span = webhook_span("slack");
//! let event = span.in_scope(|| stamp(Event::new(EventType::RawWebhook, "api.webhooks")));
//! // consumer, other process
//! let span = span_from_event("route", &event);
//! async { router.route(event).await }.instrument(span).await;
//! ```

mod bridge;
mod error;
mod init;
mod layer;
mod options;
mod redact;
mod spans;

pub use bridge::{
    current_trace_context, current_traceparent, detach_from_trace, set_parent_from,
    span_from_event, stamp, trace_context_of,
};
pub use crewlet_config::LogFormat;
pub use error::TelemetryError;
pub use init::{TelemetryGuard, build, init, try_init};
pub use options::{
    COMPANY_SECRET_KEYS, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, RUST_LOG,
    TRACES_PATH, TelemetryOptions, secrets_in_bootstrap, secrets_in_company,
};
pub use redact::{
    MIN_SECRET_LEN, REDACTED, RedactingMakeWriter, RedactingWriter, Redactor, global_redactor,
    redact, register_secret, register_secrets,
};
pub use spans::{llm_span, phase_span, routing_span, tool_span, turn_span, webhook_span};
