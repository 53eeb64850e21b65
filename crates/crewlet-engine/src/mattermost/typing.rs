//! The Mattermost working status: the composer's "is typing..." line, raised
//! by the seat's bot while a turn about a Mattermost post runs, and
//! re-raised at the server's own `TimeBetweenUserTypingUpdatesMilliseconds`
//! (read once; 5 s when it cannot be read). `typing_status`: `off` (the
//! default), `addressed` (DMs, mentions, followed threads) or `always`.

use std::sync::Arc;
use std::time::Duration;

use crewlet_config::WorkingStatus as Mode;
use tokio::sync::OnceCell;
use tracing::debug;

use super::Mattermost;
use crate::seat::SeatRuntime;
use crate::task::TaskRequest;
use crate::working::{StatusGuard, WorkingStatus};

/// Used when the server's setting cannot be read.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);

pub(crate) struct Typing {
    mm: Arc<Mattermost>,
    interval: Arc<OnceCell<Duration>>,
}

impl Typing {
    /// `None` when `typing_status` is off.
    pub fn new(mm: &Arc<Mattermost>) -> Option<Self> {
        (mm.typing != Mode::Off).then(|| Self {
            mm: mm.clone(),
            interval: Arc::new(OnceCell::new()),
        })
    }
}

impl WorkingStatus for Typing {
    fn begin(&self, seat: &Arc<SeatRuntime>, request: &TaskRequest) -> Option<StatusGuard> {
        let handle = seat.seat.handle.as_str();
        if request.source != super::inbox::BACKEND {
            return None;
        }
        let personal = matches!(
            request.reason.as_deref(),
            Some("dm" | "mention" | "thread_follow")
        );
        if self.mm.typing == Mode::Addressed && !personal {
            return None;
        }
        let bot = self.mm.bots.get(handle)?.clone();
        let channel = request.channel.clone()?;
        let parent = request.thread.clone();
        let interval = self.interval.clone();
        Some(StatusGuard::new(tokio::spawn(async move {
            let every = *interval
                .get_or_init(|| async {
                    match bot.client.client_config().await {
                        Ok(c) => c
                            .get("TimeBetweenUserTypingUpdatesMilliseconds")
                            .and_then(|v| {
                                v.as_str()
                                    .and_then(|s| s.parse::<u64>().ok())
                                    .or(v.as_u64())
                            })
                            .filter(|ms| *ms > 0)
                            .map(Duration::from_millis)
                            .unwrap_or(DEFAULT_INTERVAL),
                        Err(_) => DEFAULT_INTERVAL,
                    }
                })
                .await;
            let Ok(me) = bot.account().await.cloned() else {
                return;
            };
            loop {
                if let Err(e) = bot
                    .client
                    .typing(&me.user_id, &channel, parent.as_deref())
                    .await
                {
                    debug!(seat = %me.handle, error = %e, "cannot raise the typing status");
                }
                tokio::time::sleep(every).await;
            }
        })))
    }
}
