//! The OTLP receiver, fed by hand-made requests (the real exporter is
//! exercised against it in crewlet-telemetry's tests).
#![cfg(feature = "otlp")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crewlet_test_support::otlp_receiver::{OtlpReceiver, check_one_tree, decode_json};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A bare HTTP/1.1 POST; returns the status code.
fn post(addr: SocketAddr, path: &str, content_type: &str, body: &[u8]) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0))
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
    }
}

fn span(trace: u8, id: u8, parent: Option<u8>, name: &str) -> Span {
    Span {
        trace_id: vec![trace; 16],
        span_id: vec![id; 8],
        parent_span_id: parent.map(|p| vec![p; 8]).unwrap_or_default(),
        name: name.into(),
        kind: 2,
        attributes: vec![
            kv("agent_id", "agent-1"),
            KeyValue {
                key: "llm_input_tokens".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::IntValue(120)),
                }),
            },
        ],
        ..Default::default()
    }
}

fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "crewlet-api")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "crewlet".into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn protobuf_spans_are_recorded_with_ids_names_attributes_and_service() -> TestResult {
    let receiver = OtlpReceiver::start()?;
    let body = request(vec![
        span(0xab, 0x01, None, "webhook slack"),
        span(0xab, 0x02, Some(0x01), "route"),
    ])
    .encode_to_vec();
    assert_eq!(
        post(
            receiver.addr(),
            "/v1/traces",
            "application/x-protobuf",
            &body
        )?,
        200
    );
    let spans = receiver.wait_for_spans(|s| s.len() == 2, Duration::from_secs(10))?;
    let root = check_one_tree(&spans)?;
    assert_eq!(root.name, "webhook slack");
    assert_eq!(root.trace_id, "ab".repeat(16));
    assert_eq!(root.span_id, "01".repeat(8));
    assert_eq!(root.parent_span_id, None);
    let child = &spans[1];
    assert_eq!(
        child.parent_span_id.as_deref(),
        Some("01".repeat(8).as_str())
    );
    assert_eq!(child.service_name.as_deref(), Some("crewlet-api"));
    assert_eq!(child.scope, "crewlet");
    assert_eq!(child.kind, 2);
    assert_eq!(child.attr_str("agent_id"), Some("agent-1"));
    assert_eq!(child.attributes["llm_input_tokens"], 120);
    assert_eq!(receiver.requests(), 1);
    Ok(())
}

#[test]
fn json_spans_are_recorded() -> TestResult {
    let receiver = OtlpReceiver::start()?;
    let body = serde_json::json!({
        "resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "crewlet"}}]},
            "scopeSpans": [{
                "scope": {"name": "crewlet"},
                "spans": [
                    {"traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "EEE19B7EC3C1B174",
                     "parentSpanId": "", "name": "turn", "kind": 1,
                     "attributes": [{"key": "llm_output_tokens", "value": {"intValue": "647"}},
                                    {"key": "ok", "value": {"boolValue": true}}]},
                    {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b175",
                     "parentSpanId": "eee19b7ec3c1b174", "name": "phase plan", "kind": 1}
                ]
            }]
        }]
    });
    let status = post(
        receiver.addr(),
        "/v1/traces",
        "application/json",
        body.to_string().as_bytes(),
    )?;
    assert_eq!(status, 200);
    let spans = receiver.wait_for_spans(|s| s.len() == 2, Duration::from_secs(10))?;
    let root = check_one_tree(&spans)?;
    assert_eq!(root.name, "turn");
    assert_eq!(root.trace_id, "5b8efff798038103d269b633813fc60c");
    assert_eq!(root.attributes["llm_output_tokens"], 647);
    assert_eq!(root.attributes["ok"], true);
    assert_eq!(root.service_name.as_deref(), Some("crewlet"));
    Ok(())
}

#[test]
fn bad_bodies_and_content_types_are_refused_and_counted() -> TestResult {
    let receiver = OtlpReceiver::start()?;
    let addr = receiver.addr();
    assert_eq!(
        post(
            addr,
            "/v1/traces",
            "application/x-protobuf",
            b"\xff\xff\xff"
        )?,
        400
    );
    assert_eq!(
        post(addr, "/v1/traces", "application/json", b"{\"nope\": 1}")?,
        400
    );
    assert_eq!(post(addr, "/v1/traces", "text/plain", b"hello")?, 415);
    assert_eq!(receiver.rejected(), 3);
    assert!(receiver.spans().is_empty());
    assert!(decode_json(b"{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"traceId\":\"ab\",\"spanId\":\"cd\"}]}]}]}").is_err());
    Ok(())
}

#[test]
fn waiting_times_out_with_what_arrived() -> TestResult {
    let receiver = OtlpReceiver::start()?;
    let body = request(vec![span(0x01, 0x02, None, "lonely")]).encode_to_vec();
    post(
        receiver.addr(),
        "/v1/traces",
        "application/x-protobuf",
        &body,
    )?;
    let err = receiver
        .wait_for_spans(|s| s.len() >= 2, Duration::from_millis(300))
        .err()
        .ok_or("two spans never arrive")?;
    assert_eq!(err.names, ["lonely"]);
    assert!(err.to_string().contains("1 received"), "{err}");
    receiver.clear();
    assert!(receiver.spans().is_empty());
    Ok(())
}

#[test]
fn two_traces_or_two_roots_are_not_one_tree() {
    let mut a = decode_json(
        br#"{"resourceSpans":[{"scopeSpans":[{"spans":[
            {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"a"},
            {"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060709","name":"b"}]}]}]}"#,
    )
    .unwrap_or_default();
    assert!(check_one_tree(&a).is_err(), "two roots");
    a.truncate(1);
    assert!(check_one_tree(&a).is_ok());
    let mut other = a[0].clone();
    other.trace_id = "ff".repeat(16);
    a.push(other);
    assert!(check_one_tree(&a).is_err(), "two traces");
}
