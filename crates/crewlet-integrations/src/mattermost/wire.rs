//! The JSON shapes of Mattermost's API v4 and websocket this crate reads
//! and writes. Unknown fields are ignored; missing ones take their zero
//! value, as Mattermost omits empty fields freely.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A user or bot account (`GET /users/me`, `/users/{id}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct User {
    pub id: String,
    pub username: String,
    pub is_bot: bool,
    /// Space-separated roles: `system_admin system_user`.
    pub roles: String,
    pub delete_at: i64,
}

impl User {
    pub fn is_admin(&self) -> bool {
        self.roles.split_whitespace().any(|r| r == "system_admin")
    }
}

/// A team (`GET /teams/name/{name}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Team {
    pub id: String,
    pub name: String,
    pub display_name: String,
}

/// A channel. `type`: `O` public, `P` private, `D` direct, `G` group DM.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Channel {
    pub id: String,
    pub team_id: String,
    pub name: String,
    pub display_name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub last_post_at: i64,
}

impl Channel {
    /// A direct or group message channel: nobody else the message could be for.
    pub fn is_direct(&self) -> bool {
        is_direct(&self.kind)
    }
}

/// `D` or `G`.
pub fn is_direct(channel_type: &str) -> bool {
    matches!(channel_type, "D" | "G")
}

/// A post. `root_id` is empty for a top-level post.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Post {
    pub id: String,
    pub create_at: i64,
    pub update_at: i64,
    pub delete_at: i64,
    pub user_id: String,
    pub channel_id: String,
    pub root_id: String,
    pub message: String,
    /// `""` for a user's post, `system_*` for joins, header changes, ...
    #[serde(rename = "type")]
    pub kind: String,
    pub props: Value,
    pub file_ids: Vec<String>,
}

impl Post {
    /// Posted by a bot account (Mattermost stamps `props.from_bot`).
    pub fn from_bot(&self) -> bool {
        match self.props.get("from_bot") {
            Some(Value::String(s)) => s == "true",
            Some(Value::Bool(b)) => *b,
            _ => false,
        }
    }

    /// The thread this post belongs to: its root, or itself.
    pub fn thread_root(&self) -> &str {
        if self.root_id.is_empty() {
            &self.id
        } else {
            &self.root_id
        }
    }
}

/// `GET /channels/{id}/posts`: ids newest first and the posts by id.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PostList {
    pub order: Vec<String>,
    pub posts: std::collections::HashMap<String, Post>,
}

impl PostList {
    /// The posts, oldest first by creation.
    pub fn oldest_first(mut self) -> Vec<Post> {
        let mut out: Vec<Post> = self
            .order
            .iter()
            .filter_map(|id| self.posts.remove(id))
            .collect();
        out.sort_by(|a, b| a.create_at.cmp(&b.create_at).then(a.id.cmp(&b.id)));
        out
    }
}

/// A bot account (`GET /bots`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Bot {
    pub user_id: String,
    pub username: String,
    pub display_name: String,
    pub description: String,
    pub delete_at: i64,
}

/// A personal access token; `token` is only ever present when minted.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AccessToken {
    pub id: String,
    pub user_id: String,
    pub description: String,
    pub is_active: bool,
    pub token: String,
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("id", &self.id)
            .field("user_id", &self.user_id)
            .field("description", &self.description)
            .field("is_active", &self.is_active)
            .finish_non_exhaustive()
    }
}

/// One frame the server sends down the websocket: an event, or the reply
/// to one of our requests.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Frame {
    /// `posted`, `hello`, `typing`, ... (empty for a reply).
    pub event: String,
    pub data: Value,
    pub broadcast: Value,
    pub seq: i64,
    /// `OK` or `FAIL` on a reply.
    pub status: String,
    pub seq_reply: Option<i64>,
    pub error: Value,
}

/// A `posted` event, decoded: Mattermost sends the post and the mention
/// list as JSON strings inside `data`.
#[derive(Debug, Clone, PartialEq)]
pub struct Posted {
    pub post: Post,
    pub channel_type: String,
    pub channel_name: String,
    pub channel_display_name: String,
    pub team_id: String,
    /// `@username` of the author.
    pub sender_name: String,
    /// Present only when this connection's user is a target of the post,
    /// and then exactly that user's id.
    pub mentions: Vec<String>,
}

impl Frame {
    /// The `posted` event in this frame, if it is one that reads.
    pub fn posted(&self) -> Option<Posted> {
        if self.event != "posted" {
            return None;
        }
        let text = |k: &str| {
            self.data
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let post: Post = serde_json::from_str(self.data.get("post")?.as_str()?).ok()?;
        let mentions = self
            .data
            .get("mentions")
            .and_then(Value::as_str)
            .and_then(|s| serde_json::from_str::<Vec<String>>(s).ok())
            .unwrap_or_default();
        Some(Posted {
            post,
            channel_type: text("channel_type"),
            channel_name: text("channel_name"),
            channel_display_name: text("channel_display_name"),
            team_id: text("team_id"),
            sender_name: text("sender_name"),
            mentions,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_posted_frame_decodes_its_string_encoded_post_and_mentions() {
        let post = json!({"id": "p1", "channel_id": "c1", "user_id": "u1", "root_id": "",
                          "message": "@swe hi", "create_at": 5, "props": {"from_bot": "true"}});
        let frame: Frame = serde_json::from_value(json!({
            "event": "posted",
            "data": {"channel_type": "O", "channel_name": "eng", "post": post.to_string(),
                     "sender_name": "@jane", "team_id": "t1", "mentions": "[\"b1\"]"},
            "broadcast": {"channel_id": "c1"},
            "seq": 3
        }))
        .unwrap();
        let p = frame.posted().unwrap();
        assert_eq!(p.post.id, "p1");
        assert_eq!(p.post.thread_root(), "p1");
        assert!(p.post.from_bot());
        assert_eq!(p.mentions, vec!["b1".to_owned()]);
        assert_eq!(p.channel_name, "eng");
        let mut other = frame.clone();
        other.event = "typing".into();
        assert!(other.posted().is_none());
    }

    #[test]
    fn a_post_list_reads_oldest_first() {
        let list: PostList = serde_json::from_value(json!({
            "order": ["b", "a"],
            "posts": {"a": {"id": "a", "create_at": 1}, "b": {"id": "b", "create_at": 2, "root_id": "a"}}
        }))
        .unwrap();
        let posts = list.oldest_first();
        assert_eq!(
            posts.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(posts[1].thread_root(), "a");
    }

    #[test]
    fn a_minted_token_never_prints_its_value() {
        let t = AccessToken {
            id: "t".into(),
            token: "sekrit-value".into(),
            ..AccessToken::default()
        };
        assert!(!format!("{t:?}").contains("sekrit"));
    }
}
