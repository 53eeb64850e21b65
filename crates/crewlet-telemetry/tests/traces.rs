//! Spans, their OpenTelemetry ids, and the trace context on events.

mod common;

use std::collections::HashMap;

use common::{Buffer, options};
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_telemetry::{
    TelemetryError, build, current_trace_context, detach_from_trace, llm_span, phase_span,
    routing_span, set_parent_from, span_from_event, stamp, tool_span, trace_context_of, turn_span,
    webhook_span,
};
use opentelemetry::trace::SpanId as OtelSpanId;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use tracing::Dispatch;
use tracing::dispatcher::with_default;

fn setup() -> Result<
    (
        Dispatch,
        crewlet_telemetry::TelemetryGuard,
        InMemorySpanExporter,
    ),
    TelemetryError,
> {
    let exporter = InMemorySpanExporter::default();
    let buf = Buffer::default();
    let (dispatch, guard) = build(options(&buf).with_span_exporter(exporter.clone()))?;
    Ok((dispatch, guard, exporter))
}

fn finished(exporter: &InMemorySpanExporter) -> Vec<SpanData> {
    exporter.get_finished_spans().unwrap_or_default()
}

fn by_name<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| {
        let names: Vec<_> = spans.iter().map(|s| s.name.to_string()).collect();
        panic!("no span {name:?} among {names:?}")
    })
}

fn core_span(id: OtelSpanId) -> String {
    id.to_string()
}

#[test]
fn current_context_reports_trace_span_and_parent() -> Result<(), TelemetryError> {
    let (dispatch, _guard, _exp) = setup()?;
    with_default(&dispatch, || {
        assert_eq!(current_trace_context(), None, "no span, no context");
        let outer = turn_span("a", "r", None);
        let outer_ctx = outer.in_scope(current_trace_context);
        let outer_ctx = outer_ctx.unwrap_or_else(|| panic!("turn span has a context"));
        assert_eq!(outer_ctx.parent_span_id, None, "a root has no parent");

        let inner_ctx = outer.in_scope(|| phase_span("plan").in_scope(current_trace_context));
        let inner_ctx = inner_ctx.unwrap_or_else(|| panic!("phase span has a context"));
        assert_eq!(inner_ctx.trace_id, outer_ctx.trace_id);
        assert_eq!(inner_ctx.parent_span_id, Some(outer_ctx.span_id));
        assert_ne!(inner_ctx.span_id, outer_ctx.span_id);
        assert_eq!(trace_context_of(&outer), Some(outer_ctx), "stable per span");
    });
    Ok(())
}

#[test]
fn without_telemetry_there_is_no_context_and_stamp_makes_a_root() {
    with_default(&Dispatch::none(), || {
        let span = tracing::info_span!("untracked");
        let _in = span.enter();
        assert_eq!(current_trace_context(), None);
        let e = stamp(Event::new(EventType::TaskStarted, "t"));
        let ctx = e
            .trace()
            .unwrap_or_else(|| panic!("stamp always sets a trace"));
        assert_eq!(ctx.parent_span_id, None);
    });
}

#[test]
fn stamp_outside_a_span_keeps_an_existing_trace() -> Result<(), TelemetryError> {
    let (dispatch, _guard, _exp) = setup()?;
    with_default(&dispatch, || {
        let given = TraceContext::new_root().child();
        let e = stamp(Event::new(EventType::TaskStarted, "t").with_trace(given));
        assert_eq!(e.trace(), Some(given));
        let fresh = stamp(Event::new(EventType::TaskStarted, "t"));
        assert!(fresh.trace().is_some());
    });
    Ok(())
}

/// Producer span -> event on the wire -> consumer span restored from it ->
/// the consumer's events are children in the same trace, and the exported
/// spans form one tree whose ids are the ones on the events.
#[test]
fn one_trace_from_webhook_to_tool_across_the_queue() -> Result<(), Box<dyn std::error::Error>> {
    let (dispatch, guard, exporter) = setup()?;
    let (raw, routed, inbox, tool_ev) = with_default(&dispatch, || {
        // API process: the webhook span, and the raw_webhook event stamped in it.
        let webhook = webhook_span("slack");
        let raw = webhook.in_scope(|| stamp(Event::new(EventType::RawWebhook, "api.webhooks")));
        drop(webhook);
        let raw = Event::from_json(&raw.to_json()?)?; // across the queue

        // Engine: the router restores the trace and publishes to a seat inbox.
        let route = span_from_event("route", &raw);
        let routed = route.in_scope(|| {
            let _r = routing_span().entered();
            stamp(Event::new(
                EventType::Other("inbox_delivery".into()),
                "engine.router",
            ))
        });
        drop(route);
        let routed = Event::from_json(&routed.to_json()?)?;

        // Seat runtime: restores again and runs the turn.
        let consume = span_from_event("turn", &routed);
        let (inbox, tool_ev) = consume.in_scope(|| {
            let inbox = current_trace_context();
            let _t = turn_span("agent-1", "Engineer", Some("task-1")).entered();
            let _p = phase_span("execute").entered();
            drop(llm_span("openai", "gpt-x").entered());
            let _tool = tool_span("post_message").entered();
            (inbox, stamp(Event::new(EventType::TaskCompleted, "turn")))
        });
        drop(consume);
        Ok::<_, Box<dyn std::error::Error>>((raw, routed, inbox, tool_ev))
    })?;

    let raw_ctx = raw.trace().ok_or("raw_webhook has a trace")?;
    let routed_ctx = routed.trace().ok_or("routed event has a trace")?;
    let inbox = inbox.ok_or("consumer span has a context")?;
    let tool_ctx = tool_ev.trace().ok_or("tool event has a trace")?;
    assert_eq!(raw_ctx.parent_span_id, None, "the webhook starts the trace");
    for ctx in [routed_ctx, inbox, tool_ctx] {
        assert_eq!(ctx.trace_id, raw_ctx.trace_id, "one trace end to end");
    }
    assert_eq!(inbox.parent_span_id, Some(routed_ctx.span_id));

    guard.flush();
    let spans = finished(&exporter);
    assert_eq!(
        spans.len(),
        8,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let trace = spans[0].span_context.trace_id();
    assert!(spans.iter().all(|s| s.span_context.trace_id() == trace));
    assert_eq!(trace.to_string(), raw_ctx.trace_id.to_string());

    let webhook = by_name(&spans, "webhook slack");
    let route = by_name(&spans, "route");
    let routing = by_name(&spans, "routing");
    // Two spans are named "turn": the consumer span restored from the inbox
    // event, and the turn span inside it.
    let child_named = |name: &str, parent: &SpanData| {
        spans
            .iter()
            .find(|s| s.name == name && s.parent_span_id == parent.span_context.span_id())
            .cloned()
    };
    let consume = child_named("turn", routing).ok_or("the consumer span under routing")?;
    let turn = child_named("turn", &consume).ok_or("the turn span under the consumer span")?;
    let phase = by_name(&spans, "phase execute");
    let llm = by_name(&spans, "llm gpt-x");
    let tool = by_name(&spans, "tool post_message");

    // The ids on the events are the exported span ids.
    assert_eq!(
        core_span(webhook.span_context.span_id()),
        raw_ctx.span_id.to_string()
    );
    assert_eq!(
        core_span(routing.span_context.span_id()),
        routed_ctx.span_id.to_string()
    );
    assert_eq!(
        core_span(tool.span_context.span_id()),
        tool_ctx.span_id.to_string()
    );
    assert_eq!(
        core_span(tool.parent_span_id),
        tool_ctx
            .parent_span_id
            .map(|s| s.to_string())
            .unwrap_or_default()
    );

    // Parent links: one tree.
    assert_eq!(webhook.parent_span_id, OtelSpanId::INVALID);
    assert_eq!(route.parent_span_id, webhook.span_context.span_id());
    assert!(route.parent_span_is_remote);
    assert_eq!(routing.parent_span_id, route.span_context.span_id());
    assert!(consume.parent_span_is_remote);
    assert_eq!(turn.parent_span_id, consume.span_context.span_id());
    assert_eq!(phase.parent_span_id, turn.span_context.span_id());
    assert_eq!(llm.parent_span_id, phase.span_context.span_id());
    assert_eq!(tool.parent_span_id, phase.span_context.span_id());

    // Every span but the root has its parent among the exported spans.
    let ids: HashMap<_, _> = spans
        .iter()
        .map(|s| (s.span_context.span_id(), s.name.to_string()))
        .collect();
    for s in &spans {
        assert!(
            s.parent_span_id == OtelSpanId::INVALID || ids.contains_key(&s.parent_span_id),
            "{} has a dangling parent",
            s.name
        );
    }
    Ok(())
}

#[test]
fn an_event_without_trace_starts_a_new_one_even_inside_another_span() -> Result<(), TelemetryError>
{
    let (dispatch, _guard, _exp) = setup()?;
    with_default(&dispatch, || {
        let consumer_loop = tracing::info_span!("consumer_loop");
        let _l = consumer_loop.enter();
        let loop_ctx = current_trace_context();
        let untraced = Event::new(EventType::TaskStarted, "legacy");
        let span = span_from_event("handle", &untraced);
        let ctx = span.in_scope(current_trace_context);
        let (Some(loop_ctx), Some(ctx)) = (loop_ctx, ctx) else {
            panic!("both spans have contexts")
        };
        assert_ne!(ctx.trace_id, loop_ctx.trace_id);
        assert_eq!(ctx.parent_span_id, None);

        let detached = tracing::info_span!("detached");
        assert!(detach_from_trace(&detached).is_ok());
        let d = detached.in_scope(current_trace_context);
        assert!(d.is_some_and(|d| d.trace_id != loop_ctx.trace_id && d.parent_span_id.is_none()));
    });
    Ok(())
}

#[test]
fn the_parent_cannot_change_once_a_span_was_entered() -> Result<(), TelemetryError> {
    let (dispatch, _guard, _exp) = setup()?;
    with_default(&dispatch, || {
        let span = tracing::info_span!("late");
        drop(span.enter());
        let err = set_parent_from(&span, TraceContext::new_root());
        assert!(
            matches!(err, Err(TelemetryError::SpanAlreadyStarted)),
            "{err:?}"
        );
    });
    Ok(())
}

#[test]
fn exported_span_attributes_are_redacted() -> Result<(), TelemetryError> {
    let exporter = InMemorySpanExporter::default();
    let buf = Buffer::default();
    let (dispatch, guard) = build(
        options(&buf)
            .with_secret("span-secret-0c1d2e")
            .with_span_exporter(exporter.clone()),
    )?;
    with_default(&dispatch, || {
        let _t = tool_span("http").entered();
        tracing::Span::current().record("error", "denied for span-secret-0c1d2e");
        tracing::info!(header = "Bearer abcdefghijklmnop", "calling out");
    });
    guard.flush();
    let spans = finished(&exporter);
    let tool = by_name(&spans, "tool http");
    let rendered = format!("{:?} {:?}", tool.attributes, tool.events.events);
    assert!(!rendered.contains("span-secret-0c1d2e"), "{rendered}");
    assert!(!rendered.contains("abcdefghijklmnop"), "{rendered}");
    assert!(rendered.contains("[redacted]"), "{rendered}");
    Ok(())
}
