//! A fake Mattermost server on 127.0.0.1 for tests and benchmarks: the REST
//! API v4 subset a bot integration uses (users, teams, channels, posts,
//! reactions, typing, bots, personal access tokens, config) and the
//! websocket (`hello`, `posted`, `reaction_added`, `typing`), with faults
//! (dropped sockets, refused upgrades, a stopped and restarted server).
//!
//! ```text
//! let mm = FakeMattermost::start().await;
//! let team = mm.add_team("acme");
//! let town = mm.add_channel(&team, "town-square", ChannelType::Open);
//! let alice = mm.add_user("alice");
//! let bot = mm.add_bot("crewlet", "Crewlet");
//! mm.join(&town, &alice.id);
//! mm.join(&town, &bot.id);
//! // point the client at mm.url() with bot.token, then:
//! mm.post_as(&alice.id, &town, "@crewlet hello", None);
//! mm.wait_for("the bot's reply", Duration::from_secs(10), |mm| {
//!     mm.posts_by(&bot.id).iter().any(|p| p.kind.is_empty())
//! }).await;
//! ```
//!
//! Joining a team channel leaves a `system_join_channel` post (as
//! Mattermost does), so [`FakeMattermost::posts_in`] and
//! [`FakeMattermost::posts_by`] include those: filter on `kind.is_empty()`
//! for people's posts. Set-up helpers panic on unknown ids.

mod admin;
mod model;
mod rest;
mod socket;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::any;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tower_service::Service;

pub use model::{ChannelType, Post, Reaction, Typing, User};
use state::Shared;

/// A running fake Mattermost; stops (and drops every connection) when
/// dropped.
pub struct FakeMattermost {
    shared: Arc<Shared>,
    addr: SocketAddr,
    server: Mutex<Option<JoinHandle<()>>>,
}

impl FakeMattermost {
    /// Listens on 127.0.0.1 on a free port.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start() -> FakeMattermost {
        match Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await {
            Ok(server) => server,
            Err(e) => panic!("fake Mattermost: cannot listen on 127.0.0.1: {e}"),
        }
    }

    /// Listens on `addr` (port 0 for a free one).
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<FakeMattermost> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(format!("http://{addr}")));
        shared.lock().listening = true;
        let task = tokio::spawn(serve(listener, router(shared.clone())));
        Ok(FakeMattermost {
            shared,
            addr,
            server: Mutex::new(Some(task)),
        })
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    // --- set-up ---

    /// A person with a login token.
    pub fn add_user(&self, username: &str) -> User {
        self.shared.lock().add_person(username, false)
    }

    /// A person with the `system_admin` role and a login token.
    pub fn add_admin(&self, username: &str) -> User {
        self.shared.lock().add_person(username, true)
    }

    /// A bot account with one personal access token.
    pub fn add_bot(&self, username: &str, display_name: &str) -> User {
        let mut d = self.shared.lock();
        let id = d.new_user(username, true, false);
        if let Some(bot) = d.users.get_mut(&id) {
            bot.display_name = display_name.to_owned();
        }
        let token = d.mint_token(&id, "fake bot token", false).token;
        User {
            id,
            username: username.to_owned(),
            token,
        }
    }

    /// A team; returns its id.
    pub fn add_team(&self, name: &str) -> String {
        self.shared.lock().add_team(name)
    }

    /// A channel of a team, with no members; returns its id.
    pub fn add_channel(&self, team_id: &str, name: &str, kind: ChannelType) -> String {
        let mut d = self.shared.lock();
        assert!(
            d.teams.contains_key(team_id),
            "add_channel: no team {team_id}"
        );
        let kind = match kind {
            ChannelType::Open => "O",
            ChannelType::Private => "P",
        };
        d.add_channel(team_id, name, kind)
    }

    /// Adds the user to the channel and its team (a `system_join_channel`
    /// post when newly a member of a team channel).
    pub fn join(&self, channel_id: &str, user_id: &str) {
        let mut d = self.shared.lock();
        assert!(
            d.channels.contains_key(channel_id),
            "join: no channel {channel_id}"
        );
        assert!(d.users.contains_key(user_id), "join: no user {user_id}");
        d.join(channel_id, user_id);
    }

    /// Takes `user_id` out of `channel_id` (their posts there are refused
    /// from then on, as on a real server).
    pub fn leave(&self, channel_id: &str, user_id: &str) {
        self.shared
            .lock()
            .channel_members
            .remove(&(channel_id.to_owned(), user_id.to_owned()));
    }

    /// The direct channel between two users (made on first call).
    pub fn direct_channel(&self, a: &str, b: &str) -> String {
        let mut d = self.shared.lock();
        for user in [a, b] {
            assert!(d.users.contains_key(user), "direct_channel: no user {user}");
        }
        d.direct_channel(a, b).0
    }

    /// The SiteURL of the config and the websocket origin check (default
    /// [`Self::url`]).
    pub fn set_site_url(&self, url: &str) {
        self.shared.lock().site_url = url.trim_end_matches('/').to_owned();
    }

    /// A boolean server setting: `EnableBotAccountCreation`,
    /// `EnableUserAccessTokens` (both `true` by default).
    pub fn set_setting(&self, key: &str, value: bool) {
        self.shared.lock().settings.insert(key.to_owned(), value);
    }

    // --- acting as a person ---

    /// Posts (no membership check) and broadcasts `posted`.
    pub fn post_as(
        &self,
        user_id: &str,
        channel_id: &str,
        message: &str,
        root_id: Option<&str>,
    ) -> Post {
        let mut d = self.shared.lock();
        assert!(
            d.channels.contains_key(channel_id),
            "post_as: no channel {channel_id}"
        );
        assert!(d.users.contains_key(user_id), "post_as: no user {user_id}");
        let root_id = root_id.unwrap_or_default();
        d.create_post(user_id, channel_id, message, root_id, json!({}), "")
    }

    /// Reacts (no membership check): bumps the post's `update_at` and
    /// broadcasts `reaction_added`.
    pub fn react_as(&self, user_id: &str, post_id: &str, emoji: &str) {
        let reacted = self.shared.lock().react(user_id, post_id, emoji);
        assert!(reacted.is_some(), "react_as: no post {post_id}");
    }

    // --- observing ---

    /// The channel's posts, oldest first.
    pub fn posts_in(&self, channel_id: &str) -> Vec<Post> {
        let d = self.shared.lock();
        d.posts
            .iter()
            .filter(|p| p.channel_id == channel_id)
            .cloned()
            .collect()
    }

    /// The user's posts, oldest first.
    pub fn posts_by(&self, user_id: &str) -> Vec<Post> {
        let d = self.shared.lock();
        d.posts
            .iter()
            .filter(|p| p.user_id == user_id)
            .cloned()
            .collect()
    }

    /// Every reaction, in order.
    pub fn reactions(&self) -> Vec<Reaction> {
        let d = self.shared.lock();
        d.reactions.iter().map(|(r, _)| r.clone()).collect()
    }

    /// Every typing notice (REST and websocket), in order.
    pub fn typing(&self) -> Vec<Typing> {
        self.shared.lock().typing.clone()
    }

    /// Authenticated websocket connections open now.
    pub fn sockets(&self) -> usize {
        self.shared.lock().sockets.len()
    }

    /// The user ids of those connections, sorted.
    pub fn socket_users(&self) -> Vec<String> {
        let d = self.shared.lock();
        let mut users: Vec<String> = d.sockets.values().map(|s| s.user_id.clone()).collect();
        users.sort();
        users
    }

    /// `(method, path)` of every request (path without its query), the
    /// websocket upgrades (`GET /api/v4/websocket`) included.
    pub fn requests(&self) -> Vec<(String, String)> {
        self.shared.lock().requests.clone()
    }

    /// Polls `f` every 20 ms until it holds.
    ///
    /// # Panics
    /// When it does not hold within `timeout`, naming `what`.
    pub async fn wait_for<F: Fn(&Self) -> bool>(&self, what: &str, timeout: Duration, f: F) {
        let deadline = Instant::now() + timeout;
        loop {
            if f(self) {
                return;
            }
            if Instant::now() >= deadline {
                panic!("fake Mattermost: timed out after {timeout:?} waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // --- faults ---

    /// Closes every websocket abruptly (no close frame); the server keeps
    /// running.
    pub fn drop_sockets(&self) {
        let tasks: Vec<_> = {
            let mut d = self.shared.lock();
            d.sockets.clear();
            d.socket_tasks.drain().map(|(_, task)| task).collect()
        };
        for task in tasks {
            task.abort();
        }
    }

    /// While `true`, websocket upgrades are answered 503.
    pub fn refuse_sockets(&self, refuse: bool) {
        self.shared.lock().refuse_sockets = refuse;
    }

    /// Stops listening and drops every connection (REST keep-alive ones
    /// too), like a crashed server; the state is kept.
    pub async fn stop(&self) {
        {
            let mut d = self.shared.lock();
            d.listening = false;
            d.epoch += 1;
        }
        let task = self.server.lock().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
        self.drop_sockets();
    }

    /// Listens again on the same port with the same state (stopping first
    /// if still running).
    pub async fn restart(&self) -> std::io::Result<()> {
        self.stop().await;
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => return Err(e),
            }
        };
        self.shared.lock().listening = true;
        let task = tokio::spawn(serve(listener, router(self.shared.clone())));
        *self.server.lock() = Some(task);
        Ok(())
    }
}

impl Drop for FakeMattermost {
    fn drop(&mut self) {
        let task = self.server.lock().take();
        if let Some(task) = task {
            task.abort();
        }
        self.drop_sockets();
    }
}

impl std::fmt::Debug for FakeMattermost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeMattermost")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/api/v4/websocket", any(socket::upgrade))
        .fallback(rest::dispatch)
        .with_state(shared)
}

/// The accept loop. Connections are tasks of a set the loop owns, so
/// aborting the loop closes them all at once.
async fn serve(listener: TcpListener, router: Router) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, router.clone()));
                }
                // Out of file descriptors and the like: let it pass.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, router: Router) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        router.clone().call(request)
    });
    // Upgraded websockets leave this connection for their own task.
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
}
