//! A sub-agent under the telemetry subscriber: its `phase subagent` span is
//! a child of the `tool spawn_subagent` span inside the Execute phase, its
//! completions and tool calls nest under it, and its events carry its span.

mod common;

use std::sync::Arc;

use crewlet_core::{Event, EventType};
use crewlet_llm::{
    Completion, CompletionRequest, LlmError, LlmRegistry, Message, ScriptedProvider, Usage,
};
use crewlet_store::MemoryTokenLedger;
use crewlet_telemetry::TelemetryOptions;
use crewlet_turn::{
    CompanyProfile, MemoryEventSink, SeatProfile, ToolRegistry, Trigger, TurnDecision, TurnEngine,
    Visibility,
};
use opentelemetry::trace::{SpanId as OtelSpanId, TraceId as OtelTraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use serde_json::json;

use crate::common::{Lookup, call};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn text(t: &str) -> Completion {
    Completion {
        content: t.into(),
        ..Completion::default()
    }
}

/// Plan names `spawn_subagent`; Execute calls it; the child looks the fact
/// up and answers; Execute passes the answer on; Review accepts.
fn scripted(request: &CompletionRequest) -> Result<Completion, LlmError> {
    let offered = |n: &str| request.tools.iter().any(|t| t.name == n);
    let after_tool = matches!(request.messages.last(), Some(Message::Tool { .. }));
    let child = request
        .system
        .first()
        .is_some_and(|b| b.text.contains("You are a sub-agent"));
    let mut c = if offered("submit_plan") {
        call(
            "submit_plan",
            json!({"decision": "plan", "reasoning": "delegate",
                   "steps": [{"intent": "find it", "approach": "a sub-agent",
                              "tools": ["spawn_subagent"], "on_failure": "ask"}],
                   "tools_needed": ["spawn_subagent"], "success_criteria": ["answered"]}),
        )
    } else if offered("submit_review") {
        call(
            "submit_review",
            json!({"decision": "done", "notes": "ok", "completed_work": "asked",
                   "final_artifact": "42"}),
        )
    } else if child && after_tool {
        text("42")
    } else if child {
        call("lookup", json!({"q": "answer"}))
    } else if after_tool {
        text("The answer is 42")
    } else {
        call(
            "spawn_subagent",
            json!({"task_prompt": "Find the answer.", "system_prompt": "Use lookup.",
                   "tool_names": ["lookup"]}),
        )
    };
    c.usage = Usage {
        input_tokens: 100,
        output_tokens: 10,
        cache_read_tokens: 0,
    };
    c.model = "scripted-model".into();
    Ok(c)
}

fn one<'a>(spans: &'a [SpanData], name: &str) -> Result<&'a SpanData, String> {
    let found: Vec<&SpanData> = spans.iter().filter(|s| s.name == name).collect();
    match found.as_slice() {
        [s] => Ok(s),
        other => Err(format!("{} spans named {name:?}", other.len())),
    }
}

fn otel_span(e: &Event) -> Option<OtelSpanId> {
    e.span_id.map(|id| OtelSpanId::from_bytes(id.to_bytes()))
}

#[tokio::test]
async fn a_sub_agent_is_a_child_span_of_its_spawn_call() -> TestResult {
    let exporter = InMemorySpanExporter::default();
    let (dispatch, guard) = crewlet_telemetry::build(
        TelemetryOptions::new("crewlet-turn-test")
            .ignore_env()
            .with_writer(std::io::sink)
            .with_span_exporter(exporter.clone()),
    )?;
    let tools = Arc::new(ToolRegistry::new());
    tools.register(Arc::new(Lookup::default()), Visibility::All)?;
    for tool in crewlet_turn::subagent::spawn_tools() {
        tools.register(tool, Visibility::All)?;
    }
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
    {
        // current-thread runtime: the whole turn runs on this thread.
        let _default = tracing::dispatcher::set_default(&dispatch);
        let seat = SeatProfile::new("Nimbus", "eng", "Engineer");
        let outcome = engine
            .run_turn(&seat, &Trigger::new("task-3", "slack", "What is it?"))
            .await;
        assert_eq!(
            outcome.decision,
            TurnDecision::Done,
            "{:?}",
            outcome.failure
        );
    }
    guard.flush();
    let spans = exporter.get_finished_spans()?;

    let execute = one(&spans, "phase execute")?;
    let spawn = one(&spans, "tool spawn_subagent")?;
    let child = one(&spans, "phase subagent")?;
    assert_eq!(spawn.parent_span_id, execute.span_context.span_id());
    assert_eq!(child.parent_span_id, spawn.span_context.span_id());
    let trace: OtelTraceId = execute.span_context.trace_id();
    assert_eq!(child.span_context.trace_id(), trace);

    // The child's completions and its lookup nest under it.
    let child_id = child.span_context.span_id();
    let under_child: Vec<String> = spans
        .iter()
        .filter(|s| s.parent_span_id == child_id)
        .map(|s| s.name.to_string())
        .collect();
    assert_eq!(
        under_child.iter().filter(|n| n.starts_with("llm ")).count(),
        2,
        "{under_child:?}"
    );
    assert!(
        under_child.iter().any(|n| n == "tool lookup"),
        "{under_child:?}"
    );

    // Its events carry its span, in the turn's trace.
    let events: Vec<Event> = sink
        .events()
        .into_iter()
        .filter(|e| {
            e.event_type == EventType::AgentPhaseCompleted && e.payload["phase"] == "subagent"
        })
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(otel_span(&events[0]), Some(child_id));
    assert_eq!(
        events[0]
            .trace_id
            .map(|t| OtelTraceId::from_bytes(t.to_bytes())),
        Some(trace)
    );
    assert_eq!(
        events[0]
            .parent_span_id
            .map(|id| OtelSpanId::from_bytes(id.to_bytes())),
        Some(spawn.span_context.span_id())
    );
    Ok(())
}
