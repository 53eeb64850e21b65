//! The real OTLP/HTTP exporter against the test receiver: once with a
//! non-global subscriber, once through `init` in a child process configured
//! only by `OTEL_EXPORTER_OTLP_ENDPOINT`, as a deployed process would be.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Buffer, options};
use crewlet_core::{Event, EventType};
use crewlet_telemetry::{
    TelemetryOptions, build, init, llm_span, phase_span, span_from_event, stamp, turn_span,
    webhook_span,
};
use crewlet_test_support::otlp_receiver::{OtlpReceiver, ReceivedSpan, check_one_tree};
use tracing::dispatcher::with_default;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);
const CHILD_ENV: &str = "CREWLET_TELEMETRY_TEST_CHILD";

/// The spans a webhook-to-turn flow opens; returns the raw_webhook event and
/// the event stamped inside the LLM call.
fn emit_flow(secret: &str) -> Result<(Event, Event), serde_json::Error> {
    let webhook = webhook_span("gitlab");
    let raw = webhook.in_scope(|| stamp(Event::new(EventType::RawWebhook, "api.webhooks")));
    drop(webhook);
    let raw = Event::from_json(&raw.to_json()?)?;
    let consume = span_from_event("route", &raw);
    let inner = consume.in_scope(|| {
        let _t = turn_span("agent-7", "Engineer", Some("task-7")).entered();
        let _p = phase_span("plan").entered();
        let llm = llm_span("anthropic", "claude-x");
        llm.record("llm_input_tokens", 120i64);
        llm.in_scope(|| {
            tracing::info!(api_key = secret, "calling the model");
            stamp(Event::new(EventType::AgentPhaseCompleted, "turn"))
        })
    });
    drop(consume);
    Ok((raw, inner))
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Result<&'a ReceivedSpan, String> {
    spans
        .iter()
        .find(|s| s.name == name)
        .ok_or_else(|| format!("no span {name:?}"))
}

#[test]
fn exported_spans_reach_the_receiver_as_one_tree() -> TestResult {
    let receiver = OtlpReceiver::start()?;
    let buf = Buffer::default();
    // A base URL: `/v1/traces` is appended.
    let (dispatch, guard) = build(
        options(&buf)
            .with_service_name("crewlet-engine")
            .with_otlp_endpoint(receiver.base_url())
            .with_secret("model-key-5e6f7a8b"),
    )?;
    assert_eq!(
        guard.traces_endpoint(),
        Some(receiver.traces_url().as_str())
    );
    let (raw, inner) = with_default(&dispatch, || emit_flow("model-key-5e6f7a8b"))?;
    drop(guard); // flushes the batch

    let spans = receiver.wait_for_spans(|s| s.len() >= 5, WAIT)?;
    assert_eq!(
        spans.len(),
        5,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let root = check_one_tree(&spans)?;
    assert_eq!(root.name, "webhook gitlab");
    assert_eq!(root.kind, 2, "server");
    assert!(
        spans
            .iter()
            .all(|s| s.service_name.as_deref() == Some("crewlet-engine"))
    );
    assert!(spans.iter().all(|s| s.scope == "crewlet"));

    let raw_ctx = raw.trace().ok_or("raw event has a trace")?;
    let inner_ctx = inner.trace().ok_or("inner event has a trace")?;
    assert_eq!(root.trace_id, raw_ctx.trace_id.to_string());
    assert_eq!(root.span_id, raw_ctx.span_id.to_string());
    let route = named(&spans, "route")?;
    assert_eq!(route.parent_span_id.as_deref(), Some(root.span_id.as_str()));
    assert_eq!(route.kind, 5, "consumer");
    let turn = named(&spans, "turn")?;
    assert_eq!(turn.attr_str("agent_id"), Some("agent-7"));
    assert_eq!(turn.attr_str("task_id"), Some("task-7"));
    let phase = named(&spans, "phase plan")?;
    let llm = named(&spans, "llm claude-x")?;
    assert_eq!(llm.parent_span_id.as_deref(), Some(phase.span_id.as_str()));
    assert_eq!(llm.span_id, inner_ctx.span_id.to_string());
    assert_eq!(llm.attributes["llm_input_tokens"], 120);
    let all = format!("{spans:?}");
    assert!(
        !all.contains("model-key-5e6f7a8b"),
        "secret exported: {all}"
    );
    Ok(())
}

#[test]
fn no_endpoint_means_no_export_but_ids_still_flow() -> TestResult {
    let buf = Buffer::default();
    let (dispatch, guard) = build(options(&buf))?;
    assert_eq!(guard.traces_endpoint(), None);
    let (raw, inner) = with_default(&dispatch, || emit_flow("unused-secret"))?;
    let (Some(a), Some(b)) = (raw.trace(), inner.trace()) else {
        return Err("both events carry trace context".into());
    };
    assert_eq!(a.trace_id, b.trace_id);
    Ok(())
}

/// Runs in the child process only: the global `init`, configured from the
/// environment alone.
#[test]
fn child_process_body() -> TestResult {
    if std::env::var_os(CHILD_ENV).is_none() {
        return Ok(());
    }
    let guard = init(TelemetryOptions::new("crewlet-child").with_secret("child-secret-value"));
    if guard.traces_endpoint().is_none() {
        return Err("the child should export".into());
    }
    emit_flow("child-secret-value")?;
    drop(guard);
    Ok(())
}

#[test]
fn init_exports_to_the_endpoint_from_the_environment() -> TestResult {
    let receiver = OtlpReceiver::start()?;
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .args(["child_process_body", "--exact", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        // The seed's spelling: the full traces URL in the base variable.
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.traces_url())
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("RUST_LOG")
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed: {}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );

    let spans = receiver.wait_for_spans(|s| s.len() >= 5, WAIT)?;
    check_one_tree(&spans)?;
    assert!(
        spans
            .iter()
            .all(|s| s.service_name.as_deref() == Some("crewlet-child"))
    );

    // stderr is a pipe, so the child logged JSON lines, redacted.
    let announce = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["message"] == "exporting traces over otlp/http")
        .ok_or_else(|| format!("no JSON announce line in child stderr:\n{stderr}"))?;
    assert_eq!(announce["component"], "crewlet_telemetry");
    assert_eq!(announce["endpoint"], receiver.traces_url());
    assert!(stderr.contains("calling the model"), "{stderr}");
    assert!(!stderr.contains("child-secret-value"), "{stderr}");
    Ok(())
}
