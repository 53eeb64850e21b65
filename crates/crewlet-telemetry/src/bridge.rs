//! Between `tracing` spans and the trace context carried on [`Event`]s.
//!
//! The ids on an event are the OpenTelemetry ids of the span it was emitted
//! in, so the spans a process exports and the events it stores line up: the
//! API's webhook span id is the `raw_webhook` event's `span_id`, and the
//! router's span on the other side of the queue is its child.

use crewlet_core::{Event, SpanId, TraceContext, TraceId};
use opentelemetry::trace::{
    SpanContext, TraceContextExt, TraceFlags, TraceId as OtelTraceId, TraceState,
};
use tracing::Span;
use tracing_opentelemetry::{OpenTelemetrySpanExt, SetParentError};
use tracing_subscriber::Registry;
use tracing_subscriber::registry::LookupSpan;

use crate::error::TelemetryError;
use crate::layer::OtelParent;

fn to_core_trace(id: OtelTraceId) -> Option<TraceId> {
    (id != OtelTraceId::INVALID).then(|| TraceId::from_bytes(id.to_bytes()))
}

fn to_core_span(id: opentelemetry::trace::SpanId) -> Option<SpanId> {
    (id != opentelemetry::trace::SpanId::INVALID).then(|| SpanId::from_bytes(id.to_bytes()))
}

fn to_otel_span(id: SpanId) -> opentelemetry::trace::SpanId {
    opentelemetry::trace::SpanId::from_bytes(id.to_bytes())
}

/// The trace context of the current span: its trace id and span id, and the
/// parent span id when it has a parent. `None` outside any span, or when
/// telemetry was not set up (no OpenTelemetry layer).
pub fn current_trace_context() -> Option<TraceContext> {
    trace_context_of(&Span::current())
}

/// The trace context of `span` (see [`current_trace_context`]). Starts the
/// span's OpenTelemetry side if it was not yet, so call
/// [`set_parent_from`] first on a span that should join a remote trace.
pub fn trace_context_of(span: &Span) -> Option<TraceContext> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let otel_span = cx.span();
    let sc = otel_span.span_context();
    if !sc.is_valid() {
        return None;
    }
    let parent = span
        .with_subscriber(|(id, dispatch)| {
            let registry = dispatch.downcast_ref::<Registry>()?;
            let data = registry.span(id)?;
            let parent = data.extensions().get::<OtelParent>().copied()?;
            Some(parent.0)
        })
        .flatten()
        .flatten();
    Some(TraceContext {
        trace_id: to_core_trace(sc.trace_id())?,
        span_id: to_core_span(sc.span_id())?,
        parent_span_id: parent.and_then(to_core_span),
    })
}

/// Makes `span` a child of the remote span `parent` (the span an event was
/// emitted in, on the other side of the queue): same trace, `parent.span_id`
/// as its parent. Call it before the span is first entered.
pub fn set_parent_from(span: &Span, parent: TraceContext) -> Result<(), TelemetryError> {
    let sc = SpanContext::new(
        OtelTraceId::from_bytes(parent.trace_id.to_bytes()),
        to_otel_span(parent.span_id),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    set_otel_parent(
        span,
        opentelemetry::Context::new().with_remote_span_context(sc),
        Some(parent.span_id),
    )
}

/// Makes `span` the root of a new trace, whatever span encloses it.
pub fn detach_from_trace(span: &Span) -> Result<(), TelemetryError> {
    set_otel_parent(span, opentelemetry::Context::new(), None)
}

fn set_otel_parent(
    span: &Span,
    cx: opentelemetry::Context,
    parent: Option<SpanId>,
) -> Result<(), TelemetryError> {
    span.set_parent(cx).map_err(|e| match e {
        SetParentError::LayerNotFound => TelemetryError::NoTraceLayer,
        SetParentError::AlreadyStarted => TelemetryError::SpanAlreadyStarted,
        SetParentError::SpanDisabled => TelemetryError::SpanDisabled,
    })?;
    span.with_subscriber(|(id, dispatch)| {
        if let Some(data) = dispatch.downcast_ref::<Registry>().and_then(|r| r.span(id)) {
            data.extensions_mut()
                .replace(OtelParent(parent.map(to_otel_span)));
        }
    });
    Ok(())
}

/// A span for handling `event` after it crossed the queue: named `name` in
/// exported traces, a child of the span the event was emitted in (a new
/// root when the event carries no trace), with the event's type, id, agent,
/// role and task as fields. Enter it (or `.instrument` the handler with it)
/// and the events the handler [`stamp`]s continue the same trace.
pub fn span_from_event(name: &str, event: &Event) -> Span {
    let span = tracing::info_span!(
        target: "crewlet_telemetry::consume",
        "consume",
        otel.name = name,
        otel.kind = "consumer",
        event_type = %event.event_type,
        event_id = %event.id,
        agent_id = event.agent_id.as_deref(),
        role = event.agent_role.as_deref(),
        task_id = event.task_id.as_deref(),
    );
    let joined = match event.trace() {
        Some(parent) => set_parent_from(&span, parent),
        None => detach_from_trace(&span),
    };
    if let Err(e) = joined {
        tracing::debug!(error = %e, event_id = %event.id, "event span not joined to its trace");
    }
    span
}

/// `event` with the trace fields of the current span. Outside a span (or
/// without telemetry) an event that already carries a trace keeps it, and one
/// without gets a new root.
pub fn stamp(event: Event) -> Event {
    match current_trace_context() {
        Some(ctx) => event.with_trace(ctx),
        None if event.trace().is_some() => event,
        None => event.with_trace(TraceContext::new_root()),
    }
}

/// The W3C `traceparent` of the current span, for outbound HTTP calls.
pub fn current_traceparent() -> Option<String> {
    current_trace_context().map(|c| c.traceparent())
}
