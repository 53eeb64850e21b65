//! What the fake stores, and how Mattermost spells it in JSON.

use serde_json::{Value, json};

/// A user made by [`super::FakeMattermost::add_user`] and friends, with a
/// token that authenticates as them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: String,
    pub username: String,
    pub token: String,
}

/// The kind of a team channel (direct channels come from
/// [`super::FakeMattermost::direct_channel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChannelType {
    Open,
    Private,
}

/// A post as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Post {
    pub id: String,
    pub channel_id: String,
    pub user_id: String,
    pub message: String,
    /// `""` when the post is not a reply.
    pub root_id: String,
    pub create_at: i64,
    pub update_at: i64,
    pub delete_at: i64,
    /// Mattermost's `"type"`: `""` for a plain post, `"system_join_channel"`
    /// for the post a join leaves.
    pub kind: String,
    /// Always an object; `{"from_bot": "true"}` on a bot's posts.
    pub props: Value,
}

impl Post {
    /// The post as Mattermost's REST API and `posted` events spell it.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "create_at": self.create_at,
            "update_at": self.update_at,
            "edit_at": 0,
            "delete_at": self.delete_at,
            "is_pinned": false,
            "user_id": self.user_id,
            "channel_id": self.channel_id,
            "root_id": self.root_id,
            "original_id": "",
            "message": self.message,
            "type": self.kind,
            "props": self.props,
            "hashtags": "",
            "pending_post_id": "",
            "reply_count": 0,
            "metadata": {},
        })
    }
}

/// A reaction as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaction {
    pub user_id: String,
    pub post_id: String,
    pub emoji_name: String,
}

/// A typing notice received (REST `POST /users/{id}/typing` or the
/// websocket's `user_typing` action).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Typing {
    pub user_id: String,
    pub channel_id: String,
    /// `""` when not in a thread.
    pub parent_id: String,
}

#[derive(Debug, Clone)]
pub(crate) struct UserRec {
    pub id: String,
    pub username: String,
    pub is_bot: bool,
    pub admin: bool,
    pub create_at: i64,
    pub update_at: i64,
    pub delete_at: i64,
    /// Bots only.
    pub display_name: String,
    pub description: String,
    pub owner_id: String,
}

impl UserRec {
    pub fn roles(&self) -> &'static str {
        if self.admin {
            "system_admin system_user"
        } else {
            "system_user"
        }
    }

    pub fn to_json(&self) -> Value {
        let mut user = json!({
            "id": self.id,
            "create_at": self.create_at,
            "update_at": self.update_at,
            "delete_at": self.delete_at,
            "username": self.username,
            "auth_service": "",
            "email": format!("{}@example.com", self.username),
            "nickname": "",
            "first_name": if self.is_bot { self.display_name.as_str() } else { "" },
            "last_name": "",
            "position": "",
            "roles": self.roles(),
            "locale": "en",
            "is_bot": self.is_bot,
        });
        if self.is_bot {
            user["bot_description"] = json!(self.description);
        }
        user
    }

    pub fn bot_json(&self) -> Value {
        json!({
            "user_id": self.id,
            "username": self.username,
            "display_name": self.display_name,
            "description": self.description,
            "owner_id": self.owner_id,
            "create_at": self.create_at,
            "update_at": self.update_at,
            "delete_at": self.delete_at,
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct TokenRec {
    pub id: String,
    pub token: String,
    pub user_id: String,
    pub description: String,
    /// A login session (the tokens of `add_user`/`add_admin`): authenticates
    /// but is not a personal access token, so the token API does not list it.
    pub session: bool,
}

impl TokenRec {
    /// Without the token's value (only its creation shows that).
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "user_id": self.user_id,
            "description": self.description,
            "is_active": true,
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct TeamRec {
    pub id: String,
    pub name: String,
    pub create_at: i64,
}

impl TeamRec {
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "create_at": self.create_at,
            "update_at": self.create_at,
            "delete_at": 0,
            "name": self.name,
            "display_name": self.name,
            "type": "O",
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct ChannelRec {
    pub id: String,
    /// `""` for direct channels.
    pub team_id: String,
    pub name: String,
    pub display_name: String,
    /// `"O"`, `"P"` or `"D"`.
    pub kind: &'static str,
    pub create_at: i64,
    pub last_post_at: i64,
}

impl ChannelRec {
    pub fn is_direct(&self) -> bool {
        self.kind == "D"
    }

    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "create_at": self.create_at,
            "update_at": self.create_at,
            "delete_at": 0,
            "team_id": self.team_id,
            "type": self.kind,
            "name": self.name,
            "display_name": self.display_name,
            "header": "",
            "purpose": "",
            "last_post_at": self.last_post_at,
            "creator_id": "",
        })
    }
}

pub(crate) fn reaction_json(reaction: &Reaction, create_at: i64) -> Value {
    json!({
        "user_id": reaction.user_id,
        "post_id": reaction.post_id,
        "emoji_name": reaction.emoji_name,
        "create_at": create_at,
    })
}

/// A Mattermost-shaped error body.
pub(crate) fn error_json(id: &str, message: &str, status: u16) -> Value {
    json!({
        "id": id,
        "message": message,
        "detailed_error": "",
        "request_id": "",
        "status_code": status,
    })
}

/// A 26-character lowercase alphanumeric id, like Mattermost's.
pub(crate) fn new_id() -> String {
    let mut id = uuid::Uuid::new_v4().simple().to_string();
    id.truncate(26);
    id
}

/// Whether `text` mentions `@name` (case-insensitive, as a whole word; a
/// trailing `.` ends the word, as in "thanks @bot.").
pub(crate) fn mentions_name(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let text = text.to_ascii_lowercase();
    let needle = format!("@{}", name.to_ascii_lowercase());
    let mut from = 0;
    while let Some(found) = text[from..].find(&needle) {
        let at = from + found;
        let end = at + needle.len();
        let before_ok = text[..at].chars().next_back().is_none_or(|c| !word(c));
        let mut rest = text[end..].chars();
        let after_ok = match rest.next() {
            None => true,
            Some('.') => rest.next().is_none_or(|c| !word(c) && c != '.'),
            Some(c) => !word(c),
        };
        if before_ok && after_ok {
            return true;
        }
        from = at + 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions() {
        assert!(mentions_name("hi @Bot", "bot"));
        assert!(mentions_name("@bot, look", "bot"));
        assert!(mentions_name("thanks @bot.", "bot"));
        assert!(!mentions_name("hi @bots", "bot"));
        assert!(!mentions_name("mail me@bot", "bot"));
        assert!(!mentions_name("@bot.name", "bot"));
        assert!(mentions_name("@bot.name", "bot.name"));
        assert_eq!(new_id().len(), 26);
    }
}
