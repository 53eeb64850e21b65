//! One trace across the split deployment, as an OTLP backend sees it.
//!
//! `crewlet run cfg.yaml` (engine, no API) and `crewlet run api cfg.yaml
//! --port P` run as real processes on real Pulsar (a fresh namespace) and a
//! fresh PostgreSQL database, both exporting spans over OTLP/HTTP to a test
//! receiver (`OTEL_EXPORTER_OTLP_ENDPOINT`, batches every 200 ms through
//! `OTEL_BSP_SCHEDULE_DELAY`). One signed Slack webhook to the API wakes the
//! seat in the engine; its turn runs against the fake model and posts
//! through the fake MCP server.
//!
//! The spans of the webhook's trace must form one tree: the API's webhook
//! span is the only root, every other span's parent was received too, spans
//! came from both processes, and the tree holds the routing, turn, phase,
//! llm and tool spans. The events the API returns for the trace carry span
//! ids that are ids of received spans.

mod common;

use std::collections::BTreeSet;

use common::*;
use crewlet_test_support::database::FreshDatabase;
use crewlet_test_support::fake_llm::FakeLlmServer;
use crewlet_test_support::otlp_receiver::{OtlpReceiver, ReceivedSpan, check_one_tree};
use serde_json::Value;

const SLACK_SECRET: &str = "otlp-slack-secret";
const API_SERVICE: &str = "crewlet-api";
const ENGINE_SERVICE: &str = "crewlet-engine";
/// The phases of the fake model's happy turn.
const PHASES: [&str; 3] = ["phase plan", "phase execute", "phase review"];

type SpanCheck = fn(&ReceivedSpan) -> bool;

fn of_trace(spans: &[ReceivedSpan], trace_id: &str) -> Vec<ReceivedSpan> {
    spans
        .iter()
        .filter(|s| s.trace_id == trace_id)
        .cloned()
        .collect()
}

fn names(spans: &[ReceivedSpan]) -> Vec<String> {
    spans
        .iter()
        .map(|s| {
            format!(
                "{} [{}] {} <- {}",
                s.name,
                s.service_name.as_deref().unwrap_or("?"),
                s.span_id,
                s.parent_span_id.as_deref().unwrap_or("root")
            )
        })
        .collect()
}

/// The turn span itself (`turn_span`), not the consumer span of the same
/// name that picked the inbox event up (that one has `event_type`).
fn is_turn(s: &ReceivedSpan) -> bool {
    s.name == "turn"
        && s.attributes.contains_key("role")
        && !s.attributes.contains_key("event_type")
}

/// Whether the trace's spans include everything the test looks for (the
/// tree check itself comes after).
fn complete(spans: &[ReceivedSpan]) -> bool {
    let has = |pred: &dyn Fn(&ReceivedSpan) -> bool| spans.iter().any(pred);
    has(&|s| s.name.starts_with("webhook") && s.parent_span_id.is_none())
        && has(&|s| s.name == "routing")
        && has(&is_turn)
        && PHASES.iter().all(|p| has(&|s| s.name == *p))
        && has(&|s| s.name.starts_with("llm "))
        && has(&|s| s.name.starts_with("tool "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_webhook_is_one_exported_trace_across_api_and_engine() {
    let pulsar = crewlet_test_support::require!(pulsar);
    let admin_dsn = crewlet_test_support::require!(postgres);
    let db = FreshDatabase::create(&admin_dsn).await;
    let receiver = OtlpReceiver::start().unwrap_or_else(|e| panic!("otlp receiver: {e}"));
    let llm = FakeLlmServer::start(script())
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let endpoint = receiver.base_url();
    let exporting = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "200"),
        ("RUST_LOG", "info"),
    ];
    // The engine is named as docs/observability.md advises for the split
    // processes; the standalone API is `crewlet-api` by default.
    let mut engine_env = exporting.to_vec();
    engine_env.push(("CREWLET_OBSERVABILITY__SERVICE_NAME", ENGINE_SERVICE));
    let base_url = llm.openai_base_url();
    let mut split = SplitDeployment::start(SplitOptions {
        name: "otlp",
        pulsar_url: &pulsar,
        dsn: &db.dsn,
        llm_base_url: &base_url,
        slack_secret: SLACK_SECRET,
        engine_env: &engine_env,
        api_env: &exporting,
        api_token: None,
    })
    .await;
    let base = split.base.clone();

    let (body, headers) = slack_mention(SLACK_SECRET, "Ev-otlp-1");
    let (status, accepted) = post(&base, "/webhooks/slack/eng", body, &headers).await;
    assert_eq!(status, 200, "{accepted}");
    let trace_id = accepted["trace_id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(trace_id.len(), 32, "{accepted}");

    let events = split.completed_trace(&trace_id).await;

    // Spans are exported as they end, in batches; wait for the whole tree.
    let waited = tokio::task::block_in_place(|| {
        receiver.wait_for_spans(|all| complete(&of_trace(all, &trace_id)), WAIT)
    });
    if let Err(e) = &waited {
        panic!(
            "the trace's spans did not all arrive: {e}\nof trace {trace_id}: {:#?}\nengine log:\n{}\napi log:\n{}",
            names(&of_trace(&e.spans, &trace_id)),
            split.engine.log(),
            split.api.log()
        );
    }

    // Stopped with SIGTERM, both flush what is left before exiting.
    split.stop_cleanly().await;
    assert_eq!(receiver.rejected(), 0, "the receiver rejected exports");

    let all = receiver.spans();
    let spans = of_trace(&all, &trace_id);
    let listing = names(&spans);
    let stored: Vec<String> = events
        .iter()
        .map(|e| {
            format!(
                "{} {} <- {}",
                e["type"].as_str().unwrap_or("?"),
                e["span_id"].as_str().unwrap_or("?"),
                e["parent_span_id"].as_str().unwrap_or("root")
            )
        })
        .collect();
    let root = check_one_tree(&spans)
        .unwrap_or_else(|e| panic!("{e}:\nspans: {listing:#?}\nstored events: {stored:#?}"));
    assert!(
        root.name.starts_with("webhook"),
        "the root is the webhook span: {listing:#?}"
    );
    assert_eq!(root.parent_span_id, None, "{listing:#?}");
    assert_eq!(
        root.service_name.as_deref(),
        Some(API_SERVICE),
        "{listing:#?}"
    );
    let ids: BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    assert_eq!(ids.len(), spans.len(), "span ids are unique: {listing:#?}");

    let services: BTreeSet<&str> = spans
        .iter()
        .filter_map(|s| s.service_name.as_deref())
        .collect();
    assert_eq!(
        services,
        BTreeSet::from([API_SERVICE, ENGINE_SERVICE]),
        "{listing:#?}"
    );
    let checks: [(&str, SpanCheck); 5] = [
        ("routing", |s| s.name == "routing"),
        ("turn", is_turn),
        ("phase", |s| s.name.starts_with("phase ")),
        ("llm", |s| s.name.starts_with("llm ")),
        ("tool", |s| s.name.starts_with("tool ")),
    ];
    for (what, pred) in checks {
        let found: Vec<Option<&str>> = spans
            .iter()
            .filter(|s| pred(s))
            .map(|s| s.service_name.as_deref())
            .collect();
        assert!(!found.is_empty(), "no {what} span: {listing:#?}");
        assert!(
            found.iter().all(|s| *s == Some(ENGINE_SERVICE)),
            "{what} spans come from the engine: {found:?}\n{listing:#?}"
        );
    }
    let turn = spans
        .iter()
        .find(|s| is_turn(s))
        .unwrap_or_else(|| panic!("no turn span with agent_id: {listing:#?}"));
    assert_eq!(turn.attr_str("role"), Some("Engineer"), "{turn:?}");
    let llm_span = spans
        .iter()
        .find(|s| s.name.starts_with("llm "))
        .unwrap_or_else(|| panic!("no llm span: {listing:#?}"));
    assert_eq!(
        llm_span.attr_str("model"),
        Some("fake-model"),
        "{llm_span:?}"
    );

    // Stored events and exported spans are the same tree.
    assert!(!events.is_empty());
    for e in &events {
        assert_eq!(e["trace_id"], trace_id.as_str(), "{e}");
        let span_id = e["span_id"].as_str().unwrap_or_default();
        assert!(
            ids.contains(span_id),
            "{} event has span id {span_id}, not a received span:\n{e}\n{listing:#?}",
            e["type"]
        );
        if let Some(parent) = e["parent_span_id"].as_str() {
            assert!(
                ids.contains(parent),
                "{} event's parent span {parent} was not received:\n{e}\n{listing:#?}",
                e["type"]
            );
        }
    }
    let raw = events
        .iter()
        .find(|e| e["type"] == "raw_webhook")
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(
        raw["span_id"],
        root.span_id.as_str(),
        "raw_webhook is stamped in the webhook span"
    );

    split.clean_up().await;
}
