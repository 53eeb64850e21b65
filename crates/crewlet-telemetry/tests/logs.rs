//! Log lines through the real subscriber into a buffer.

mod common;

use common::{Buffer, options};
use crewlet_telemetry::{LogFormat, TelemetryError, build, phase_span, turn_span};
use tracing::dispatcher::with_default;

fn is_hex(s: &serde_json::Value, len: usize) -> bool {
    s.as_str()
        .is_some_and(|s| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[test]
fn auto_format_with_a_custom_writer_is_json_with_span_fields_flattened()
-> Result<(), TelemetryError> {
    let buf = Buffer::default();
    let (dispatch, _guard) = build(options(&buf))?;
    with_default(&dispatch, || {
        let _turn = turn_span("abc-123", "Senior Engineer", Some("def-456")).entered();
        let _phase = phase_span("execute").entered();
        tracing::info!(
            event = "turn_completed",
            llm_input_tokens = 1200u64,
            llm_output_tokens = 647u64,
            duration_ms = 3200u64,
            "turn done"
        );
    });
    let line = buf.line_with_message("turn done");
    assert!(
        line["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.contains('T')),
        "{line}"
    );
    assert_eq!(line["level"], "info");
    assert_eq!(line["component"], "logs");
    assert_eq!(line["agent_id"], "abc-123");
    assert_eq!(line["role"], "Senior Engineer");
    assert_eq!(line["task_id"], "def-456");
    assert_eq!(line["phase"], "execute");
    assert_eq!(line["event"], "turn_completed");
    assert_eq!(line["llm_input_tokens"], 1200);
    assert_eq!(line["llm_output_tokens"], 647);
    assert_eq!(line["duration_ms"], 3200);
    assert_eq!(line["span"], "phase");
    assert!(is_hex(&line["trace_id"], 32), "{line}");
    assert!(is_hex(&line["span_id"], 16), "{line}");
    assert!(line.get("otel.name").is_none(), "otel.* steer export only");
    Ok(())
}

#[test]
fn a_field_recorded_later_shows_on_later_lines() -> Result<(), TelemetryError> {
    let buf = Buffer::default();
    let (dispatch, _guard) = build(options(&buf))?;
    with_default(&dispatch, || {
        let turn = turn_span("a", "r", None);
        let _in = turn.enter();
        tracing::info!("before");
        turn.record("llm_input_tokens", 10u64);
        tracing::info!("after");
    });
    assert!(
        buf.line_with_message("before")
            .get("llm_input_tokens")
            .is_none()
    );
    assert!(buf.line_with_message("before").get("task_id").is_none());
    assert_eq!(buf.line_with_message("after")["llm_input_tokens"], 10);
    Ok(())
}

#[test]
fn text_format_is_plain_text() -> Result<(), TelemetryError> {
    let buf = Buffer::default();
    let (dispatch, guard) = build(options(&buf).with_log_format(LogFormat::Text))?;
    assert!(!guard.json_logs());
    with_default(&dispatch, || {
        let _turn = turn_span("abc-123", "Engineer", None).entered();
        tracing::info!(event = "turn_completed", "readable line");
    });
    let text = buf.text();
    let line = text
        .lines()
        .find(|l| l.contains("readable line"))
        .unwrap_or_else(|| panic!("no line in {text}"));
    assert!(!line.starts_with('{'), "{line}");
    assert!(line.contains("INFO"), "{line}");
    assert!(line.contains("agent_id"), "{line}");
    assert!(
        !line.contains('\u{1b}'),
        "no colours into a custom writer: {line:?}"
    );
    Ok(())
}

#[test]
fn json_format_stays_json_when_asked() -> Result<(), TelemetryError> {
    let buf = Buffer::default();
    let (dispatch, guard) = build(options(&buf).with_log_format(LogFormat::Json))?;
    assert!(guard.json_logs());
    with_default(&dispatch, || tracing::warn!(n = 1, "json line"));
    assert_eq!(buf.line_with_message("json line")["level"], "warn");
    Ok(())
}

fn messages(buf: &Buffer) -> Vec<String> {
    buf.json_lines()
        .iter()
        .filter_map(|l| l["message"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn debug_turns_on_crewlet_targets_only() -> Result<(), TelemetryError> {
    let emit = || {
        tracing::debug!(target: "crewlet_engine::seat", "crewlet debug");
        tracing::debug!(target: "crewlet", "crewlet root debug");
        tracing::debug!(target: "some_dependency", "dependency debug");
        tracing::info!(target: "crewlet_engine::seat", "crewlet info");
    };

    let quiet = Buffer::default();
    let (dispatch, _g1) = build(options(&quiet))?;
    with_default(&dispatch, emit);
    assert_eq!(messages(&quiet), ["crewlet info"]);

    let loud = Buffer::default();
    let (dispatch, _g2) = build(options(&loud).with_debug(true))?;
    with_default(&dispatch, emit);
    assert_eq!(
        messages(&loud),
        ["crewlet debug", "crewlet root debug", "crewlet info"]
    );
    Ok(())
}

#[test]
fn log_filter_and_rust_log_are_respected() -> Result<(), TelemetryError> {
    let emit = || {
        tracing::info!(target: "crewlet_turn", "turn info");
        tracing::warn!(target: "crewlet_turn", "turn warn");
        tracing::error!(target: "crewlet_api", "api error");
    };
    let buf = Buffer::default();
    let (dispatch, _g) = build(options(&buf).with_log_filter("warn"))?;
    with_default(&dispatch, emit);
    assert_eq!(messages(&buf), ["turn warn", "api error"]);

    let buf = Buffer::default();
    let mut opts = options(&buf).with_log_filter("warn");
    opts.rust_log = Some("error".into());
    let (dispatch, _g) = build(opts)?;
    with_default(&dispatch, emit);
    assert_eq!(
        messages(&buf),
        ["api error"],
        "RUST_LOG wins over log_filter"
    );
    Ok(())
}

#[test]
fn a_quiet_level_keeps_span_fields_and_trace_ids_on_warnings() -> Result<(), TelemetryError> {
    let buf = Buffer::default();
    let (dispatch, _g) = build(options(&buf).with_log_filter("warn"))?;
    with_default(&dispatch, || {
        let _turn = turn_span("agent-9", "Engineer", Some("task-9")).entered();
        tracing::info!("hidden");
        tracing::warn!("tool failed");
    });
    assert_eq!(messages(&buf), ["tool failed"]);
    let line = buf.line_with_message("tool failed");
    assert_eq!(line["agent_id"], "agent-9");
    assert!(is_hex(&line["trace_id"], 32), "{line}");
    Ok(())
}

#[test]
fn a_bad_filter_is_an_error_naming_it() {
    let buf = Buffer::default();
    let err = build(options(&buf).with_log_filter("crewlet=loud"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("crewlet=loud"), "{err}");
}

#[test]
fn registered_secrets_and_credential_patterns_never_reach_the_log() -> Result<(), TelemetryError> {
    let secret = "pw-7f3a9c1e-registered";
    let key = "sk-live0123456789abcdefXYZ";
    for format in [LogFormat::Json, LogFormat::Text] {
        let buf = Buffer::default();
        let (dispatch, _g) = build(
            options(&buf)
                .with_log_format(format)
                .with_secret(secret)
                .with_secret("x"),
        )?;
        with_default(&dispatch, || {
            let _turn = turn_span("a", "r", Some(secret)).entered();
            tracing::info!(
                dsn = "postgres://crewlet:dbpass99@db:5432/crewlet",
                quoted = format!("say \"{secret}\""),
                "calling with key {key} and {secret}"
            );
            tracing::error!(error = %format!("auth failed for {secret}"), "failure");
        });
        let text = buf.text();
        assert!(!text.is_empty());
        assert!(!text.contains(secret), "{format:?}: {text}");
        assert!(!text.contains("live0123456789"), "{format:?}: {text}");
        assert!(!text.contains("dbpass99"), "{format:?}: {text}");
        assert!(text.contains("[redacted]"), "{format:?}: {text}");
        assert!(
            text.contains("postgres://crewlet:[redacted]@db"),
            "{format:?}: {text}"
        );
        if format == LogFormat::Json {
            buf.json_lines(); // still valid JSON after redaction
        }
    }
    Ok(())
}
