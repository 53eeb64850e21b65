//! `task_created`: the work a seat's inbox carries. The notification
//! router, the scheduler, the engine's `assign` and the API's
//! `POST /agents/{handle}/tasks` all write it; the seat's inbox handler
//! reads it.

use serde::{Deserialize, Serialize};

use crate::{AgentId, Event, EventType, TraceContext};

/// How urgent a task is, as its sender says (`normal` when unsaid).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskPriority {
    Low,
    #[default]
    Normal,
    High,
    Urgent,
}

impl TaskPriority {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Normal => "normal",
            Self::High => "high",
            Self::Urgent => "urgent",
        }
    }
}

/// What a seat is asked to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRequest {
    /// The seat that does the work.
    pub handle: String,
    /// The request as the seat reads it.
    pub content: String,
    /// Where it came from: `slack`, `github`, `schedule`, `api`, ...
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// Chat channel or project the reply belongs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Conversation inside the channel (Slack thread ts, issue number, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Said in a direct message channel: the whole channel is one
    /// conversation (for coalescing).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub direct: bool,
    /// The routing rule or schedule that chose the seat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Time allowed for the turn (a schedule's `timeout_seconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// A short title, when the sender gave one (the API's tasks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// How urgent the sender says it is; absent means `normal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<TaskPriority>,
    /// A task merged from several of one conversation (inbox coalescing):
    /// every message it was made of, oldest first, in full (the learning
    /// workers read each sender).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coalesced: Vec<CoalescedMessage>,
    /// The colleague's question this task answers (`a2a_ask`): the
    /// answering turn's result goes back to the asker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<AskRef>,
}

/// A colleague's question that a task answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AskRef {
    pub ask_id: uuid::Uuid,
    /// The seat that asked (and waits).
    pub asker: String,
    pub question: String,
    /// Every seat waiting on this answer, first asker first (the asker
    /// last): a seat in it is never asked again down the line (a cycle).
    #[serde(default)]
    pub chain: Vec<String>,
    /// Delegation depth of the answering turn (the asker's plus one).
    pub depth: u32,
}

/// One message merged into a digest task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoalescedMessage {
    /// The `task_created` event it arrived as.
    pub event_id: uuid::Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub at: chrono::DateTime<chrono::Utc>,
}

/// The seat a task is for, as its `task_created` event names it.
#[derive(Clone, Copy, Debug)]
pub struct TaskSeat<'a> {
    pub agent_id: AgentId,
    /// The seat's name (the event's `agent_role`).
    pub name: &'a str,
    pub handle: &'a str,
}

impl TaskRequest {
    pub fn new(
        handle: impl Into<String>,
        source: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            handle: handle.into(),
            content: content.into(),
            source: source.into(),
            sender: None,
            channel: None,
            thread: None,
            url: None,
            direct: false,
            reason: None,
            timeout_seconds: None,
            title: None,
            priority: None,
            coalesced: Vec::new(),
            ask: None,
        }
    }

    /// The `task_created` event for `seat`, in `trace` (the seat's turn
    /// nests under it). `task_id` names the task in every event of the
    /// turn; `source` is the event's source (the component posting it).
    pub fn to_event(
        &self,
        seat: TaskSeat<'_>,
        task_id: &str,
        source: &str,
        trace: TraceContext,
    ) -> Event {
        let what = self.title.as_deref().unwrap_or(&self.content);
        let mut summary: String = what.chars().take(120).collect();
        if what.chars().count() > 120 {
            summary.push_str("...");
        }
        let mut event = Event::new(EventType::TaskCreated, source)
            .with_summary(format!("task for {}: {summary}", seat.handle))
            .with_agent(seat.agent_id, seat.name)
            .with_task(task_id)
            .with_trace(trace)
            .with_agent_handle(seat.handle)
            .with_tag("task_source", self.source.as_str())
            .with_payload(serde_json::to_value(self).unwrap_or_default());
        if let Some(ask) = &self.ask {
            event = event.with_delegation_depth(ask.depth);
        }
        if let Some(priority) = self.priority {
            event = event.with_tag("priority", priority.as_str());
        }
        if let Some(channel) = &self.channel {
            event = event.with_channel(channel.as_str());
        }
        if let Some(sender) = &self.sender {
            event = event.with_sender(sender.as_str());
        }
        event
    }

    /// Reads the request of an inbox event.
    pub fn from_event(event: &Event) -> Result<Self, serde_json::Error> {
        Self::deserialize(&event.payload)
    }

    /// What the seat reads: the title and priority when given, the
    /// content, and the link when the content does not already hold it.
    pub fn text(&self) -> String {
        let mut text = String::new();
        if let Some(title) = &self.title {
            text.push_str(title);
            text.push_str("\n\n");
        }
        if let Some(priority) = self.priority.filter(|p| *p != TaskPriority::Normal) {
            text.push_str(&format!("Priority: {}\n\n", priority.as_str()));
        }
        text.push_str(&self.content);
        if let Some(url) = &self.url
            && !self.content.contains(url.as_str())
        {
            text.push_str(&format!("\n\nLink: {url}"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_requests_read_without_title_or_priority() {
        let event = Event::new(EventType::TaskCreated, "t").with_payload(serde_json::json!({
            "handle": "eng", "content": "fix it", "source": "slack",
            "url": "https://x/1"
        }));
        let r = TaskRequest::from_event(&event).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.title, None);
        assert_eq!(r.priority, None);
        assert_eq!(r.text(), "fix it\n\nLink: https://x/1");
    }

    #[test]
    fn title_and_priority_lead_the_text_and_the_event() {
        let mut r = TaskRequest::new("eng", "api", "Rotate the staging keys.");
        r.title = Some("Key rotation".into());
        r.priority = Some(TaskPriority::High);
        assert_eq!(
            r.text(),
            "Key rotation\n\nPriority: high\n\nRotate the staging keys."
        );
        let seat = TaskSeat {
            agent_id: AgentId::for_seat("T", "eng"),
            name: "Engineer",
            handle: "eng",
        };
        let e = r.to_event(seat, "t-1", "api", TraceContext::new_root());
        assert_eq!(e.summary, "task for eng: Key rotation");
        assert_eq!(e.tags.get("priority").map(String::as_str), Some("high"));
        assert_eq!(
            TaskRequest::from_event(&e).unwrap_or_else(|e| panic!("{e}")),
            r
        );
        r.priority = Some(TaskPriority::Normal);
        assert!(!r.text().contains("Priority"));
    }
}
