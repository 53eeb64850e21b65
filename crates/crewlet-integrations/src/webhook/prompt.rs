//! How a notification reads to the seat it wakes: per source, who did
//! what, where, what the text says, and how to answer there. This is the
//! trigger the Plan phase starts from, so it names the ids a reply needs
//! (the post, the issue number, the thread) and never asks the model to
//! guess them.

use serde_json::Value;

use super::{Notification, Source};

/// The trigger text of `n` (`body` is the delivery's payload).
pub fn render(n: &Notification, body: &Value) -> String {
    let mut out = headline(n, body);
    if let Some(title) = n.title.as_deref().filter(|t| !t.trim().is_empty()) {
        out.push_str(&format!("\nTitle: {}", title.trim()));
    }
    if let Some(url) = &n.url {
        out.push_str(&format!("\nLink: {url}"));
    }
    let text = n.text.trim();
    if !text.is_empty() {
        out.push_str("\n\n");
        out.push_str(text);
    }
    let hint = reply_hint(n, body);
    if !hint.is_empty() {
        out.push_str("\n\n");
        out.push_str(&hint);
    }
    out
}

fn who(n: &Notification) -> String {
    match (&n.sender, n.source) {
        (Some(s), Source::Slack) => format!("<@{s}>"),
        (Some(s), _) => format!("@{s}"),
        (None, _) => "someone".into(),
    }
}

/// `acme/app#7`, `group/project!7`, `PROJ-12`, ...
fn item(n: &Notification) -> String {
    let thread = n.thread.as_deref().unwrap_or_default();
    let on_mr = n.kind.contains("merge_request");
    match n.source {
        Source::Github if !thread.is_empty() => format!("{}#{thread}", n.channel_or_project),
        Source::Gitlab if !thread.is_empty() => {
            let sigil = if on_mr { '!' } else { '#' };
            format!("{}{sigil}{thread}", n.channel_or_project)
        }
        Source::Jira | Source::Plane | Source::Confluence if !thread.is_empty() => {
            format!("{thread} in {}", n.channel_or_project)
        }
        _ => n.channel_or_project.clone(),
    }
}

/// `issues.opened` -> `opened`, `issue_comment.created` -> `commented on`.
fn action(kind: &str) -> String {
    let (object, verb) = kind.split_once('.').unwrap_or((kind, ""));
    match (object, verb) {
        (_, "opened") | (_, "created") if object.contains("comment") || object == "note" => {
            "commented on".into()
        }
        ("note", _) => "commented on".into(),
        (o, v) if o.contains("comment") => format!("{v} a comment on"),
        (_, "review_requested") => "requested a review from you on".into(),
        (_, "assigned") => "assigned you".into(),
        (_, v) if !v.is_empty() => format!("{} {}", v.replace('_', " "), object.replace('_', " ")),
        (o, _) => o.replace('_', " "),
    }
}

fn headline(n: &Notification, body: &Value) -> String {
    let from = who(n);
    match n.source {
        Source::Mattermost => {
            let channel = body
                .get("channel_name")
                .and_then(Value::as_str)
                .unwrap_or(&n.channel_or_project);
            let addressed = body
                .get("addressed")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let why = match addressed {
                "dm" => format!("Mattermost: a direct message from {from}"),
                "mention" => format!("Mattermost: {from} mentioned you in ~{channel}"),
                "collective" => format!("Mattermost: {from} addressed everyone in ~{channel}"),
                "thread_follow" => {
                    format!("Mattermost: {from} replied in a thread you follow in ~{channel}")
                }
                _ => format!("Mattermost: {from} posted in ~{channel}"),
            };
            if n.sender_is_bot {
                format!("{why} (a bot)")
            } else {
                why
            }
        }
        Source::Slack => {
            let place = if n.direct {
                "a direct message".to_owned()
            } else {
                format!("channel {}", n.channel_or_project)
            };
            format!("Slack: {from} wrote in {place}")
        }
        Source::Github | Source::Gitlab | Source::Jira | Source::Plane | Source::Confluence => {
            let name = match n.source {
                Source::Github => "GitHub",
                Source::Gitlab => "GitLab",
                Source::Jira => "Jira",
                Source::Plane => "Plane",
                _ => "Confluence",
            };
            format!("{name}: {from} {} {}", action(&n.kind), item(n))
        }
    }
}

fn reply_hint(n: &Notification, body: &Value) -> String {
    match n.source {
        Source::Mattermost => {
            let post = body
                .get("post")
                .and_then(|p| p.get("id"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            format!(
                "To answer, reply in its thread with `mattermost_reply` (post_id `{post}`); react with `mattermost_react`."
            )
        }
        Source::Slack => match &n.thread {
            Some(ts) => format!(
                "To answer, reply in the thread: channel `{}`, thread_ts `{ts}`.",
                n.channel_or_project
            ),
            None => format!("To answer, post in channel `{}`.", n.channel_or_project),
        },
        Source::Github | Source::Gitlab => format!(
            "To answer, comment on {} with your own account, not in chat.",
            item(n)
        ),
        Source::Jira | Source::Plane => match &n.thread {
            Some(t) => format!("To answer, comment on work item {t} with your own account."),
            None => String::new(),
        },
        Source::Confluence => match &n.thread {
            Some(t) => format!("To answer, comment on page {t} with your own account."),
            None => String::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn n(source: Source, kind: &str, channel: &str, thread: Option<&str>) -> Notification {
        Notification {
            source,
            kind: kind.into(),
            delivery_key: "d".into(),
            channel_or_project: channel.into(),
            thread: thread.map(Into::into),
            sender: Some("jane".into()),
            sender_is_bot: false,
            direct: false,
            title: Some("Crash on login".into()),
            text: "It crashes, please look.".into(),
            assignees: vec![],
            mentions: vec![],
            url: Some("https://x/7".into()),
            raw: Value::Null,
        }
    }

    #[test]
    fn each_source_says_who_what_where_and_how_to_answer() {
        let gh = render(
            &n(
                Source::Github,
                "issue_comment.created",
                "acme/app",
                Some("7"),
            ),
            &Value::Null,
        );
        assert!(
            gh.starts_with("GitHub: @jane commented on acme/app#7"),
            "{gh}"
        );
        assert!(gh.contains("Title: Crash on login") && gh.contains("Link: https://x/7"));
        assert!(gh.contains("It crashes") && gh.contains("comment on acme/app#7"));

        let gl = render(
            &n(Source::Gitlab, "note.merge_request", "g/p", Some("3")),
            &Value::Null,
        );
        assert!(gl.starts_with("GitLab: @jane commented on g/p!3"), "{gl}");

        let opened = render(
            &n(Source::Github, "issues.opened", "acme/app", Some("8")),
            &Value::Null,
        );
        assert!(
            opened.starts_with("GitHub: @jane opened issues acme/app#8"),
            "{opened}"
        );

        let jira = render(
            &n(Source::Jira, "comment_created", "PROJ", Some("PROJ-1")),
            &Value::Null,
        );
        assert!(
            jira.contains("PROJ-1 in PROJ") && jira.contains("work item PROJ-1"),
            "{jira}"
        );

        let mut dm = n(Source::Slack, "message", "D1", Some("17.1"));
        dm.direct = true;
        let slack = render(&dm, &Value::Null);
        assert!(
            slack.starts_with("Slack: <@jane> wrote in a direct message"),
            "{slack}"
        );
        assert!(slack.contains("thread_ts `17.1`"));

        let mm = render(
            &n(Source::Mattermost, "posted", "c1", Some("root")),
            &json!({"channel_name": "engineering", "addressed": "mention", "post": {"id": "p9"}}),
        );
        assert!(
            mm.starts_with("Mattermost: @jane mentioned you in ~engineering"),
            "{mm}"
        );
        assert!(mm.contains("`mattermost_reply` (post_id `p9`)"), "{mm}");
    }
}
