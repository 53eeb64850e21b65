//! One turn per conversation burst: the seat's inbox is a batch
//! subscription keyed by conversation, and a part with several tasks of one
//! conversation becomes one digest task (the earlier messages oldest first,
//! then the latest in full).
//!
//! Conversation keys come from the task alone: the source, the channel and
//! the thread (`github:acme/api:7`, `slack:C9:1718.001`, `jira:POC:POC-7`).
//! Tasks without both (the API's tasks, schedules, colleagues' asks) have
//! no key and are never merged.

use std::time::Duration;

use chrono::{DateTime, Utc};
use crewlet_core::payload::{CoalescedMessage, TaskRequest};
use crewlet_core::{Event, EventType};
use crewlet_queue::{BatchKey, BatchOptions, Delivery};
use serde_json::json;

/// Sources whose tasks are never merged: each is a request of its own.
const NEVER_MERGED: &[&str] = &["api", "schedule", "a2a", "colleague", "engine", "assign"];

/// Longest earlier message kept whole in a digest (the latest is always
/// whole; every message is kept whole in `coalesced`).
const EARLIER_MAX_CHARS: usize = 4_000;

/// The inbox batching of a company: `notification_coalesce_window_seconds`
/// (default 0: no added latency, only what waited while the seat was busy)
/// and `notification_coalesce_max_batch` (default 20).
pub(crate) fn batch_options(window_seconds: Option<f64>, max_batch: Option<u32>) -> BatchOptions {
    let window = window_seconds
        .filter(|w| w.is_finite() && *w > 0.0)
        .map_or(Duration::ZERO, |w| Duration::from_secs_f64(w.min(60.0)));
    let max = max_batch.map_or(20, |m| m.max(1) as usize);
    let key: BatchKey = std::sync::Arc::new(conversation_key);
    BatchOptions::new(window, max, key)
}

/// The conversation a `task_created` event belongs to, if it can be merged
/// with others.
pub(crate) fn conversation_key(event: &Event) -> Option<String> {
    if event.event_type != EventType::TaskCreated {
        return None;
    }
    let request = TaskRequest::from_event(event).ok()?;
    request_key(&request)
}

/// The conversation of a task request, as [`conversation_key`] names it.
pub(crate) fn request_key(r: &TaskRequest) -> Option<String> {
    if NEVER_MERGED.contains(&r.source.as_str()) {
        return None;
    }
    let channel = r.channel.as_deref().filter(|c| !c.is_empty())?;
    if r.direct {
        return Some(format!("{}:{channel}", r.source));
    }
    let thread = r.thread.as_deref().filter(|t| !t.is_empty())?;
    Some(format!("{}:{channel}:{thread}", r.source))
}

/// What a merge made: the digest delivery (the latest constituent's event,
/// its trace and task id, with the digest as content) and its
/// `notifications_coalesced` event.
pub(crate) struct Merged {
    pub delivery: Delivery,
    pub event: Event,
}

/// Merges the tasks of one conversation (oldest first). `None` when fewer
/// than two can be read (the caller then handles them one by one).
pub(crate) fn merge(handle: &str, part: &[Delivery]) -> Option<Merged> {
    let mut read: Vec<(&Delivery, TaskRequest)> = part
        .iter()
        .filter_map(|d| TaskRequest::from_event(&d.event).ok().map(|r| (d, r)))
        .collect();
    if read.len() < 2 || read.len() != part.len() {
        return None;
    }
    read.sort_by_key(|(d, _)| (d.event.timestamp, d.event.id));
    let messages: Vec<CoalescedMessage> = read
        .iter()
        .map(|(d, r)| CoalescedMessage {
            event_id: d.event.id,
            task_id: d.event.task_id.clone(),
            sender: r.sender.clone(),
            content: r.content.clone(),
            url: r.url.clone(),
            at: d.event.timestamp,
        })
        .collect();
    let (latest_delivery, latest) = read.last()?;
    let key = request_key(latest).unwrap_or_default();
    let mut request = latest.clone();
    request.content = digest(&messages);
    request.coalesced = messages.clone();

    let mut event = (*latest_delivery.event).clone();
    event.payload = serde_json::to_value(&request).ok()?;
    // The deepest delegation of the burst: merging cannot lower the cap.
    event.delegation_depth = read
        .iter()
        .map(|(d, _)| d.event.delegation_depth)
        .max()
        .unwrap_or(event.delegation_depth);
    let first_at: DateTime<Utc> = messages.first().map_or(event.timestamp, |m| m.at);
    let last_at = messages.last().map_or(event.timestamp, |m| m.at);
    let coalesced = Event::new(EventType::NotificationsCoalesced, "engine")
        .with_summary(format!(
            "{} notifications coalesced for {handle} ({key})",
            messages.len()
        ))
        .with_agent_handle(handle)
        .with_trace(
            event
                .trace()
                .map_or_else(crewlet_core::TraceContext::new_root, |t| t.child()),
        )
        .with_payload(json!({
            "agent_handle": handle,
            "conversation_key": key,
            "notification_source": request.source,
            "count": messages.len(),
            "first_at": first_at,
            "last_at": last_at,
            "event_ids": messages.iter().map(|m| m.event_id).collect::<Vec<_>>(),
            "task_id": event.task_id,
        }));
    let mut coalesced = coalesced;
    coalesced.agent_id = event.agent_id.clone();
    coalesced.agent_role = event.agent_role.clone();
    let delivery = Delivery {
        event: std::sync::Arc::new(event),
        topic: latest_delivery.topic.clone(),
        group: latest_delivery.group.clone(),
        attempt: read.iter().map(|(d, _)| d.attempt).max().unwrap_or(1),
        dead_letter: None,
    };
    Some(Merged {
        delivery,
        event: coalesced,
    })
}

/// The terminal event of an earlier message of a merged task, in that
/// message's own trace: `task_completed` (or `task_failed`) like the merged
/// task's, with `merged_into` naming the task that did the work.
pub(crate) fn constituent_ended(message: &Event, outcome: &crewlet_turn::TurnOutcome) -> Event {
    let task = message.task_id.clone().unwrap_or_default();
    let handle = message.agent_handle().unwrap_or_default().to_owned();
    let (kind, payload, verb) = match &outcome.failure {
        None => (
            EventType::TaskCompleted,
            json!({
                "turn_id": outcome.turn_id,
                "decision": outcome.decision.as_str(),
                "final_artifact": outcome.final_artifact,
                "merged_into": outcome.task_id,
            }),
            "completed",
        ),
        Some(f) => (
            EventType::TaskFailed,
            json!({
                "turn_id": outcome.turn_id,
                "reason": f.reason.code(),
                "detail": f.detail,
                "will_retry": false,
                "merged_into": outcome.task_id,
            }),
            "failed",
        ),
    };
    let mut e = Event::new(kind, "engine")
        .with_summary(format!(
            "{handle} {verb} {task} (merged into {})",
            outcome.task_id
        ))
        .with_agent_handle(handle)
        .with_task(task)
        .with_trace(
            message
                .trace()
                .map_or_else(crewlet_core::TraceContext::new_root, |t| t.child()),
        )
        .with_payload(payload);
    e.agent_id = message.agent_id.clone();
    e.agent_role = message.agent_role.clone();
    e
}

/// The digest a seat reads: the earlier messages oldest first (an earlier
/// message byte-identical to a later one from the same sender collapses to
/// a note: the later copy is shown), then the latest in full.
pub(crate) fn digest(messages: &[CoalescedMessage]) -> String {
    let Some((latest, earlier)) = messages.split_last() else {
        return String::new();
    };
    let who = |m: &CoalescedMessage| {
        m.sender
            .as_deref()
            .map_or_else(|| "someone".to_owned(), |s| format!("@{s}"))
    };
    let mut out = format!(
        "{} messages arrived in this conversation since you last looked; answer them together.\n\nEarlier messages, oldest first:\n",
        messages.len()
    );
    for (i, m) in earlier.iter().enumerate() {
        let repeated = messages[i + 1..]
            .iter()
            .any(|later| later.sender == m.sender && later.content == m.content);
        out.push_str(&format!(
            "\n{}. {} at {}:\n",
            i + 1,
            who(m),
            m.at.format("%Y-%m-%d %H:%M:%S UTC")
        ));
        if repeated {
            out.push_str("(the same text again in a later message, shown there)\n");
            continue;
        }
        let mut body: String = m.content.chars().take(EARLIER_MAX_CHARS).collect();
        if m.content.chars().count() > EARLIER_MAX_CHARS {
            body.push_str(" [...]");
        }
        out.push_str(&body);
        out.push('\n');
        if let Some(url) = &m.url
            && !m.content.contains(url.as_str())
        {
            out.push_str(&format!("({url})\n"));
        }
    }
    out.push_str(&format!(
        "\nThe latest message, from {} at {}, in full:\n\n{}",
        who(latest),
        latest.at.format("%Y-%m-%d %H:%M:%S UTC"),
        latest.content
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewlet_core::AgentId;
    use crewlet_core::TraceContext;
    use crewlet_core::payload::TaskSeat;

    fn task(
        source: &str,
        channel: Option<&str>,
        thread: Option<&str>,
        sender: &str,
        text: &str,
    ) -> Event {
        let mut r = TaskRequest::new("eng", source, text);
        r.channel = channel.map(str::to_owned);
        r.thread = thread.map(str::to_owned);
        r.sender = Some(sender.to_owned());
        let seat = TaskSeat {
            agent_id: AgentId::for_seat("Co", "eng"),
            name: "Engineer",
            handle: "eng",
        };
        r.to_event(
            seat,
            &uuid::Uuid::now_v7().to_string(),
            source,
            TraceContext::new_root(),
        )
    }

    fn delivery(e: Event) -> Delivery {
        Delivery {
            event: std::sync::Arc::new(e),
            topic: "crewlet.agent.eng.inbox".into(),
            group: "g".into(),
            attempt: 1,
            dead_letter: None,
        }
    }

    #[test]
    fn keys_name_the_conversation_and_lone_requests_have_none() {
        let k = |e: &Event| conversation_key(e);
        assert_eq!(
            k(&task("github", Some("acme/api"), Some("7"), "ann", "x")).as_deref(),
            Some("github:acme/api:7")
        );
        assert_ne!(
            k(&task("github", Some("acme/api"), Some("7"), "ann", "x")),
            k(&task("github", Some("acme/api"), Some("8"), "ann", "x"))
        );
        assert_eq!(k(&task("api", Some("c"), Some("t"), "ann", "x")), None);
        assert_eq!(k(&task("schedule", Some("c"), Some("t"), "ann", "x")), None);
        assert_eq!(k(&task("slack", Some("C1"), None, "ann", "x")), None);
        assert_eq!(k(&Event::new(EventType::MessageSent, "x")), None);
    }

    #[test]
    fn a_merge_is_one_task_with_every_message_and_the_latest_in_full() {
        let part: Vec<Delivery> = [
            ("ann", "first comment"),
            ("bob", "+1"),
            ("ann", "please also fix the docs"),
            ("bob", "+1"),
            ("cid", "the latest, in full"),
        ]
        .iter()
        .map(|(who, text)| delivery(task("github", Some("acme/api"), Some("7"), who, text)))
        .collect();
        let merged = merge("eng", &part).unwrap_or_else(|| panic!("merged"));
        let request =
            TaskRequest::from_event(&merged.delivery.event).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(request.coalesced.len(), 5, "every constituent kept");
        assert_eq!(
            merged.delivery.event.task_id, part[4].event.task_id,
            "the latest's task id and trace"
        );
        assert_eq!(merged.delivery.event.trace_id, part[4].event.trace_id);
        let text = &request.content;
        let first = text.find("first comment").unwrap_or(usize::MAX);
        let docs = text.find("please also fix the docs").unwrap_or(usize::MAX);
        let latest = text.find("the latest, in full").unwrap_or(usize::MAX);
        assert!(
            first < docs && docs < latest && latest != usize::MAX,
            "{text}"
        );
        // bob's first "+1" repeats his later one: collapsed to a note.
        assert_eq!(text.matches("+1").count(), 1, "{text}");
        assert!(text.contains("the same text again"), "{text}");
        assert_eq!(merged.event.event_type, EventType::NotificationsCoalesced);
        assert_eq!(merged.event.payload["count"], 5);
        assert_eq!(
            merged.event.payload["conversation_key"],
            "github:acme/api:7"
        );
    }

    #[test]
    fn fewer_than_two_readable_tasks_are_not_merged() {
        let one = vec![delivery(task("github", Some("r"), Some("1"), "a", "x"))];
        assert!(merge("eng", &one).is_none());
        let mut broken = Event::new(EventType::TaskCreated, "x");
        broken.payload = json!({"nonsense": true});
        let two = vec![one[0].clone(), delivery(broken)];
        assert!(merge("eng", &two).is_none());
    }

    #[test]
    fn options_default_to_no_linger_and_twenty() {
        let o = batch_options(None, None);
        assert_eq!((o.linger, o.max_batch), (Duration::ZERO, 20));
        let o = batch_options(Some(2.5), Some(5));
        assert_eq!((o.linger, o.max_batch), (Duration::from_millis(2500), 5));
    }
}
