//! The spans every process opens, with the field names log lines and traces
//! share. Fields declared `Empty` are filled in later with
//! `span.record("llm_input_tokens", n)`. Record counts as `i64`: the
//! OpenTelemetry bridge exports `u64` values as strings.
//!
//! ```text
//! webhook {source}                      api: one per accepted delivery
//!   └ consume "route"   (span_from_event) engine: NotificationRouter
//!       └ consume "turn"                engine: seat runtime picks the inbox event
//!           └ turn {agent_id, role, task_id}
//!               └ phase {phase}
//!                   ├ llm {provider, model}
//!                   └ tool {tool}
//! ```

use tracing::Span;
use tracing::field::Empty;

/// One inbound webhook delivery (API process). Record `delivery_id` and
/// `event_type` once known; the `raw_webhook` event stamped inside it carries
/// this span's id.
pub fn webhook_span(source: &str) -> Span {
    tracing::info_span!(
        target: "crewlet::webhook",
        "webhook",
        otel.name = %format!("webhook {source}"),
        otel.kind = "server",
        source = source,
        delivery_id = Empty,
        event_type = Empty,
    )
}

/// The router deciding which seat gets an inbound event. Record `recipient`
/// once resolved.
pub fn routing_span() -> Span {
    tracing::info_span!(
        target: "crewlet::routing",
        "routing",
        recipient = Empty,
        event_type = Empty,
    )
}

/// One agent turn. Record `turn_id`, the token totals and `duration_ms` as
/// they become known.
pub fn turn_span(agent_id: &str, role: &str, task_id: Option<&str>) -> Span {
    tracing::info_span!(
        target: "crewlet::turn",
        "turn",
        agent_id = agent_id,
        role = role,
        task_id = task_id,
        turn_id = Empty,
        llm_input_tokens = Empty,
        llm_output_tokens = Empty,
        duration_ms = Empty,
    )
}

/// One phase of a turn (`plan`, `execute`, `review`, ...).
pub fn phase_span(phase: &str) -> Span {
    tracing::info_span!(
        target: "crewlet::turn",
        "phase",
        otel.name = %format!("phase {phase}"),
        phase = phase,
        iteration = Empty,
        llm_input_tokens = Empty,
        llm_output_tokens = Empty,
    )
}

/// One LLM completion. Record the token counts from the response.
pub fn llm_span(provider: &str, model: &str) -> Span {
    tracing::info_span!(
        target: "crewlet::llm",
        "llm",
        otel.name = %format!("llm {model}"),
        otel.kind = "client",
        provider = provider,
        model = model,
        llm_input_tokens = Empty,
        llm_output_tokens = Empty,
        duration_ms = Empty,
    )
}

/// One tool call. Record `error` when it failed.
pub fn tool_span(tool: &str) -> Span {
    tracing::info_span!(
        target: "crewlet::tool",
        "tool",
        otel.name = %format!("tool {tool}"),
        tool = tool,
        error = Empty,
        duration_ms = Empty,
    )
}
