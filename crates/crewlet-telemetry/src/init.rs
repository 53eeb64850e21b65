//! Putting the subscriber together and installing it.

use std::io::IsTerminal;
use std::time::Duration;

use crewlet_config::LogFormat;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
use tracing::{Dispatch, Subscriber};
use tracing_subscriber::filter::{EnvFilter, FilterExt, LevelFilter, Targets, filter_fn};
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

use crate::error::TelemetryError;
use crate::layer::{JsonLines, SpanRecorder};
use crate::options::TelemetryOptions;
use crate::redact::{RedactingMakeWriter, RedactingProcessor, register_secrets};

/// How long one OTLP request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long dropping the guard waits for the last spans to go out.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// Name of the tracer (the instrumentation scope of every exported span).
const TRACER_NAME: &str = "crewlet";

/// Dependencies whose own spans and events never become exported spans: the
/// exporter's HTTP stack would otherwise trace its own exports.
const NOT_TRACED: &[&str] = &[
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry_otlp",
    "opentelemetry_http",
    "reqwest",
    "hyper",
    "hyper_util",
    "h2",
    "tonic",
    "tower",
    "rustls",
];

/// Keeps trace export running; dropping it flushes the spans not yet sent
/// and shuts the exporter down (waiting at most a few seconds). Hold it in
/// `main` for the life of the process.
#[must_use = "dropping the guard shuts trace export down"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    traces_endpoint: Option<String>,
    json: bool,
}

impl std::fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryGuard")
            .field("traces_endpoint", &self.traces_endpoint)
            .field("json", &self.json)
            .field("active", &self.provider.is_some())
            .finish()
    }
}

impl TelemetryGuard {
    /// The OTLP traces URL spans are exported to, if export is on.
    pub fn traces_endpoint(&self) -> Option<&str> {
        self.traces_endpoint.as_deref()
    }

    /// Whether log lines are JSON (else text).
    pub fn json_logs(&self) -> bool {
        self.json
    }

    /// Sends the finished spans now rather than at the next batch.
    pub fn flush(&self) {
        if let Some(p) = &self.provider {
            let _ = p.force_flush();
        }
    }

    /// Flushes and stops export now (what dropping the guard does).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(p) = self.provider.take() {
            // Errors here (collector down, already shut) have no one left to tell.
            let _ = p.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Installs the process-wide subscriber: log lines (JSON or text, redacted)
/// and OpenTelemetry spans, exported over OTLP/HTTP when an endpoint is set.
/// Never fails: a bad filter falls back to the default, a bad endpoint turns
/// export off, and each is logged as a warning once logging runs. A second
/// call leaves the first subscriber in place and returns an inert guard.
pub fn init(opts: TelemetryOptions) -> TelemetryGuard {
    let (subscriber, guard, warnings) = match assemble(opts, false) {
        Ok(parts) => parts,
        // Lenient assembly turns every problem into a warning.
        Err(e) => {
            eprintln!("crewlet: telemetry not set up: {e}");
            return TelemetryGuard {
                provider: None,
                traces_endpoint: None,
                json: false,
            };
        }
    };
    match install(subscriber, &guard) {
        Ok(()) => {
            for w in warnings {
                tracing::warn!(target: "crewlet_telemetry", "{w}");
            }
            announce(&guard);
            guard
        }
        Err(e) => {
            tracing::warn!(target: "crewlet_telemetry", "{e}");
            let mut guard = guard;
            guard.stop();
            guard.traces_endpoint = None;
            guard
        }
    }
}

/// Like [`init`], but a bad filter or endpoint, a failed exporter, or an
/// already installed subscriber is an error.
pub fn try_init(opts: TelemetryOptions) -> Result<TelemetryGuard, TelemetryError> {
    let (subscriber, guard, _) = assemble(opts, true)?;
    install(subscriber, &guard)?;
    announce(&guard);
    Ok(guard)
}

/// The same subscriber as [`try_init`] without installing it anywhere:
/// use it with `tracing::dispatcher::with_default` (tests, embedding). The
/// OpenTelemetry globals are left alone.
pub fn build(opts: TelemetryOptions) -> Result<(Dispatch, TelemetryGuard), TelemetryError> {
    let (subscriber, guard, _) = assemble(opts, true)?;
    Ok((Dispatch::new(subscriber), guard))
}

fn install<S>(subscriber: S, guard: &TelemetryGuard) -> Result<(), TelemetryError>
where
    S: Subscriber + Send + Sync + 'static,
{
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|_| TelemetryError::AlreadyInstalled)?;
    // `log` records (from dependencies such as the Pulsar client) become
    // tracing events; another logger already installed is not our business.
    let _ = tracing_log::LogTracer::init();
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    if let Some(p) = &guard.provider {
        opentelemetry::global::set_tracer_provider(p.clone());
    }
    Ok(())
}

fn announce(guard: &TelemetryGuard) {
    match guard.traces_endpoint() {
        Some(url) => {
            tracing::info!(target: "crewlet_telemetry", endpoint = url, "exporting traces over otlp/http")
        }
        None => tracing::debug!(
            target: "crewlet_telemetry",
            "trace export off (no OTEL_EXPORTER_OTLP_ENDPOINT or observability.otlp_endpoint)"
        ),
    }
}

/// JSON or text, and whether text gets colours.
pub(crate) fn resolve_format(
    format: LogFormat,
    custom_writer: bool,
    stderr_is_terminal: bool,
) -> (bool, bool) {
    let terminal = !custom_writer && stderr_is_terminal;
    match format {
        LogFormat::Json => (true, false),
        LogFormat::Text => (false, terminal),
        LogFormat::Auto => (!terminal, terminal),
    }
}

/// The span filter for OpenTelemetry: INFO and up (DEBUG for Crewlet with
/// `debug`), whatever the log filter says, so trace context survives a quiet
/// log level.
fn span_targets(debug: bool) -> Targets {
    let mut t = Targets::new().with_default(LevelFilter::INFO);
    if debug {
        t = t.with_target("crewlet", LevelFilter::DEBUG);
    }
    for target in NOT_TRACED {
        t = t.with_target(*target, LevelFilter::OFF);
    }
    t
}

type Parts<S> = (S, TelemetryGuard, Vec<String>);

fn assemble(
    opts: TelemetryOptions,
    strict: bool,
) -> Result<Parts<impl Subscriber + Send + Sync + for<'a> LookupSpan<'a>>, TelemetryError> {
    let mut warnings = Vec::new();
    register_secrets(opts.secrets.iter().cloned());

    let directives = opts.log_directives();
    let env_filter = match EnvFilter::try_new(&directives) {
        Ok(f) => f,
        Err(e) => {
            let err = TelemetryError::Filter {
                filter: directives.clone(),
                reason: e.to_string(),
            };
            if strict {
                return Err(err);
            }
            warnings.push(format!("{err}; using the default filter"));
            EnvFilter::new(if opts.debug {
                "info,crewlet=debug"
            } else {
                "info"
            })
        }
    };

    let traces_endpoint = match opts.traces_endpoint() {
        Ok(url) => url,
        Err(e) if strict => return Err(e),
        Err(e) => {
            warnings.push(format!("{e}; trace export is off"));
            None
        }
    };

    let mut provider = SdkTracerProvider::builder().with_resource(
        Resource::builder()
            .with_service_name(opts.service_name.clone())
            .build(),
    );
    let mut exporting = None;
    if let Some(url) = traces_endpoint {
        match otlp_exporter(&url) {
            Ok(exporter) => {
                provider = provider.with_span_processor(RedactingProcessor::new(
                    BatchSpanProcessor::builder(exporter).build(),
                ));
                exporting = Some(url);
            }
            Err(e) if strict => return Err(e),
            Err(e) => warnings.push(format!("{e}; trace export is off")),
        }
    }
    for hook in opts.processors {
        provider = hook(provider);
    }
    let provider = provider.build();
    let tracer = provider.tracer(TRACER_NAME);

    let custom_writer = opts.writer.is_some();
    let (json, ansi) = resolve_format(
        opts.log_format,
        custom_writer,
        std::io::stderr().is_terminal(),
    );
    let writer = RedactingMakeWriter::new(
        opts.writer
            .unwrap_or_else(|| BoxMakeWriter::new(std::io::stderr)),
    );
    // Spans the exporter keeps stay visible to the log layer too, so a WARN
    // line inside an INFO turn span still carries the turn's fields.
    let log_filter = env_filter.or(span_targets(opts.debug).and(filter_fn(|m| m.is_span())));
    let fmt_layer: Box<dyn Layer<Registry> + Send + Sync> = if json {
        tracing_subscriber::fmt::layer()
            .event_format(JsonLines)
            .with_writer(writer)
            .with_filter(log_filter)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_target(true)
            .with_writer(writer)
            .with_filter(log_filter)
            .boxed()
    };

    let otel_layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_threads(false)
        .with_filter(span_targets(opts.debug));

    let subscriber = tracing_subscriber::registry()
        .with(fmt_layer)
        .with(otel_layer)
        .with(SpanRecorder);

    let guard = TelemetryGuard {
        provider: Some(provider),
        traces_endpoint: exporting,
        json,
    };
    Ok((subscriber, guard, warnings))
}

/// The OTLP/HTTP (protobuf) exporter, with a blocking reqwest client (crewlet-http's roots and proxies)
/// used from the batch processor's own thread. Built on a scratch thread:
/// a blocking client must not be created or dropped on an async runtime
/// thread, and `init` usually runs inside `#[tokio::main]`.
fn otlp_exporter(url: &str) -> Result<opentelemetry_otlp::SpanExporter, TelemetryError> {
    let owned = url.to_owned();
    let fail = |reason: String| TelemetryError::Exporter {
        endpoint: url.to_owned(),
        reason,
    };
    std::thread::Builder::new()
        .name("crewlet-otlp-setup".into())
        .spawn(move || {
            let client = crewlet_http::blocking_client_builder()
                .timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|e| e.to_string())?;
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(client)
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(owned)
                .with_timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|e| e.to_string())
        })
        .map_err(|e| fail(format!("cannot start a thread: {e}")))?
        .join()
        .map_err(|_| fail("the exporter setup thread panicked".into()))?
        .map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_format_is_text_only_on_a_terminal() {
        assert_eq!(resolve_format(LogFormat::Auto, false, true), (false, true));
        assert_eq!(resolve_format(LogFormat::Auto, false, false), (true, false));
        assert_eq!(resolve_format(LogFormat::Auto, true, true), (true, false));
        assert_eq!(resolve_format(LogFormat::Json, false, true), (true, false));
        assert_eq!(
            resolve_format(LogFormat::Text, false, false),
            (false, false)
        );
        assert_eq!(resolve_format(LogFormat::Text, true, true), (false, false));
    }
}
