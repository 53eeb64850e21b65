//! The fake's whole world behind one lock, and what changes it.

use std::collections::{HashMap, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, MutexGuard};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::AbortHandle;

use super::model::{
    ChannelRec, Post, Reaction, TeamRec, TokenRec, Typing, User, UserRec, mentions_name, new_id,
    reaction_json,
};

pub(crate) const SERVER_VERSION: &str = "10.5.0";

/// What the server task and the handle share.
pub(crate) struct Shared {
    data: Mutex<Data>,
}

impl Shared {
    pub fn new(site_url: String) -> Self {
        Self {
            data: Mutex::new(Data::new(site_url)),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Data> {
        self.data.lock()
    }
}

/// One authenticated websocket connection.
pub(crate) struct SocketRec {
    pub user_id: String,
    /// Events without their `seq` (the connection numbers them).
    pub events: UnboundedSender<Value>,
}

pub(crate) struct Data {
    pub users: HashMap<String, UserRec>,
    pub tokens: Vec<TokenRec>,
    pub teams: HashMap<String, TeamRec>,
    /// (team id, user id)
    pub team_members: HashSet<(String, String)>,
    pub channels: HashMap<String, ChannelRec>,
    /// (channel id, user id)
    pub channel_members: HashSet<(String, String)>,
    /// In creation order.
    pub posts: Vec<Post>,
    post_index: HashMap<String, usize>,
    /// With their `create_at`.
    pub reactions: Vec<(Reaction, i64)>,
    pub typing: Vec<Typing>,
    pub requests: Vec<(String, String)>,
    pub site_url: String,
    pub settings: HashMap<String, bool>,
    last_ts: i64,
    /// Authenticated websockets by connection id.
    pub sockets: HashMap<String, SocketRec>,
    /// Every websocket task (authenticated or not) by connection id.
    pub socket_tasks: HashMap<String, AbortHandle>,
    pub refuse_sockets: bool,
    /// Bumped by `stop`: an upgrade begun before it must not start a socket.
    pub epoch: u64,
    pub listening: bool,
}

impl Data {
    fn new(site_url: String) -> Self {
        Self {
            users: HashMap::new(),
            tokens: Vec::new(),
            teams: HashMap::new(),
            team_members: HashSet::new(),
            channels: HashMap::new(),
            channel_members: HashSet::new(),
            posts: Vec::new(),
            post_index: HashMap::new(),
            reactions: Vec::new(),
            typing: Vec::new(),
            requests: Vec::new(),
            site_url,
            settings: HashMap::new(),
            last_ts: 0,
            sockets: HashMap::new(),
            socket_tasks: HashMap::new(),
            refuse_sockets: false,
            epoch: 0,
            listening: false,
        }
    }

    /// Milliseconds since the epoch, strictly increasing across calls.
    pub fn now(&mut self) -> i64 {
        let clock = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        self.last_ts = clock.max(self.last_ts + 1);
        self.last_ts
    }

    /// A setting's value (`true` unless set otherwise).
    pub fn setting(&self, key: &str) -> bool {
        self.settings.get(key).copied().unwrap_or(true)
    }

    pub fn username_taken(&self, username: &str) -> bool {
        self.users
            .values()
            .any(|u| u.username.eq_ignore_ascii_case(username))
    }

    pub fn user_by_name(&self, username: &str) -> Option<&UserRec> {
        self.users
            .values()
            .find(|u| u.username.eq_ignore_ascii_case(username))
    }

    pub fn new_user(&mut self, username: &str, is_bot: bool, admin: bool) -> String {
        let id = new_id();
        let now = self.now();
        self.users.insert(
            id.clone(),
            UserRec {
                id: id.clone(),
                username: username.to_owned(),
                is_bot,
                admin,
                create_at: now,
                update_at: now,
                delete_at: 0,
                display_name: String::new(),
                description: String::new(),
                owner_id: String::new(),
            },
        );
        id
    }

    /// Mints a token for `user_id`; returns the token record.
    pub fn mint_token(&mut self, user_id: &str, description: &str, session: bool) -> TokenRec {
        let token = TokenRec {
            id: new_id(),
            token: new_id(),
            user_id: user_id.to_owned(),
            description: description.to_owned(),
            session,
        };
        self.tokens.push(token.clone());
        token
    }

    /// A user with a login session, for the set-up helpers.
    pub fn add_person(&mut self, username: &str, admin: bool) -> User {
        let id = self.new_user(username, false, admin);
        let token = self.mint_token(&id, "session", true).token;
        User {
            id,
            username: username.to_owned(),
            token,
        }
    }

    /// The user a token authenticates, if it is known and its user active.
    pub fn user_for_token(&self, token: &str) -> Option<&UserRec> {
        let rec = self.tokens.iter().find(|t| t.token == token)?;
        self.users
            .get(&rec.user_id)
            .filter(|user| user.delete_at == 0)
    }

    pub fn is_admin(&self, user_id: &str) -> bool {
        self.users.get(user_id).is_some_and(|u| u.admin)
    }

    pub fn add_team(&mut self, name: &str) -> String {
        let id = new_id();
        let create_at = self.now();
        self.teams.insert(
            id.clone(),
            TeamRec {
                id: id.clone(),
                name: name.to_owned(),
                create_at,
            },
        );
        id
    }

    pub fn add_channel(&mut self, team_id: &str, name: &str, kind: &'static str) -> String {
        let id = new_id();
        let create_at = self.now();
        self.channels.insert(
            id.clone(),
            ChannelRec {
                id: id.clone(),
                team_id: team_id.to_owned(),
                name: name.to_owned(),
                display_name: name.to_owned(),
                kind,
                create_at,
                last_post_at: 0,
            },
        );
        id
    }

    pub fn is_member(&self, channel_id: &str, user_id: &str) -> bool {
        self.channel_members
            .contains(&(channel_id.to_owned(), user_id.to_owned()))
    }

    pub fn in_team(&self, team_id: &str, user_id: &str) -> bool {
        self.team_members
            .contains(&(team_id.to_owned(), user_id.to_owned()))
    }

    /// Adds the user to the channel (and its team). A new member of a team
    /// channel leaves a `system_join_channel` post, broadcast like any other.
    pub fn join(&mut self, channel_id: &str, user_id: &str) {
        let Some(channel) = self.channels.get(channel_id) else {
            return;
        };
        let (team_id, direct) = (channel.team_id.clone(), channel.is_direct());
        if !team_id.is_empty() {
            self.team_members
                .insert((team_id.clone(), user_id.to_owned()));
        }
        if !self
            .channel_members
            .insert((channel_id.to_owned(), user_id.to_owned()))
            || direct
        {
            return;
        }
        let username = self
            .users
            .get(user_id)
            .map(|u| u.username.clone())
            .unwrap_or_default();
        let message = format!("{username} joined the channel.");
        let props = json!({ "username": username });
        self.create_post(
            user_id,
            channel_id,
            &message,
            "",
            props,
            "system_join_channel",
        );
    }

    /// The direct channel between two users; `true` when it was just made.
    pub fn direct_channel(&mut self, a: &str, b: &str) -> (String, bool) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let name = format!("{lo}__{hi}");
        if let Some(c) = self.channels.values().find(|c| c.name == name) {
            return (c.id.clone(), false);
        }
        let id = self.add_channel("", &name, "D");
        if let Some(c) = self.channels.get_mut(&id) {
            c.display_name = String::new();
        }
        for user in [a, b] {
            self.channel_members.insert((id.clone(), user.to_owned()));
        }
        (id, true)
    }

    pub fn post(&self, post_id: &str) -> Option<&Post> {
        self.post_index.get(post_id).map(|&i| &self.posts[i])
    }

    /// Stores a post (no checks) and broadcasts `posted`.
    pub fn create_post(
        &mut self,
        user_id: &str,
        channel_id: &str,
        message: &str,
        root_id: &str,
        props: Value,
        kind: &str,
    ) -> Post {
        let now = self.now();
        let mut props = match props {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        if self.users.get(user_id).is_some_and(|u| u.is_bot) {
            props.insert("from_bot".into(), json!("true"));
        }
        let post = Post {
            id: new_id(),
            channel_id: channel_id.to_owned(),
            user_id: user_id.to_owned(),
            message: message.to_owned(),
            root_id: root_id.to_owned(),
            create_at: now,
            update_at: now,
            delete_at: 0,
            kind: kind.to_owned(),
            props: Value::Object(props),
        };
        self.post_index.insert(post.id.clone(), self.posts.len());
        self.posts.push(post.clone());
        if let Some(channel) = self.channels.get_mut(channel_id) {
            channel.last_post_at = now;
        }
        self.broadcast_posted(&post);
        post
    }

    /// Records a reaction (once per user, post and emoji), bumps the post's
    /// `update_at` and broadcasts `reaction_added`. `None` if no such post.
    pub fn react(&mut self, user_id: &str, post_id: &str, emoji: &str) -> Option<Value> {
        let &index = self.post_index.get(post_id)?;
        let reaction = Reaction {
            user_id: user_id.to_owned(),
            post_id: post_id.to_owned(),
            emoji_name: emoji.to_owned(),
        };
        if let Some((_, at)) = self.reactions.iter().find(|(r, _)| *r == reaction) {
            return Some(reaction_json(&reaction, *at));
        }
        let now = self.now();
        self.posts[index].update_at = now;
        let channel_id = self.posts[index].channel_id.clone();
        let body = reaction_json(&reaction, now);
        self.reactions.push((reaction, now));
        let team_id = self.team_of(&channel_id);
        let event = json!({
            "event": "reaction_added",
            "data": { "reaction": body.to_string() },
            "broadcast": broadcast(&channel_id, &team_id, Value::Null),
        });
        self.send_to_members(&channel_id, None, |_| Some(event.clone()));
        Some(body)
    }

    /// Records a typing notice and tells the channel's other members.
    pub fn typing(&mut self, user_id: &str, channel_id: &str, parent_id: &str) {
        self.typing.push(Typing {
            user_id: user_id.to_owned(),
            channel_id: channel_id.to_owned(),
            parent_id: parent_id.to_owned(),
        });
        let team_id = self.team_of(channel_id);
        let event = json!({
            "event": "typing",
            "data": { "parent_id": parent_id, "user_id": user_id },
            "broadcast": broadcast(channel_id, &team_id, json!({ user_id: true })),
        });
        self.send_to_members(channel_id, Some(user_id), |_| Some(event.clone()));
    }

    fn team_of(&self, channel_id: &str) -> String {
        self.channels
            .get(channel_id)
            .map(|c| c.team_id.clone())
            .unwrap_or_default()
    }

    fn broadcast_posted(&self, post: &Post) {
        let Some(channel) = self.channels.get(&post.channel_id) else {
            return;
        };
        let sender = self
            .users
            .get(&post.user_id)
            .map(|u| u.username.as_str())
            .unwrap_or_default();
        let display_name = if channel.is_direct() {
            format!("@{sender}")
        } else {
            channel.display_name.clone()
        };
        let everyone = !channel.is_direct()
            && ["channel", "all", "here"]
                .iter()
                .any(|word| mentions_name(&post.message, word));
        let post_json = post.to_json().to_string();
        self.send_to_members(&channel.id, None, |user| {
            let mut data = json!({
                "channel_display_name": display_name,
                "channel_name": channel.name,
                "channel_type": channel.kind,
                "post": post_json,
                "sender_name": format!("@{sender}"),
                "set_online": true,
                "team_id": channel.team_id,
            });
            let mentioned = user.id != post.user_id
                && (everyone || mentions_name(&post.message, &user.username));
            if mentioned {
                data["mentions"] = json!(json!([user.id]).to_string());
            }
            Some(json!({
                "event": "posted",
                "data": data,
                "broadcast": broadcast(&channel.id, &channel.team_id, Value::Null),
            }))
        });
    }

    /// Sends `event(user)` to every authenticated socket of a member of the
    /// channel, except those of `omit`.
    fn send_to_members(
        &self,
        channel_id: &str,
        omit: Option<&str>,
        event: impl Fn(&UserRec) -> Option<Value>,
    ) {
        for socket in self.sockets.values() {
            if omit == Some(socket.user_id.as_str()) || !self.is_member(channel_id, &socket.user_id)
            {
                continue;
            }
            let Some(user) = self.users.get(&socket.user_id) else {
                continue;
            };
            if let Some(event) = event(user) {
                // A closed receiver is a socket on its way out.
                let _ = socket.events.send(event);
            }
        }
    }
}

fn broadcast(channel_id: &str, team_id: &str, omit_users: Value) -> Value {
    json!({
        "omit_users": omit_users,
        "user_id": "",
        "channel_id": channel_id,
        "team_id": team_id,
    })
}
