//! The bookkeeping layer and the JSON line format.
//!
//! [`SpanRecorder`] keeps, per span, its fields as JSON (so a log line can
//! carry `agent_id`, `task_id`, ... of every span it was emitted in) and the
//! OpenTelemetry span id of its parent (the SDK does not expose it once the
//! span started, and an event wants it as `parent_span_id`).

use std::fmt;

use chrono::{SecondsFormat, Utc};
use opentelemetry::trace::TraceContextExt;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_opentelemetry::OtelData;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// A span's fields, in the order they were declared or recorded.
#[derive(Debug, Default, Clone)]
pub(crate) struct SpanFields(pub(crate) Map<String, Value>);

/// The OpenTelemetry parent span id of a span (`None`: a root).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OtelParent(pub(crate) Option<opentelemetry::trace::SpanId>);

/// Records [`SpanFields`] and [`OtelParent`]. Must sit above (be added after)
/// the OpenTelemetry layer, so the parent's OTel span has started when a
/// child is created.
pub(crate) struct SpanRecorder;

impl<S> tracing_subscriber::Layer<S> for SpanRecorder
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = SpanFields::default();
        attrs.record(&mut JsonVisitor(&mut fields.0));

        // Mirrors how tracing-opentelemetry picks a parent (with context
        // activation): an explicit parent's OTel span, else the current OTel
        // context.
        let parent = if let Some(parent_id) = attrs.parent() {
            ctx.span(parent_id)
                .and_then(|p| p.extensions().get::<OtelData>().and_then(OtelData::span_id))
        } else if attrs.is_contextual() {
            let current = opentelemetry::Context::current();
            let sc = current.span().span_context().clone();
            sc.is_valid().then(|| sc.span_id())
        } else {
            None
        };

        let mut ext = span.extensions_mut();
        ext.insert(fields);
        ext.insert(OtelParent(parent));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(fields) = ext.get_mut::<SpanFields>() {
            values.record(&mut JsonVisitor(&mut fields.0));
        }
    }
}

/// Collects `tracing` field values as JSON. `otel.*` fields steer the
/// exporter (span name, kind) and are left out of log lines.
pub(crate) struct JsonVisitor<'a>(pub(crate) &'a mut Map<String, Value>);

impl JsonVisitor<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        let name = field.name();
        if name.starts_with("otel.") || name.starts_with("log.") {
            return;
        }
        self.0.insert(name.to_owned(), value);
    }
}

impl Visit for JsonVisitor<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        let v = serde_json::Number::from_f64(value)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(value.to_string()));
        self.put(field, v);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        let v = i64::try_from(value)
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(value.to_string()));
        self.put(field, v);
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        let v = u64::try_from(value)
            .map(Value::from)
            .unwrap_or_else(|_| Value::String(value.to_string()));
        self.put(field, v);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::String(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
}

/// Keys every line has; a field of the same name is written as `field.<name>`.
const RESERVED: &[&str] = &[
    "timestamp",
    "level",
    "component",
    "message",
    "span",
    "trace_id",
    "span_id",
];

fn merge(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (k, v) in from {
        if RESERVED.contains(&k.as_str()) {
            into.insert(format!("field.{k}"), v.clone());
        } else {
            into.insert(k.clone(), v.clone());
        }
    }
}

/// One JSON object per line: `timestamp`, `level`, `component` (the target),
/// `message`, then the fields of every enclosing span (outermost first, inner
/// ones win) and of the event itself, then `span`, `trace_id`, `span_id`.
pub(crate) struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // `log` records carry their real target in normalized metadata.
        let normalized = event.normalized_metadata();
        let meta = normalized.as_ref().unwrap_or_else(|| event.metadata());
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::String(Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)),
        );
        line.insert(
            "level".into(),
            Value::String(meta.level().as_str().to_ascii_lowercase()),
        );
        line.insert("component".into(), Value::String(meta.target().to_owned()));

        let mut event_fields = Map::new();
        event.record(&mut JsonVisitor(&mut event_fields));
        if let Some(message) = event_fields.remove("message") {
            line.insert("message".into(), message);
        }

        let mut leaf: Option<(String, Option<(String, String)>)> = None;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                if let Some(fields) = ext.get::<SpanFields>() {
                    merge(&mut line, &fields.0);
                }
                let ids = ext
                    .get::<OtelData>()
                    .and_then(|d| Some((d.trace_id()?.to_string(), d.span_id()?.to_string())));
                leaf = Some((span.name().to_owned(), ids));
            }
        }
        merge(&mut line, &event_fields);
        if let Some((name, ids)) = leaf {
            line.insert("span".into(), Value::String(name));
            if let Some((trace_id, span_id)) = ids {
                line.insert("trace_id".into(), Value::String(trace_id));
                line.insert("span_id".into(), Value::String(span_id));
            }
        }

        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}
