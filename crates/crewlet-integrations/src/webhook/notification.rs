use std::fmt;

use crewlet_core::{Event, EventType};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a webhook came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Slack,
    Github,
    Gitlab,
    Plane,
    Jira,
    Confluence,
    /// Read over each seat's websocket by the engine, not a webhook.
    Mattermost,
}

impl Source {
    pub const ALL: [Source; 7] = [
        Source::Slack,
        Source::Github,
        Source::Gitlab,
        Source::Plane,
        Source::Jira,
        Source::Confluence,
        Source::Mattermost,
    ];

    /// The name used in webhook URLs (`/webhooks/{source}`), dedupe rows and events.
    pub fn as_str(&self) -> &'static str {
        match self {
            Source::Slack => "slack",
            Source::Github => "github",
            Source::Gitlab => "gitlab",
            Source::Plane => "plane",
            Source::Jira => "jira",
            Source::Confluence => "confluence",
            Source::Mattermost => "mattermost",
        }
    }

    pub fn parse(name: &str) -> Option<Source> {
        Source::ALL
            .into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One verified inbound event in the shape the router reads, whatever the
/// source. Identities (`sender`, `assignees`, `mentions`) are in the source's
/// own terms (Slack user ids, GitHub/GitLab logins, Plane user ids, Atlassian
/// account ids); the router maps them to seats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub source: Source,
    /// What happened, `{object}.{action}` where the source has actions, e.g.
    /// `issues.opened`, `issue_comment.created`, `note.merge_request`,
    /// `message`, `app_mention`, `comment_created`.
    pub kind: String,
    /// Same value for every retry of one delivery: the dedupe key with `source`.
    pub delivery_key: String,
    /// The Slack channel id, repository (`owner/name`), GitLab project path,
    /// Plane project, Jira project key or Confluence space key.
    pub channel_or_project: String,
    /// The conversation inside it: Slack root `ts` (the message's own `ts`
    /// for a top-level message), issue or merge request number, Jira issue
    /// key, Plane work item id, Confluence page id.
    pub thread: Option<String>,
    pub sender: Option<String>,
    /// The sender is a bot or app (including other agent seats).
    #[serde(default)]
    pub sender_is_bot: bool,
    /// A direct (or group direct) message channel: the whole channel is
    /// one conversation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub direct: bool,
    /// Issue, pull request or page title, where there is one.
    #[serde(default)]
    pub title: Option<String>,
    /// The message, comment or description body.
    pub text: String,
    /// Who the item is assigned to; the subject of an `assigned` or
    /// `review_requested` action comes first.
    pub assignees: Vec<String>,
    /// Who the text addresses, in order of first appearance.
    pub mentions: Vec<String>,
    pub url: Option<String>,
    /// The whole payload as received.
    pub raw: Value,
}

impl Notification {
    /// The `raw_webhook` event the API publishes on
    /// `crewlet.notifications.inbound`; the payload is this notification.
    pub fn to_event(&self) -> Event {
        let mut summary = format!(
            "{} {} in {}",
            self.source, self.kind, self.channel_or_project
        );
        if let Some(thread) = &self.thread {
            summary.push_str(&format!(" ({thread})"));
        }
        let mut event = Event::new(EventType::RawWebhook, "api.webhooks")
            .with_summary(summary)
            .with_channel(self.channel_or_project.clone())
            .with_tag("webhook_source", self.source.as_str())
            .with_tag("delivery_key", self.delivery_key.clone())
            .with_payload(serde_json::to_value(self).unwrap_or(Value::Null));
        if let Some(sender) = &self.sender {
            event = event.with_sender(sender.clone());
        }
        event
    }
}

/// What a verified webhook asks of the API.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// Slack `url_verification`: answer 200 with this challenge, publish nothing.
    Challenge(String),
    /// Publish for routing; answer 200.
    Notification(Box<Notification>),
    /// Verified but nothing to route (a ping, an unsupported event, a bot's
    /// own message): answer 200 so the source does not retry.
    Ignored {
        delivery_key: Option<String>,
        reason: String,
    },
}

impl Inbound {
    pub(crate) fn ignored(delivery_key: Option<String>, reason: impl Into<String>) -> Self {
        Inbound::Ignored {
            delivery_key,
            reason: reason.into(),
        }
    }

    /// The notification, if this is one.
    pub fn notification(&self) -> Option<&Notification> {
        match self {
            Inbound::Notification(n) => Some(n),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn source_names_round_trip() {
        for s in Source::ALL {
            assert_eq!(Source::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
        }
        assert_eq!(Source::parse("GitHub"), Some(Source::Github));
        assert_eq!(Source::parse("bitbucket"), None);
    }

    #[test]
    fn notification_becomes_a_raw_webhook_event() {
        let n = Notification {
            source: Source::Github,
            kind: "issues.opened".into(),
            delivery_key: "d-1".into(),
            channel_or_project: "acme/app".into(),
            thread: Some("7".into()),
            sender: Some("octocat".into()),
            sender_is_bot: false,
            direct: false,
            title: Some("Bug".into()),
            text: "it breaks".into(),
            assignees: vec![],
            mentions: vec![],
            url: None,
            raw: json!({}),
        };
        let e = n.to_event();
        assert_eq!(e.event_type, EventType::RawWebhook);
        assert_eq!(e.channel_id.as_deref(), Some("acme/app"));
        assert_eq!(e.sender.as_deref(), Some("octocat"));
        assert_eq!(e.tags["delivery_key"], "d-1");
        let back: Notification = serde_json::from_value(e.payload).unwrap();
        assert_eq!(back, n);
    }
}
