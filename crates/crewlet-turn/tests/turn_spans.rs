//! A whole turn under `crewlet-telemetry` with an in-memory span exporter:
//! the spans it exports form one tree under the trigger's span, and the ids
//! on the turn's events are ids of spans in that tree.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crewlet_core::{Event, EventType, TraceContext};
use crewlet_llm::{
    Completion, CompletionRequest, LlmError, LlmRegistry, Message, ScriptedProvider, Usage,
};
use crewlet_store::MemoryTokenLedger;
use crewlet_telemetry::{TelemetryGuard, TelemetryOptions, span_from_event};
use crewlet_turn::{
    CompanyProfile, MemoryEventSink, SeatProfile, ToolRegistry, Trigger, TurnDecision, TurnEngine,
    Visibility,
};
use opentelemetry::trace::SpanId as OtelSpanId;
use opentelemetry::{KeyValue, Value as OtelValue};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use serde_json::json;

use crate::common::{Lookup, call};
use tracing::{Dispatch, Instrument};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Plan -> Execute: two lookups (one fails) then the answer -> Review done.
/// Five completions of 100 in / 10 out each.
fn scripted(request: &CompletionRequest) -> Result<Completion, LlmError> {
    let offered = |n: &str| request.tools.iter().any(|t| t.name == n);
    let tool_results = request
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count();
    let mut c = if offered("submit_plan") {
        call(
            "submit_plan",
            json!({"decision": "plan", "reasoning": "the wiki has it",
                   "steps": [{"intent": "find it", "approach": "search", "tools": ["lookup"],
                              "on_failure": "ask"}],
                   "tools_needed": ["lookup"], "success_criteria": ["answered"]}),
        )
    } else if offered("submit_review") {
        call(
            "submit_review",
            json!({"decision": "done", "notes": "ok", "completed_work": "looked it up",
                   "final_artifact": "42"}),
        )
    } else if tool_results == 0 {
        call("lookup", json!({"q": "secret"}))
    } else if tool_results == 1 {
        call("lookup", json!({"q": "answer"}))
    } else {
        Completion {
            content: "The answer is 42".into(),
            ..Completion::default()
        }
    };
    c.usage = Usage {
        input_tokens: 100,
        output_tokens: 10,
        cache_read_tokens: 0,
    };
    c.model = "scripted-model".into();
    Ok(c)
}

fn engine() -> Result<(TurnEngine, Arc<MemoryEventSink>), Box<dyn std::error::Error>> {
    let tools = Arc::new(ToolRegistry::new());
    tools.register(Arc::new(Lookup::default()), Visibility::All)?;
    let mut llm = LlmRegistry::new();
    llm.insert(Arc::new(ScriptedProvider::new(
        "main",
        "scripted-model",
        scripted,
    )));
    let sink = Arc::new(MemoryEventSink::new());
    let engine = TurnEngine::new(
        CompanyProfile {
            name: "Nimbus".into(),
            ..CompanyProfile::default()
        },
        llm,
        Arc::new(MemoryTokenLedger::new()),
        sink.clone(),
    )
    .with_tools(tools);
    Ok((engine, sink))
}

fn telemetry()
-> Result<(Dispatch, TelemetryGuard, InMemorySpanExporter), Box<dyn std::error::Error>> {
    let exporter = InMemorySpanExporter::default();
    let (dispatch, guard) = crewlet_telemetry::build(
        TelemetryOptions::new("crewlet-turn-test")
            .ignore_env()
            .with_writer(std::io::sink)
            .with_span_exporter(exporter.clone()),
    )?;
    Ok((dispatch, guard, exporter))
}

fn seat() -> SeatProfile {
    SeatProfile::new("Nimbus", "eng", "Engineer")
}

fn trigger(trace: Option<TraceContext>) -> Trigger {
    let mut t = Trigger::new("task-9", "slack", "What is the answer?");
    t.trace = trace;
    t
}

fn names(spans: &[SpanData]) -> Vec<String> {
    spans.iter().map(|s| s.name.to_string()).collect()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [SpanData], name: &str) -> Result<&'a SpanData, String> {
    match named(spans, name).as_slice() {
        [s] => Ok(s),
        other => Err(format!(
            "{} spans named {name:?} among {:?}",
            other.len(),
            names(spans)
        )),
    }
}

fn attr(span: &SpanData, key: &str) -> Option<OtelValue> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| kv.value.clone())
}

fn otel(id: crewlet_core::SpanId) -> OtelSpanId {
    OtelSpanId::from_bytes(id.to_bytes())
}

/// Runs one turn under a fresh telemetry subscriber, inside the consumer
/// span of `consumer` if given (what the seat runtime does). Returns the exported spans and the turn's events.
async fn traced_turn(
    trace: Option<TraceContext>,
    consumer: Option<&Event>,
) -> Result<(Vec<SpanData>, Vec<Event>), Box<dyn std::error::Error>> {
    let (dispatch, guard, exporter) = telemetry()?;
    let (engine, sink) = engine()?;
    let (seat, trigger) = (seat(), trigger(trace));
    {
        // current-thread runtime: the whole turn runs on this thread.
        let _default = tracing::dispatcher::set_default(&dispatch);
        let outcome = match consumer {
            Some(event) => {
                let span = span_from_event("turn", event);
                engine.run_turn(&seat, &trigger).instrument(span).await
            }
            None => engine.run_turn(&seat, &trigger).await,
        };
        assert_eq!(
            outcome.decision,
            TurnDecision::Done,
            "{:?}",
            outcome.failure
        );
    }
    guard.flush();
    let spans = exporter.get_finished_spans()?;
    Ok((spans, sink.events()))
}

#[tokio::test]
async fn a_turn_exports_one_span_tree_under_the_trigger_and_its_events_point_into_it() -> TestResult
{
    // The span the trigger was published in (the router's, in another process).
    let parent = TraceContext::new_root();
    let (spans, events) = traced_turn(Some(parent), None).await?;

    // turn + 3 phases + 5 completions + 2 tool calls
    assert_eq!(spans.len(), 11, "{:?}", names(&spans));
    let trace = opentelemetry::trace::TraceId::from_bytes(parent.trace_id.to_bytes());
    for s in &spans {
        assert_eq!(
            s.span_context.trace_id(),
            trace,
            "{} is in the trigger's trace",
            s.name
        );
    }

    let turn = one(&spans, "turn")?;
    assert_eq!(
        turn.parent_span_id,
        otel(parent.span_id),
        "the turn continues the trigger's span"
    );
    assert!(turn.parent_span_is_remote);
    assert_eq!(
        attr(turn, "agent_id"),
        Some(seat().agent_id.to_string().into())
    );
    assert_eq!(attr(turn, "role"), Some("Engineer".into()));
    assert_eq!(attr(turn, "task_id"), Some("task-9".into()));
    assert_eq!(attr(turn, "llm_input_tokens"), Some(OtelValue::I64(500)));
    assert_eq!(attr(turn, "llm_output_tokens"), Some(OtelValue::I64(50)));
    assert!(attr(turn, "turn_id").is_some());

    let turn_id = turn.span_context.span_id();
    let phase = |name: &str| -> Result<&SpanData, String> {
        let p = one(&spans, name)?;
        assert_eq!(p.parent_span_id, turn_id, "{name} is a child of the turn");
        Ok(p)
    };
    let (plan, execute, review) = (
        phase("phase plan")?,
        phase("phase execute")?,
        phase("phase review")?,
    );
    assert_eq!(attr(execute, "iteration"), Some(OtelValue::I64(1)));
    assert_eq!(attr(execute, "llm_input_tokens"), Some(OtelValue::I64(300)));

    let llm = named(&spans, "llm scripted-model");
    assert_eq!(llm.len(), 5);
    let under = |p: &SpanData| {
        llm.iter()
            .filter(|l| l.parent_span_id == p.span_context.span_id())
            .count()
    };
    assert_eq!((under(plan), under(execute), under(review)), (1, 3, 1));
    for l in &llm {
        assert_eq!(attr(l, "provider"), Some("main".into()));
        assert_eq!(attr(l, "model"), Some("scripted-model".into()));
        assert_eq!(attr(l, "llm_input_tokens"), Some(OtelValue::I64(100)));
        assert_eq!(attr(l, "llm_output_tokens"), Some(OtelValue::I64(10)));
    }

    let tools = named(&spans, "tool lookup");
    assert_eq!(tools.len(), 2);
    for t in &tools {
        assert_eq!(t.parent_span_id, execute.span_context.span_id());
    }
    let errors: Vec<_> = tools.iter().filter_map(|t| attr(t, "error")).collect();
    assert_eq!(errors.len(), 1, "only the refused lookup has an error");
    assert!(
        errors[0].as_str().contains("not allowed to look that up"),
        "{errors:?}"
    );

    // One tree: every parent is in it, except the turn's (the trigger's span).
    let ids: HashSet<OtelSpanId> = spans.iter().map(|s| s.span_context.span_id()).collect();
    for s in &spans {
        assert!(
            ids.contains(&s.parent_span_id) || s.parent_span_id == otel(parent.span_id),
            "{} has a parent outside the tree",
            s.name
        );
    }

    // Every event carries the ids of an exported span: the turn's or a phase's.
    let by_id: HashMap<OtelSpanId, &SpanData> = spans
        .iter()
        .map(|s| (s.span_context.span_id(), s))
        .collect();
    assert!(!events.is_empty());
    for e in &events {
        let ctx = e
            .trace()
            .ok_or_else(|| format!("{} has no trace", e.event_type))?;
        assert_eq!(ctx.trace_id, parent.trace_id, "{}", e.event_type);
        let span = by_id
            .get(&otel(ctx.span_id))
            .ok_or_else(|| format!("{} has a span id no exported span has", e.event_type))?;
        let parent_id = ctx.parent_span_id.map(otel).unwrap_or(OtelSpanId::INVALID);
        assert_eq!(
            parent_id, span.parent_span_id,
            "{}: parent ids agree",
            e.event_type
        );
        let expected = match &e.event_type {
            EventType::AgentPhaseStarted
            | EventType::AgentPhaseCompleted
            | EventType::AgentTurnProgress => {
                format!("phase {}", e.payload["phase"].as_str().unwrap_or("?"))
            }
            _ => "turn".to_owned(),
        };
        assert_eq!(
            span.name, expected,
            "{} was emitted in its span",
            e.event_type
        );
    }
    let started = &events[0];
    assert_eq!(started.event_type, EventType::TaskStarted);
    assert_eq!(started.span_id.map(otel), Some(turn_id));
    assert_eq!(started.parent_span_id, Some(parent.span_id));
    Ok(())
}

#[tokio::test]
async fn inside_the_callers_consumer_span_the_turn_nests_under_it() -> TestResult {
    // The inbox event, as the router stamped it; the seat runtime restores it.
    let routed = TraceContext::new_root();
    let inbox =
        Event::new(EventType::Other("inbox_task".into()), "engine.router").with_trace(routed);
    let (spans, events) = traced_turn(inbox.trace(), Some(&inbox)).await?;

    let consumer = spans
        .iter()
        .find(|s| s.name == "turn" && s.parent_span_id == otel(routed.span_id))
        .ok_or("the consumer span under the router's span")?;
    let turn = spans
        .iter()
        .find(|s| s.name == "turn" && s.parent_span_id == consumer.span_context.span_id())
        .ok_or("the turn span under the consumer span")?;
    assert!(
        !turn.parent_span_is_remote,
        "a local child, not re-joined to the trigger"
    );
    let started = events
        .first()
        .and_then(Event::trace)
        .ok_or("task_started has a trace")?;
    assert_eq!(otel(started.span_id), turn.span_context.span_id());
    assert_eq!(
        started.parent_span_id.map(otel),
        Some(consumer.span_context.span_id())
    );
    assert_eq!(started.trace_id, routed.trace_id);
    Ok(())
}

#[tokio::test]
async fn a_trigger_without_trace_starts_one() -> TestResult {
    let (spans, events) = traced_turn(None, None).await?;
    let turn = one(&spans, "turn")?;
    assert_eq!(
        turn.parent_span_id,
        OtelSpanId::INVALID,
        "the turn is the root"
    );
    let trace = turn.span_context.trace_id();
    assert!(spans.iter().all(|s| s.span_context.trace_id() == trace));
    for e in &events {
        let ctx = e.trace().ok_or("every event has a trace")?;
        assert_eq!(ctx.trace_id.to_bytes(), trace.to_bytes());
    }
    Ok(())
}
