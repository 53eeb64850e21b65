//! [`SeatSocket`]: one seat's websocket to Mattermost, for as long as the
//! engine runs.
//!
//! Connect, authenticate with the bot token (`authentication_challenge`),
//! then read `posted` events and hand each to the [`SeatInbox`]. The socket
//! replays nothing, so the seat keeps a cursor (the creation time of the
//! newest post it has handled; at first the moment it connected) and, after
//! every reconnect, re-reads each channel it is a member of since then over
//! REST before it reads the socket again. Only posts *created* in the gap
//! count (`since=` is update-based: a reaction touches an old post), the
//! gap is bounded by [`SocketOptions::backfill_window`], and a ring of the
//! last 512 post ids keeps a post that arrives both ways from being
//! handled twice.
//!
//! A post is handled when the inbox says so: if publishing fails the
//! cursor stays where it was and the socket reconnects, so the post is
//! read again by the backfill. Reconnects back off (1, 2, 5, 15, 30, 60,
//! then 300 s, each plus up to a quarter of jitter) and fall back to the
//! start only after a connection that stayed up for a minute.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tracing::{debug, info, warn};

use super::client::{MattermostClient, MattermostError};
use super::inbound::{SeatAccount, SeatPost, Verdict, classify};
use super::wire::{Channel, Frame, Post};

/// How a seat's socket behaves; the defaults are the production ones.
#[derive(Debug, Clone)]
pub struct SocketOptions {
    /// Delays between reconnect attempts; the last repeats.
    pub backoff: Vec<Duration>,
    /// Up to this fraction of a delay is added at random, so seats that
    /// dropped together do not reconnect in lockstep.
    pub jitter: f64,
    /// A connection that lived this long resets the backoff.
    pub stable_after: Duration,
    /// The longest gap a reconnect re-reads.
    pub backfill_window: Duration,
    /// How often the client pings.
    pub ping_interval: Duration,
    /// A socket silent this long (no frame, no pong) is dead.
    pub silence_timeout: Duration,
    /// How long the server may take to accept the token.
    pub auth_timeout: Duration,
}

impl Default for SocketOptions {
    fn default() -> Self {
        Self {
            backoff: [1, 2, 5, 15, 30, 60, 300]
                .into_iter()
                .map(Duration::from_secs)
                .collect(),
            jitter: 0.25,
            stable_after: Duration::from_secs(60),
            backfill_window: Duration::from_secs(15 * 60),
            ping_interval: Duration::from_secs(30),
            silence_timeout: Duration::from_secs(100),
            auth_timeout: Duration::from_secs(20),
        }
    }
}

/// Post ids remembered per seat against double handling.
const DEDUPE_RING: usize = 512;
/// Frames kept while waiting for the authentication reply.
const MAX_EARLY_FRAMES: usize = 512;
/// Largest frame accepted (Mattermost's own limit is 256 KiB).
const MAX_FRAME_BYTES: usize = 1 << 20;
/// Read and write buffer of a seat socket.
const SOCKET_BUFFER: usize = 8 * 1024;
/// The `seq` of our authentication challenge.
const AUTH_SEQ: i64 = 1;

/// Where a seat's posts go.
#[async_trait]
pub trait SeatInbox: Send + Sync {
    /// One post the seat sees, with what it is to the seat. `Err` means it
    /// could not be handed on: the socket reconnects and the backfill reads
    /// it again.
    async fn seen(
        &self,
        seat: &SeatAccount,
        post: SeatPost,
        verdict: Verdict,
    ) -> Result<(), String>;
}

/// What a seat's socket is doing, for health checks and benchmarks.
#[derive(Debug, Default)]
pub struct SocketStatus {
    live: AtomicBool,
    connects: AtomicU64,
    backfilled: AtomicU64,
    handled: AtomicU64,
    account: Mutex<Option<SeatAccount>>,
    last_error: Mutex<Option<String>>,
}

impl SocketStatus {
    /// Authenticated and reading right now.
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }
    /// Successful connections so far.
    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }
    /// Posts re-read after reconnects and handed on.
    pub fn backfilled(&self) -> u64 {
        self.backfilled.load(Ordering::Relaxed)
    }
    /// Posts handed on, live or backfilled.
    pub fn handled(&self) -> u64 {
        self.handled.load(Ordering::Relaxed)
    }
    /// The bot account, once known.
    pub fn account(&self) -> Option<SeatAccount> {
        self.account.lock().clone()
    }
    /// Why the last connection ended or failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().clone()
    }
}

/// One seat's connection.
pub struct SeatSocket {
    handle: String,
    client: MattermostClient,
    team: String,
    options: SocketOptions,
    inbox: Arc<dyn SeatInbox>,
    status: Arc<SocketStatus>,
}

/// Why a session ended.
enum End {
    Stopped,
    Lost(String),
}

/// Per-seat memory that outlives a connection.
struct Memory {
    account: Option<(SeatAccount, String)>,
    /// Creation time (ms) of the newest post handled.
    cursor: Option<i64>,
    ring: VecDeque<String>,
    seen: HashSet<String>,
    usernames: HashMap<String, String>,
}

impl Memory {
    fn remember(&mut self, id: &str) {
        if self.seen.insert(id.to_owned()) {
            self.ring.push_back(id.to_owned());
            if self.ring.len() > DEDUPE_RING
                && let Some(old) = self.ring.pop_front()
            {
                self.seen.remove(&old);
            }
        }
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `base` plus up to `jitter` of it, at random.
fn jittered(base: Duration, jitter: f64) -> Duration {
    let r = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let frac = (r % 10_000) as f64 / 10_000.0 * jitter.max(0.0);
    base.mul_f64(1.0 + frac)
}

impl SeatSocket {
    pub fn new(
        handle: &str,
        client: MattermostClient,
        team: &str,
        options: SocketOptions,
        inbox: Arc<dyn SeatInbox>,
    ) -> Self {
        Self {
            handle: handle.to_owned(),
            client,
            team: team.to_owned(),
            options,
            inbox,
            status: Arc::new(SocketStatus::default()),
        }
    }

    pub fn status(&self) -> Arc<SocketStatus> {
        self.status.clone()
    }

    /// Connects, reads and reconnects until `stop` turns true.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut memory = Memory {
            account: None,
            cursor: None,
            ring: VecDeque::new(),
            seen: HashSet::new(),
            usernames: HashMap::new(),
        };
        let mut attempt = 0usize;
        loop {
            if *stop.borrow() {
                return;
            }
            let started = Instant::now();
            let end = self.session(&mut memory, &mut stop).await;
            self.status.live.store(false, Ordering::Release);
            match end {
                End::Stopped => return,
                End::Lost(reason) => {
                    warn!(seat = %self.handle, %reason, "mattermost socket lost; reconnecting");
                    *self.status.last_error.lock() = Some(reason);
                }
            }
            if started.elapsed() >= self.options.stable_after {
                attempt = 0;
            }
            let step = self
                .options
                .backoff
                .get(attempt)
                .or(self.options.backoff.last())
                .copied()
                .unwrap_or(Duration::from_secs(1));
            attempt += 1;
            let delay = jittered(step, self.options.jitter);
            debug!(seat = %self.handle, delay_ms = delay.as_millis() as u64, "mattermost reconnect backoff");
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stop.changed() => return,
            }
        }
    }

    async fn identify(&self, memory: &mut Memory) -> Result<(SeatAccount, String), String> {
        if let Some(a) = &memory.account {
            return Ok(a.clone());
        }
        let me = self.client.me().await.map_err(describe)?;
        let team = self
            .client
            .team_by_name(&self.team)
            .await
            .map_err(describe)?;
        let account = SeatAccount {
            handle: self.handle.clone(),
            user_id: me.id,
            username: me.username,
        };
        *self.status.account.lock() = Some(account.clone());
        memory.account = Some((account.clone(), team.id.clone()));
        Ok((account, team.id))
    }

    async fn session(&self, memory: &mut Memory, stop: &mut watch::Receiver<bool>) -> End {
        let (account, team_id) = match self.identify(memory).await {
            Ok(a) => a,
            Err(e) => return End::Lost(e),
        };
        let url = self.client.websocket_url();
        // Mattermost's frames are small: 8 KiB buffers (they grow for a
        // bigger frame) instead of 128 KiB each, per seat.
        let config = WebSocketConfig::default()
            .read_buffer_size(SOCKET_BUFFER)
            .write_buffer_size(SOCKET_BUFFER)
            .max_message_size(Some(MAX_FRAME_BYTES))
            .max_frame_size(Some(MAX_FRAME_BYTES));
        let connected = tokio::time::timeout(
            self.options.auth_timeout,
            // The roots and proxies of every other client (a CONNECT tunnel
            // through HTTPS_PROXY unless NO_PROXY names the server).
            crewlet_http::connect_websocket(url.as_str(), Some(config)),
        )
        .await;
        let mut ws = match connected {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => return End::Lost(format!("websocket upgrade failed: {e}")),
            Err(_) => return End::Lost("websocket upgrade timed out".into()),
        };
        let challenge = json!({"seq": AUTH_SEQ, "action": "authentication_challenge",
                               "data": {"token": self.client.token()}});
        if let Err(e) = ws.send(Message::Text(challenge.to_string().into())).await {
            return End::Lost(format!("cannot send the authentication challenge: {e}"));
        }
        // Frames that arrive before the reply are kept and read after it.
        let mut early: Vec<Frame> = Vec::new();
        let deadline = tokio::time::Instant::now() + self.options.auth_timeout;
        loop {
            let next = tokio::time::timeout_at(deadline, ws.next()).await;
            let msg = match next {
                Err(_) => return End::Lost("no answer to the authentication challenge".into()),
                Ok(None) => return End::Lost("closed during authentication".into()),
                Ok(Some(Err(e))) => {
                    return End::Lost(format!("socket error during authentication: {e}"));
                }
                Ok(Some(Ok(m))) => m,
            };
            let Some(frame) = text_frame(&msg) else {
                continue;
            };
            if frame.seq_reply == Some(AUTH_SEQ) {
                if frame.status == "OK" {
                    break;
                }
                return End::Lost(format!(
                    "the bot token was refused: {}",
                    frame
                        .error
                        .get("message")
                        .and_then(|m| m.as_str())
                        .unwrap_or("FAIL")
                ));
            }
            if early.len() < MAX_EARLY_FRAMES {
                early.push(frame);
            }
        }
        self.status.live.store(true, Ordering::Release);
        self.status.connects.fetch_add(1, Ordering::Relaxed);
        info!(seat = %self.handle, user = %account.username, "mattermost socket live");

        match memory.cursor {
            None => memory.cursor = Some(now_ms()),
            Some(since) => {
                if let Err(e) = self.backfill(&account, &team_id, since, memory).await {
                    return End::Lost(e);
                }
            }
        }
        for frame in early {
            if let Err(e) = self.live_frame(&account, &frame, memory).await {
                return End::Lost(e);
            }
        }
        let mut ping = tokio::time::interval(self.options.ping_interval);
        ping.tick().await;
        let mut last_heard = tokio::time::Instant::now();
        loop {
            let silence = last_heard + self.options.silence_timeout;
            tokio::select! {
                _ = stop.changed() => {
                    let _ = ws.close(None).await;
                    return End::Stopped;
                }
                _ = ping.tick() => {
                    if let Err(e) = ws.send(Message::Ping(Vec::new().into())).await {
                        return End::Lost(format!("ping failed: {e}"));
                    }
                }
                _ = tokio::time::sleep_until(silence) => {
                    return End::Lost(format!("nothing heard for {} s", self.options.silence_timeout.as_secs()));
                }
                next = ws.next() => {
                    last_heard = tokio::time::Instant::now();
                    let msg = match next {
                        None => return End::Lost("the server closed the socket".into()),
                        Some(Err(e)) => return End::Lost(format!("socket error: {e}")),
                        Some(Ok(Message::Close(_))) => return End::Lost("the server closed the socket".into()),
                        Some(Ok(m)) => m,
                    };
                    if let Some(frame) = text_frame(&msg)
                        && let Err(e) = self.live_frame(&account, &frame, memory).await
                    {
                        return End::Lost(e);
                    }
                }
            }
        }
    }

    async fn live_frame(
        &self,
        account: &SeatAccount,
        frame: &Frame,
        memory: &mut Memory,
    ) -> Result<(), String> {
        let Some(posted) = frame.posted() else {
            return Ok(());
        };
        let sender = posted.sender_name.trim_start_matches('@').to_owned();
        if !sender.is_empty() {
            memory
                .usernames
                .insert(posted.post.user_id.clone(), sender.clone());
        }
        let seat_post = SeatPost {
            post: posted.post,
            channel_type: posted.channel_type,
            channel_name: posted.channel_name,
            sender,
            backfilled: false,
        };
        self.handle_post(account, seat_post, Some(&posted.mentions), memory)
            .await
    }

    /// Re-reads every channel of the seat since `since` (bounded by the
    /// window) and handles the posts created in the gap, oldest first per
    /// channel.
    async fn backfill(
        &self,
        account: &SeatAccount,
        team_id: &str,
        since: i64,
        memory: &mut Memory,
    ) -> Result<(), String> {
        let window = i64::try_from(self.options.backfill_window.as_millis()).unwrap_or(i64::MAX);
        let floor = now_ms().saturating_sub(window);
        let from = if since < floor {
            warn!(seat = %self.handle, skipped_seconds = (floor - since) as f64 / 1000.0,
                  window_seconds = window as f64 / 1000.0,
                  "mattermost backfill window exceeded; the older part of the gap is not replayed");
            floor
        } else {
            since
        };
        let channels: Vec<Channel> = self
            .client
            .channels_for_user(&account.user_id, team_id)
            .await
            .map_err(|e| format!("backfill: {}", describe(e)))?;
        for channel in channels {
            let posts: Vec<Post> = self
                .client
                .posts_since(&channel.id, from)
                .await
                .map_err(|e| format!("backfill of {}: {}", channel.name, describe(e)))?;
            for post in posts.into_iter().filter(|p| p.create_at > from) {
                let sender = self.username(&post.user_id, memory).await;
                let seat_post = SeatPost {
                    post,
                    channel_type: channel.kind.clone(),
                    channel_name: channel.name.clone(),
                    sender,
                    backfilled: true,
                };
                let before = self.status.handled();
                self.handle_post(account, seat_post, None, memory).await?;
                if self.status.handled() > before {
                    self.status.backfilled.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    async fn username(&self, user_id: &str, memory: &mut Memory) -> String {
        if let Some(u) = memory.usernames.get(user_id) {
            return u.clone();
        }
        match self.client.user(user_id).await {
            Ok(u) => {
                memory
                    .usernames
                    .insert(user_id.to_owned(), u.username.clone());
                u.username
            }
            Err(e) => {
                debug!(seat = %self.handle, error = %e, "cannot read a post author's username");
                user_id.to_owned()
            }
        }
    }

    async fn handle_post(
        &self,
        account: &SeatAccount,
        post: SeatPost,
        mentions: Option<&[String]>,
        memory: &mut Memory,
    ) -> Result<(), String> {
        if memory.seen.contains(&post.post.id) {
            debug!(seat = %self.handle, post = %post.post.id, "post already handled");
            return Ok(());
        }
        let verdict = classify(account, &post.post, &post.channel_type, mentions);
        let id = post.post.id.clone();
        let created = post.post.create_at;
        self.inbox.seen(account, post, verdict).await?;
        memory.remember(&id);
        memory.cursor = Some(memory.cursor.map_or(created, |c| c.max(created)));
        self.status.handled.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn describe(e: MattermostError) -> String {
    e.to_string()
}

fn text_frame(msg: &Message) -> Option<Frame> {
    match msg {
        Message::Text(t) => serde_json::from_str(t.as_str()).ok(),
        Message::Binary(b) => serde_json::from_slice(b).ok(),
        _ => None,
    }
}
