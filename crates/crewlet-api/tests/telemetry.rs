//! Webhooks under `crewlet-telemetry` with an in-memory span exporter: each
//! delivery runs in a `webhook {source}` span, the root of its trace, and the
//! `raw_webhook` event carries that span's ids; the company's webhook secrets
//! are registered for redaction.
//!
//! Each test installs its subscriber for its own thread only; `#[tokio::test]`
//! runs the API and the client on that thread.

mod common;

use std::collections::HashSet;

use common::*;
use crewlet_telemetry::{TelemetryGuard, TelemetryOptions};
use opentelemetry::trace::SpanId as OtelSpanId;
use opentelemetry::{KeyValue, Value as OtelValue};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use serde_json::Value;
use tracing::Dispatch;

fn telemetry() -> (Dispatch, TelemetryGuard, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let (dispatch, guard) = crewlet_telemetry::build(
        TelemetryOptions::new("crewlet-api-test")
            .ignore_env()
            .with_debug(true)
            .with_writer(std::io::sink)
            .with_span_exporter(exporter.clone()),
    )
    .unwrap();
    (dispatch, guard, exporter)
}

fn attr(span: &SpanData, key: &str) -> Option<OtelValue> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| kv.value.clone())
}

fn webhook_spans(spans: &[SpanData]) -> Vec<&SpanData> {
    spans
        .iter()
        .filter(|s| s.name.starts_with("webhook "))
        .collect()
}

#[tokio::test]
async fn the_raw_webhook_event_carries_the_webhook_span_ids() {
    let (dispatch, guard, exporter) = telemetry();
    let _default = tracing::dispatcher::set_default(&dispatch);
    let h = Harness::start().await;

    let r = h
        .post_github(
            "/webhooks/github/eng",
            "d-span-1",
            github_issue(7),
            GITHUB_SECRET,
        )
        .await;
    assert_eq!(r.status(), 202);
    let body: Value = r.json().await.unwrap();
    let inbound = h.published.inbound();
    assert_eq!(inbound.len(), 1);
    let event = &inbound[0];

    guard.flush();
    let spans = exporter.get_finished_spans().unwrap();
    let hooks = webhook_spans(&spans);
    assert_eq!(
        hooks.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let span = hooks[0];
    assert_eq!(span.name, "webhook github");
    assert_eq!(
        span.parent_span_id,
        OtelSpanId::INVALID,
        "the delivery starts a trace"
    );

    // The event's ids are the exported span's.
    assert_eq!(
        event.trace_id.map(|t| t.to_string()),
        Some(span.span_context.trace_id().to_string())
    );
    assert_eq!(
        event.span_id.map(|s| s.to_string()),
        Some(span.span_context.span_id().to_string())
    );
    assert_eq!(event.parent_span_id, None);
    assert_eq!(body["trace_id"], span.span_context.trace_id().to_string());

    assert_eq!(attr(span, "source"), Some("github".into()));
    assert_eq!(attr(span, "delivery_id"), Some("d-span-1".into()));
    assert_eq!(attr(span, "event_type"), Some("issues.opened".into()));
    // The seat of the URL is on the span's "webhook verified" event.
    let verified = span
        .events
        .events
        .iter()
        .find(|e| e.name == "webhook verified")
        .expect("the verified event on the span");
    assert!(
        verified
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "handle" && kv.value == "eng".into()),
        "{:?}",
        verified.attributes
    );
    // Never a secret, in any exported span.
    let rendered = format!("{spans:?}");
    assert!(!rendered.contains(GITHUB_SECRET), "{rendered}");
    assert!(!rendered.contains("x-hub-signature-256"), "{rendered}");
    h.stop().await;
}

#[tokio::test]
async fn every_delivery_is_a_trace_of_its_own_and_refusals_are_traced_too() {
    let (dispatch, guard, exporter) = telemetry();
    let _default = tracing::dispatcher::set_default(&dispatch);
    let h = Harness::start().await;
    // Two different bodies: one body under two ids would be a replay.
    for (delivery, issue) in [("d-a", 1), ("d-b", 2)] {
        let r = h
            .post_github(
                "/webhooks/github",
                delivery,
                github_issue(issue),
                GITHUB_SECRET,
            )
            .await;
        assert_eq!(r.status(), 202);
    }
    let r = h
        .post_github("/webhooks/github", "d-c", github_issue(1), "wrong-secret")
        .await;
    assert_eq!(r.status(), 401);
    // Other requests get a DEBUG http span of their own (on here: debug).
    let r = h.get("/health").send().await.unwrap();
    assert_eq!(r.status(), 200);

    guard.flush();
    let spans = exporter.get_finished_spans().unwrap();
    let hooks = webhook_spans(&spans);
    assert_eq!(hooks.len(), 3);
    let traces: HashSet<_> = hooks.iter().map(|s| s.span_context.trace_id()).collect();
    assert_eq!(traces.len(), 3, "one trace per delivery");
    let inbound = h.published.inbound();
    assert_eq!(inbound.len(), 2);
    for e in &inbound {
        let id = e.span_id.map(|s| s.to_string());
        assert!(
            hooks
                .iter()
                .any(|s| Some(s.span_context.span_id().to_string()) == id),
            "{e:?} carries a webhook span id"
        );
    }
    let http = spans
        .iter()
        .find(|s| s.name == "GET")
        .expect("the http span of GET /health");
    assert_eq!(attr(http, "path"), Some("/health".into()));
    assert_eq!(attr(http, "status"), Some(OtelValue::I64(200)));
    h.stop().await;
}

#[tokio::test]
async fn the_company_webhook_secrets_are_registered_for_redaction() {
    let h = Harness::start().await;
    // GitHub's comes from `${GH_SECRET}`: registered after interpolation.
    for secret in [
        GITHUB_SECRET,
        GITLAB_TOKEN,
        PLANE_SECRET,
        JIRA_SECRET,
        CONFLUENCE_SECRET,
        SLACK_SECRET,
    ] {
        let line = format!("the value is {secret}.");
        assert_eq!(
            crewlet_telemetry::redact(&line),
            "the value is [redacted].",
            "{secret} is registered"
        );
    }
    assert!(!crewlet_telemetry::redact("${GH_SECRET}").contains("[redacted]"));
    h.stop().await;
}
