//! Every topic and consumer-group name Crewlet uses, each defined once.
//!
//! Topics are dot-separated subjects (`crewlet.agent.eng.inbox`); the Pulsar
//! backend prefixes them with `persistent://{tenant}/{namespace}/`. Stream
//! patterns match them segment by segment (`*` one segment, `>` the rest).

use crewlet_core::EventType;

use crate::QueueError;

/// A durable route: the topic and the consumer group that owns its work.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    pub topic: String,
    pub group: String,
}

/// Verified webhooks and chat messages, consumed by the notification router.
pub const NOTIFICATIONS_INBOUND: &str = "crewlet.notifications.inbound";
/// The group of the notification router on [`NOTIFICATIONS_INBOUND`].
pub const NOTIFICATIONS_INBOUND_GROUP: &str = "notification-svc-inbound";
/// Outbound notifications (replies to chat, tracker comments) for the delivery service.
pub const NOTIFICATIONS_OUTBOUND: &str = "crewlet.notifications.outbound";
/// The group of the delivery service on [`NOTIFICATIONS_OUTBOUND`].
pub const NOTIFICATIONS_OUTBOUND_GROUP: &str = "notification-svc-outbound";
/// Events an inline event-store write could not store, held on the broker
/// until the database takes them (the event archive's outbox).
pub const EVENT_STORE_OUTBOX: &str = "crewlet.store.outbox";
/// The group that stores events from [`EVENT_STORE_OUTBOX`] and every
/// `raw_webhook` on [`NOTIFICATIONS_INBOUND`].
pub const EVENT_STORE_GROUP: &str = "event-store";
/// Every engine event, for stream subscribers (the dashboard's live view).
pub const ALL_EVENTS_PATTERN: &str = "crewlet.events.>";
/// The durable group that keeps dead letters on every `dlq-…` topic until an
/// operator (or a tool) drains them with that group.
pub const DEAD_LETTER_GROUP: &str = "dead-letters";

/// Work for one seat: `crewlet.agent.{handle}.inbox`, group `agent-{handle}`.
/// Durable: mail waits while the seat's engine is down.
pub fn agent_inbox(handle: &str) -> Route {
    Route {
        topic: format!("crewlet.agent.{handle}.inbox"),
        group: format!("agent-{handle}"),
    }
}

/// Control commands for one seat (pause, resume, reload):
/// `crewlet.agent.{handle}.control`, group `agent-{handle}-control`.
pub fn agent_control(handle: &str) -> Route {
    Route {
        topic: format!("crewlet.agent.{handle}.control"),
        group: format!("agent-{handle}-control"),
    }
}

/// Where events of one type are published: `crewlet.events.{event_type}`.
/// Types with a dot (`turn.guard_breach`) add segments, so match every event
/// with [`ALL_EVENTS_PATTERN`] rather than `crewlet.events.*`.
pub fn events(event_type: &EventType) -> String {
    format!("crewlet.events.{}", event_type.as_str())
}

/// Where messages of `(topic, group)` go after the redelivery cap: `dlq-{topic}-{group}`.
pub fn dlq(topic: &str, group: &str) -> String {
    format!("dlq-{topic}-{group}")
}

/// Characters Pulsar accepts in a topic's local name, and that we accept everywhere
/// so that the memory broker refuses exactly what Pulsar refuses.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '=' | ':')
}

/// Checks a topic name: non-empty, `[A-Za-z0-9_.=:-]`, no empty segment.
pub fn validate_topic(topic: &str) -> Result<(), QueueError> {
    let bad = |reason| {
        Err(QueueError::InvalidTopic {
            topic: topic.to_owned(),
            reason,
        })
    };
    if topic.is_empty() {
        return bad("topic is empty");
    }
    if !topic.chars().all(is_name_char) {
        return bad("only letters, digits and `_ - . = :` are allowed");
    }
    if topic.split('.').any(str::is_empty) {
        return bad("empty segment (leading, trailing or doubled `.`)");
    }
    Ok(())
}

/// Checks a consumer group name (same alphabet as topics).
pub fn validate_group(topic: &str, group: &str) -> Result<(), QueueError> {
    let bad = |reason| {
        Err(QueueError::InvalidGroup {
            topic: topic.to_owned(),
            group: group.to_owned(),
            reason,
        })
    };
    if group.is_empty() {
        return bad("group is empty");
    }
    if !group.chars().all(is_name_char) {
        return bad("only letters, digits and `_ - . = :` are allowed");
    }
    Ok(())
}

/// Posts a `task_created` event for seat `handle`: first on its durable
/// inbox (the work is accepted once this returns `Ok`), then, with the
/// same id, on the event stream, where live views and the event store see
/// it. The mirror is best effort: a failure there is logged, the task is
/// posted all the same.
pub async fn post_task(
    queue: &dyn crate::EventQueue,
    handle: &str,
    task: std::sync::Arc<crewlet_core::Event>,
) -> Result<(), crate::QueueError> {
    queue
        .publish_shared(&agent_inbox(handle).topic, task.clone())
        .await?;
    let (id, kind) = (task.id, task.event_type.clone());
    if let Err(e) = queue.publish_shared(&events(&kind), task).await {
        tracing::warn!(event_id = %id, event_type = %kind, error = %e,
            "task posted, but its copy on the event stream was refused");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_architecture_table() {
        assert_eq!(
            agent_inbox("eng"),
            Route {
                topic: "crewlet.agent.eng.inbox".into(),
                group: "agent-eng".into()
            }
        );
        assert_eq!(agent_control("eng").topic, "crewlet.agent.eng.control");
        assert_eq!(agent_control("eng").group, "agent-eng-control");
        assert_eq!(
            events(&EventType::TaskStarted),
            "crewlet.events.task_started"
        );
        assert_eq!(
            dlq("crewlet.agent.eng.inbox", "agent-eng"),
            "dlq-crewlet.agent.eng.inbox-agent-eng"
        );
        assert_eq!(NOTIFICATIONS_INBOUND, "crewlet.notifications.inbound");
        assert_eq!(NOTIFICATIONS_INBOUND_GROUP, "notification-svc-inbound");
    }

    #[test]
    fn every_helper_makes_valid_names() {
        for t in [
            agent_inbox("eng-lead").topic,
            agent_control("eng_2").topic,
            events(&EventType::TaskStarted),
            dlq("crewlet.agent.eng.inbox", "agent-eng"),
            NOTIFICATIONS_OUTBOUND.to_owned(),
        ] {
            assert!(validate_topic(&t).is_ok(), "{t}");
        }
    }

    #[test]
    fn bad_names_are_refused_with_the_name() {
        for t in ["", "a..b", ".a", "a.", "a/b", "a b", "persistent://x"] {
            let err = validate_topic(t)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(&format!("`{t}`")), "{t}: {err}");
        }
        assert!(validate_group("t", "").is_err());
        assert!(validate_group("t", "a/b").is_err());
        assert!(validate_group("t", "agent-eng").is_ok());
    }
}
