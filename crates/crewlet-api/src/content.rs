//! What a reader without `read:content` does not see. Metadata (seats,
//! states, counts, event types, timings, token figures, ids) is shown to
//! every reader; content (prompts, responses, tool arguments and results,
//! memory, task and trigger text, findings, transcripts, questions, chat
//! text) only to a caller whose token carries `read:content` (which
//! `operate` and `admin` include), or to anonymous readers where the
//! bootstrap says `allow_anonymous_read: content` on loopback.
//!
//! Hidden fields are left out, never blanked, and every answer that left
//! something out says so with the [`CONTENT_HEADER`] header (`hidden`).
//! Which payload fields of each event type are content is the one list
//! below, [`event_content`]: a match over every known type, so a new type
//! does not compile until it is sorted.

use axum::http::{HeaderName, HeaderValue};
use crewlet_core::EventType;
use serde_json::Value;

/// Response header on every answer of a content route: `hidden` when
/// content was left out (the caller lacks `read:content`), `shown`
/// otherwise.
pub const CONTENT_HEADER: &str = "x-crewlet-content";

/// The header pair of an answer with (`true`) or without its content.
pub(crate) fn header(shown: bool) -> [(HeaderName, HeaderValue); 1] {
    [(
        HeaderName::from_static(CONTENT_HEADER),
        HeaderValue::from_static(if shown { "shown" } else { "hidden" }),
    )]
}

/// A path of keys into a JSON payload; a list met on the way applies the
/// rest of the path to each of its items.
pub(crate) type FieldPath = &'static [&'static str];

/// Where an event type's payload carries content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PayloadContent {
    /// Nothing: the payload is metadata.
    None,
    /// These fields are content.
    Fields(&'static [FieldPath]),
    /// All of it: a type this engine does not write (its fields are not
    /// known), or whose payload is content through and through.
    Whole,
}

/// What of one event type is content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EventContent {
    pub payload: PayloadContent,
    /// The envelope's `summary` quotes content (task text, a memory
    /// preview, a search query, a sub-agent's brief).
    pub summary: bool,
}

const fn fields(paths: &'static [FieldPath]) -> EventContent {
    EventContent {
        payload: PayloadContent::Fields(paths),
        summary: false,
    }
}

const METADATA: EventContent = EventContent {
    payload: PayloadContent::None,
    summary: false,
};

const UNKNOWN: EventContent = EventContent {
    payload: PayloadContent::Whole,
    summary: true,
};

/// A notification's text as the webhook route stores it (`raw_webhook`):
/// the normalized notification's title, text and raw body, and the request
/// body (written both nested and, by older writers, at the top).
const WEBHOOK_TEXT: &[FieldPath] = &[
    &["notification", "title"],
    &["notification", "text"],
    &["notification", "raw"],
    &["body"],
    &["title"],
    &["text"],
    &["raw"],
];

/// The content of each event type's payload and summary.
pub(crate) fn event_content(event_type: &EventType) -> EventContent {
    use EventType::*;
    match event_type {
        AgentSpawned | AgentTerminated | OrgStarted | OrgStopped | RoleUpdated
        | AgentStateChanged => METADATA,
        // A task's request: its text, title, merged messages and the
        // colleague's question it answers; the summary quotes the text.
        TaskCreated => EventContent {
            payload: PayloadContent::Fields(&[
                &["content"],
                &["title"],
                &["coalesced", "content"],
                &["ask", "question"],
            ]),
            summary: true,
        },
        TaskStarted | AgentTurnCompleted => fields(&[&["trigger", "summary"]]),
        TaskCompleted => fields(&[&["final_artifact"]]),
        TaskFailed => METADATA,
        // Never written by this engine: its fields are not known.
        TaskDelegated => UNKNOWN,
        // A sub-agent's phase events carry its brief (summary too).
        AgentPhaseStarted => EventContent {
            payload: PayloadContent::Fields(&[&["brief"]]),
            summary: true,
        },
        AgentPhaseCompleted => fields(&[&["prompt"], &["response"], &["brief"]]),
        AgentTurnProgress => fields(&[&["response"]]),
        BudgetExhausted
        | BudgetWarning
        | TurnGuardBreach
        | LlmUnavailable
        | ProviderFallback
        | ProviderCircuitOpened
        | ProviderCircuitClosed
        | McpServerFailed
        | ToolSkillBlocked
        | ToolActivated
        | ExecuteMissingTool
        | ConfigRevisionActivated
        | ConfigRevisionApplied
        | SeatControl
        | EffectUncertain
        | TurnResumed
        | TurnTriggerSkipped
        | SeatClaimed
        | SeatReleased
        | FleetControl
        | SandboxRunStarted
        | SandboxEscapeRefused => METADATA,
        SandboxClarificationRequested => fields(&[&["question"], &["conversation"], &["findings"]]),
        SandboxRunCompleted => fields(&[&["findings"], &["transcript"]]),
        MessageSent | DecisionRequested | DecisionResolved | DocumentCreated | DocumentUpdated => {
            UNKNOWN
        }
        ContributionRequested => fields(&[&["question"]]),
        ContributionReceived => fields(&[&["answer"]]),
        AskEscalated => METADATA,
        RawWebhook => fields(WEBHOOK_TEXT),
        ExternalNotification | NotificationSkipped | NotificationsCoalesced => METADATA,
        DiaryWritten => EventContent {
            payload: PayloadContent::Fields(&[&["preview"]]),
            summary: true,
        },
        EpisodeRecorded | MemoryPrefetched | ProfileUpdated | AgentOnboarded => METADATA,
        SkillSynthesized => fields(&[&["description"]]),
        SkillRefined => fields(&[&["change_note"]]),
        KnowledgePrefetched => EventContent {
            payload: PayloadContent::Fields(&[&["query"]]),
            summary: true,
        },
        ScheduleFired => METADATA,
        Other(name) => match name.as_str() {
            "subagent_batched" => METADATA,
            _ => UNKNOWN,
        },
    }
}

/// Whether events of `event_type` carry any content (in their payload or
/// summary); a stream frame of one that does not is sent whole to every
/// reader.
pub(crate) fn has_content(event_type: &EventType) -> bool {
    event_content(event_type) != METADATA
}

/// Removes the field at `path` from `value` (each item of a list on the way).
fn remove(value: &mut Value, path: &[&str]) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(|i| remove(i, path)),
        Value::Object(map) => match path {
            [] => {}
            [last] => {
                map.remove(*last);
            }
            [first, rest @ ..] => {
                if let Some(inner) = map.get_mut(*first) {
                    remove(inner, rest);
                }
            }
        },
        _ => {}
    }
}

/// Leaves the content out of an event in its wire form (an object with
/// `type`, `summary` and `payload`).
pub(crate) fn strip_event_value(event: &mut Value) {
    let Some(kind) = event.get("type").and_then(Value::as_str) else {
        return;
    };
    let content = event_content(&EventType::parse(kind));
    let Value::Object(map) = event else { return };
    if content.summary {
        map.remove("summary");
    }
    match content.payload {
        PayloadContent::None => {}
        PayloadContent::Whole => {
            map.remove("payload");
        }
        PayloadContent::Fields(paths) => {
            if let Some(payload) = map.get_mut("payload") {
                for path in paths {
                    remove(payload, path);
                }
            }
        }
    }
}

/// The content of a live seat (`live::SeatLive` as JSON): its task's text,
/// the running phase's response so far, and its coding agent's question.
const SEAT_CONTENT: &[FieldPath] = &[
    &["task", "summary"],
    &["turn", "response"],
    &["sandbox", "question"],
];

/// Leaves the content out of a live seat in its JSON form.
pub(crate) fn strip_seat_value(seat: &mut Value) {
    for path in SEAT_CONTENT {
        remove(seat, path);
    }
}

/// Leaves the content out of a `/stream/snapshot` document (its seats and
/// events) and marks it `content_hidden: true`.
pub(crate) fn strip_snapshot(snapshot: &mut Value) {
    if let Some(Value::Array(seats)) = snapshot.get_mut("seats") {
        seats.iter_mut().for_each(strip_seat_value);
    }
    if let Some(Value::Array(events)) = snapshot.get_mut("events") {
        events.iter_mut().for_each(strip_event_value);
    }
    if let Value::Object(map) = snapshot {
        map.insert("content_hidden".into(), Value::Bool(true));
    }
}

/// The metadata-only form of one stream frame (`{"kind": ..., "data": ...}`
/// as sent); `None` when it cannot be read (it is then not sent).
pub(crate) fn strip_frame(json: &str) -> Option<String> {
    let mut frame: Value = serde_json::from_str(json).ok()?;
    let kind = frame.get("kind").and_then(Value::as_str).map(str::to_owned);
    if let Some(data) = frame.get_mut("data") {
        match kind.as_deref() {
            Some("event") => strip_event_value(data),
            Some("seat") => strip_seat_value(data),
            Some("snapshot") => strip_snapshot(data),
            _ => {}
        }
    }
    Some(frame.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_known_type_is_sorted_and_unknown_types_hide_everything() {
        for t in EventType::KNOWN {
            // The match is exhaustive; this pins that the list reads back.
            let _ = event_content(t);
        }
        assert_eq!(
            event_content(&EventType::Other("future.kind".into())),
            UNKNOWN
        );
        assert_eq!(
            event_content(&EventType::Other("subagent_batched".into())),
            METADATA
        );
    }

    #[test]
    fn content_fields_are_left_out_not_blanked() {
        let mut e = json!({
            "type": "task_created", "summary": "task for eng: fix the login",
            "payload": {"handle": "eng", "content": "fix the login", "source": "api",
                "coalesced": [{"content": "a", "sender": "x"}, {"content": "b"}],
                "ask": {"question": "why?", "asker": "pm"}}
        });
        strip_event_value(&mut e);
        assert_eq!(
            e,
            json!({"type": "task_created", "payload": {"handle": "eng", "source": "api",
                "coalesced": [{"sender": "x"}, {}], "ask": {"asker": "pm"}}})
        );
        let mut p = json!({"type": "agent_phase_completed", "summary": "eng plan completed",
            "payload": {"prompt": "secret", "response": "answer", "input_tokens": 5}});
        strip_event_value(&mut p);
        assert_eq!(
            p,
            json!({"type": "agent_phase_completed", "summary": "eng plan completed",
                "payload": {"input_tokens": 5}})
        );
        let mut w = json!({"type": "message_sent", "summary": "hi", "payload": {"text": "x"}});
        strip_event_value(&mut w);
        assert_eq!(w, json!({"type": "message_sent"}));
    }

    #[test]
    fn frames_and_seats_lose_their_content() {
        let seat = json!({"kind": "seat", "data": {"handle": "eng",
            "task": {"task_id": "t", "summary": "secret task"},
            "turn": {"phase": "plan", "response": "secret answer"},
            "sandbox": null}});
        let out: Value = serde_json::from_str(&strip_frame(&seat.to_string()).unwrap_or_default())
            .unwrap_or_default();
        assert_eq!(
            out,
            json!({"kind": "seat", "data": {"handle": "eng", "task": {"task_id": "t"},
                "turn": {"phase": "plan"}, "sandbox": null}})
        );
        let budget = json!({"kind": "budget", "data": {"used": 1}}).to_string();
        assert_eq!(strip_frame(&budget).as_deref(), Some(budget.as_str()));
    }
}
