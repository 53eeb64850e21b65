//! What a post means to one seat: whether it wakes the seat, and the
//! [`Notification`] it becomes. Pure: the socket loop feeds it posts from
//! the live websocket and from the backfill alike.

use serde_json::json;

use super::wire::{Post, is_direct};
use crate::webhook::{Notification, Source};

/// Who a seat is on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatAccount {
    pub handle: String,
    pub user_id: String,
    pub username: String,
}

/// Why a post reaches a seat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressed {
    /// A direct or group message channel.
    Direct,
    /// The seat is named (`@username`), or the server says it is a target
    /// for something the text does not show (a group mention).
    Mention,
    /// Only `@all`, `@channel` or `@here` address it.
    Collective,
    /// A top-level post in a channel the seat is a member of.
    Channel,
    /// A reply in a thread the seat follows.
    Thread,
}

impl Addressed {
    pub fn as_str(&self) -> &'static str {
        match self {
            Addressed::Direct => "dm",
            Addressed::Mention => "mention",
            Addressed::Collective => "collective",
            Addressed::Channel => "channel",
            Addressed::Thread => "thread_follow",
        }
    }

    /// Spoken to personally: what `typing_status: addressed` shows for.
    pub fn is_personal(&self) -> bool {
        matches!(
            self,
            Addressed::Direct | Addressed::Mention | Addressed::Thread
        )
    }
}

/// What one post is to one seat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Deliver(Addressed),
    /// A reply in a thread: delivered only if the seat follows it.
    IfFollowing,
    /// The seat's own post: never wakes it; a reply records participation.
    Own,
    Skip(String),
}

const COLLECTIVE: [&str; 3] = ["all", "channel", "here"];

/// Whether `text` names `@username` (case-insensitive, not inside a word
/// or an email address).
pub fn names(text: &str, username: &str) -> bool {
    crate::webhook::mentions::at_handles(text)
        .iter()
        .any(|h| h.eq_ignore_ascii_case(username))
}

fn collective(text: &str) -> bool {
    crate::webhook::mentions::at_handles(text)
        .iter()
        .any(|h| COLLECTIVE.iter().any(|c| h.eq_ignore_ascii_case(c)))
}

/// Decides what `post` is to `seat`. `server_mentions` is the websocket's
/// per-connection mention list (`None` for a backfilled post, whose text
/// alone then decides).
pub fn classify(
    seat: &SeatAccount,
    post: &Post,
    channel_type: &str,
    server_mentions: Option<&[String]>,
) -> Verdict {
    if post.user_id == seat.user_id {
        return Verdict::Own;
    }
    if post.kind.starts_with("system_") {
        return Verdict::Skip(format!("a system post ({})", post.kind));
    }
    if post.delete_at != 0 {
        return Verdict::Skip("a deleted post".into());
    }
    if post.message.trim().is_empty() && post.file_ids.is_empty() {
        return Verdict::Skip("an empty post".into());
    }
    if is_direct(channel_type) {
        return Verdict::Deliver(Addressed::Direct);
    }
    let named = names(&post.message, &seat.username);
    let targeted = match server_mentions {
        Some(list) => list.iter().any(|m| m == &seat.user_id),
        None => named || collective(&post.message),
    };
    if targeted {
        // The list cannot tell a broadcast from being named; the text can.
        if named || !collective(&post.message) {
            return Verdict::Deliver(Addressed::Mention);
        }
        return Verdict::Deliver(Addressed::Collective);
    }
    if !post.root_id.is_empty() {
        return Verdict::IfFollowing;
    }
    Verdict::Deliver(Addressed::Channel)
}

/// A post that reaches a seat, with what the notification needs.
#[derive(Debug, Clone, PartialEq)]
pub struct SeatPost {
    pub post: Post,
    pub channel_type: String,
    pub channel_name: String,
    /// The author's username (without `@`).
    pub sender: String,
    /// Re-read over REST after a reconnect, not pushed by the socket.
    pub backfilled: bool,
}

impl SeatPost {
    /// The notification for `seat`, addressed as `why`. `base` is the
    /// server URL and `team` the team name (for the permalink).
    pub fn notification(
        &self,
        seat: &SeatAccount,
        why: Addressed,
        base: &str,
        team: &str,
    ) -> Notification {
        let p = &self.post;
        let direct = is_direct(&self.channel_type);
        let mut mentions = crate::webhook::mentions::at_handles(&p.message);
        if why == Addressed::Mention
            && !mentions
                .iter()
                .any(|m| m.eq_ignore_ascii_case(&seat.username))
        {
            mentions.push(seat.username.clone());
        }
        let text = if p.message.trim().is_empty() {
            format!(
                "(shared {} file{})",
                p.file_ids.len(),
                if p.file_ids.len() == 1 { "" } else { "s" }
            )
        } else {
            p.message.clone()
        };
        Notification {
            source: Source::Mattermost,
            kind: "posted".into(),
            // Every seat in a channel gets its own copy of a post.
            delivery_key: format!("{}:{}", seat.handle, p.id),
            channel_or_project: p.channel_id.clone(),
            thread: Some(p.thread_root().to_owned()),
            sender: Some(self.sender.clone()).filter(|s| !s.is_empty()),
            sender_is_bot: p.from_bot(),
            title: None,
            text,
            assignees: Vec::new(),
            mentions,
            url: Some(format!("{base}/{team}/pl/{}", p.id)),
            direct,
            raw: json!({
                "post": p,
                "channel_type": self.channel_type,
                "channel_name": self.channel_name,
                "addressed": why.as_str(),
                "backfilled": self.backfilled,
                "seat": seat.handle,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat() -> SeatAccount {
        SeatAccount {
            handle: "swe".into(),
            user_id: "bot1".into(),
            username: "agent-swe".into(),
        }
    }

    fn post(user: &str, text: &str, root: &str) -> Post {
        Post {
            id: "p1".into(),
            user_id: user.into(),
            channel_id: "c1".into(),
            root_id: root.into(),
            message: text.into(),
            create_at: 1,
            ..Post::default()
        }
    }

    #[test]
    fn a_seat_is_woken_by_dms_mentions_top_level_posts_and_followed_threads_only() {
        let s = seat();
        let mine = vec!["bot1".to_owned()];
        assert_eq!(
            classify(&s, &post("u", "hi", ""), "D", None),
            Verdict::Deliver(Addressed::Direct)
        );
        assert_eq!(
            classify(&s, &post("u", "@agent-swe look", "r"), "O", Some(&mine)),
            Verdict::Deliver(Addressed::Mention)
        );
        assert_eq!(
            classify(&s, &post("u", "@channel standup", "r"), "O", Some(&mine)),
            Verdict::Deliver(Addressed::Collective)
        );
        // A group mention the text cannot show still counts as a mention.
        assert_eq!(
            classify(&s, &post("u", "@backend please", "r"), "O", Some(&mine)),
            Verdict::Deliver(Addressed::Mention)
        );
        assert_eq!(
            classify(&s, &post("u", "hello all", ""), "O", Some(&[])),
            Verdict::Deliver(Addressed::Channel)
        );
        assert_eq!(
            classify(&s, &post("u", "and then", "r"), "O", None),
            Verdict::IfFollowing
        );
        // Backfilled: the text decides.
        assert_eq!(
            classify(&s, &post("u", "thanks @Agent-SWE.", "r"), "P", None),
            Verdict::Deliver(Addressed::Mention)
        );
        assert_eq!(
            classify(&s, &post("u", "mail agent-swe@x.io", "r"), "P", None),
            Verdict::IfFollowing
        );
    }

    #[test]
    fn own_system_deleted_and_empty_posts_never_wake_the_seat() {
        let s = seat();
        assert_eq!(
            classify(&s, &post("bot1", "@agent-swe me", ""), "D", None),
            Verdict::Own
        );
        let mut join = post("u", "u joined", "");
        join.kind = "system_join_channel".into();
        assert!(matches!(classify(&s, &join, "O", None), Verdict::Skip(_)));
        let mut gone = post("u", "x", "");
        gone.delete_at = 9;
        assert!(matches!(classify(&s, &gone, "O", None), Verdict::Skip(_)));
        assert!(matches!(
            classify(&s, &post("u", "  ", ""), "O", None),
            Verdict::Skip(_)
        ));
        let mut upload = post("u", "", "");
        upload.file_ids = vec!["f1".into(), "f2".into()];
        assert_eq!(
            classify(&s, &upload, "O", None),
            Verdict::Deliver(Addressed::Channel)
        );
        let n = SeatPost {
            post: upload,
            channel_type: "O".into(),
            channel_name: "eng".into(),
            sender: "jane".into(),
            backfilled: false,
        }
        .notification(&s, Addressed::Channel, "http://mm", "acme");
        assert_eq!(n.text, "(shared 2 files)");
    }

    #[test]
    fn the_notification_keys_each_seat_copy_and_keeps_a_dm_as_one_conversation() {
        let s = seat();
        let sp = |ct: &str, root: &str| SeatPost {
            post: post("u", "@agent-swe hi", root),
            channel_type: ct.into(),
            channel_name: "eng".into(),
            sender: "jane".into(),
            backfilled: true,
        };
        let n = sp("O", "").notification(&s, Addressed::Mention, "http://mm", "acme");
        assert_eq!(n.source, Source::Mattermost);
        assert_eq!(n.delivery_key, "swe:p1");
        assert_eq!(n.thread.as_deref(), Some("p1"));
        assert_eq!(n.sender.as_deref(), Some("jane"));
        assert_eq!(n.url.as_deref(), Some("http://mm/acme/pl/p1"));
        assert!(n.mentions.contains(&"agent-swe".to_owned()));
        assert!(!n.direct);
        assert_eq!(n.raw["addressed"], "mention");
        let dm = sp("D", "").notification(&s, Addressed::Direct, "http://mm", "acme");
        assert!(dm.direct);
        let reply = sp("O", "root").notification(&s, Addressed::Thread, "http://mm", "acme");
        assert_eq!(reply.thread.as_deref(), Some("root"));
    }
}
