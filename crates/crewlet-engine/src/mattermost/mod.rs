//! Mattermost in the engine: the fleet of seat websockets (one per seat
//! with a bot token), the seats' outbound tools (post, reply in thread,
//! react, as the seat's own bot) and the "is typing" working status.
//!
//! The fleet publishes each post that reaches a seat as a `raw_webhook`
//! (source `mattermost`, the seat as the handle) on
//! `crewlet.notifications.inbound`, so routing, dedupe, coalescing and the
//! dashboard treat it like any webhook. What reaches a seat is decided per
//! seat ([`crewlet_integrations::mattermost::classify`]): DMs, mentions,
//! top-level posts in its channels, and replies in threads it follows
//! (`chat_thread_follows`, backend `mattermost`). A seat's own post never
//! wakes it; its reply in a thread makes it follow the thread.

pub(crate) mod inbox;
mod tools;
mod typing;

use std::collections::BTreeMap;
use std::sync::Arc;

use crewlet_config::{Company, Organization, WorkingStatus as Mode};
use crewlet_integrations::mattermost::{
    MattermostClient, SeatAccount, SeatSocket, SocketOptions, SocketStatus, http_client,
    normalize_url,
};
use crewlet_queue::EventQueue;
use crewlet_store::ThreadFollows;
use tokio::sync::{OnceCell, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

pub(crate) use tools::tools;
pub(crate) use typing::Typing;

use crate::engine::EnvLookup;

/// A seat's bot: its client and, once asked, its account.
pub(crate) struct SeatBot {
    pub handle: String,
    pub client: MattermostClient,
    account: OnceCell<SeatAccount>,
}

impl SeatBot {
    /// The bot's account (`GET /users/me`, once).
    pub async fn account(&self) -> Result<&SeatAccount, String> {
        self.account
            .get_or_try_init(|| async {
                let me = self.client.me().await.map_err(|e| e.to_string())?;
                Ok(SeatAccount {
                    handle: self.handle.clone(),
                    user_id: me.id,
                    username: me.username,
                })
            })
            .await
    }
}

/// The company's Mattermost: server, team, mode and the seats' bots.
pub(crate) struct Mattermost {
    pub base: String,
    pub team: String,
    pub typing: Mode,
    pub bots: BTreeMap<String, Arc<SeatBot>>,
}

impl Mattermost {
    /// `None` when Mattermost is off or no seat has a bot. A seat whose
    /// token cannot be expanded is left out with a warning naming the
    /// variable (never a value).
    pub fn from_company(
        company: &Company,
        org: &Organization,
        env: &EnvLookup,
    ) -> Option<Arc<Self>> {
        let mm = company
            .integrations
            .mattermost
            .as_ref()
            .filter(|m| m.enabled)?;
        let expand = |raw: &str| crewlet_config::interpolate(raw, |v| env(v));
        let base = match expand(&mm.url)
            .map_err(|e| e.to_string())
            .and_then(|u| normalize_url(&u).map_err(|e| e.to_string()))
        {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "integrations.mattermost.url is not usable; Mattermost stays off");
                return None;
            }
        };
        let http = match http_client() {
            Ok(h) => h,
            Err(e) => {
                warn!(error = %e, "no http client for Mattermost; it stays off");
                return None;
            }
        };
        let mut bots = BTreeMap::new();
        for seat in org.agents() {
            let Some(raw) = seat
                .role
                .integrations
                .mattermost
                .as_ref()
                .map(|m| m.bot_token.as_str())
                .filter(|t| !t.trim().is_empty())
            else {
                continue;
            };
            match expand(raw) {
                Ok(token) if !token.trim().is_empty() => {
                    bots.insert(
                        seat.handle.clone(),
                        Arc::new(SeatBot {
                            handle: seat.handle.clone(),
                            client: MattermostClient::with_http(http.clone(), &base, token.trim()),
                            account: OnceCell::new(),
                        }),
                    );
                }
                Ok(_) => {
                    warn!(seat = %seat.handle, "the seat's Mattermost bot_token is empty; its socket stays closed")
                }
                Err(e) => {
                    warn!(seat = %seat.handle, error = %e, "the seat's Mattermost bot_token cannot be expanded; its socket stays closed")
                }
            }
        }
        if bots.is_empty() {
            warn!("Mattermost is enabled but no agent seat has a bot_token");
            return None;
        }
        Some(Arc::new(Self {
            base,
            team: mm.team.clone(),
            typing: mm.typing_status.unwrap_or(Mode::Off),
            bots,
        }))
    }
}

/// The seats' websockets.
pub(crate) struct Fleet {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    statuses: BTreeMap<String, Arc<SocketStatus>>,
}

impl Fleet {
    /// Opens one socket per seat bot.
    pub fn start(
        mm: &Arc<Mattermost>,
        queue: Arc<dyn EventQueue>,
        follows: Arc<dyn ThreadFollows>,
        options: SocketOptions,
    ) -> Self {
        let (stop, stopped) = watch::channel(false);
        let inbox = Arc::new(inbox::FleetInbox::new(mm.clone(), queue, follows));
        let mut tasks = Vec::new();
        let mut statuses = BTreeMap::new();
        for (handle, bot) in &mm.bots {
            let socket = SeatSocket::new(
                handle,
                bot.client.clone(),
                &mm.team,
                options.clone(),
                inbox.clone(),
            );
            statuses.insert(handle.clone(), socket.status());
            tasks.push(tokio::spawn(socket.run(stopped.clone())));
        }
        info!(seats = tasks.len(), server = %mm.base, "mattermost fleet started");
        Self {
            stop,
            tasks,
            statuses,
        }
    }

    pub fn statuses(&self) -> &BTreeMap<String, Arc<SocketStatus>> {
        &self.statuses
    }

    /// Closes every socket and waits for them.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}
