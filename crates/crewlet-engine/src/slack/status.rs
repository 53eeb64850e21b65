//! The Slack working status: `assistant.threads.setStatus` as the seat's
//! own bot, in the thread a Slack-triggered turn is about, while that turn
//! runs ("Eng is weighing it up..."). Slack drops a status after two
//! minutes, so it is re-asserted every [`HEARTBEAT`] (the same words:
//! the phrase depends only on seat, channel, thread, task and phase) and
//! at once when the turn moves to another phase. When the turn ends the
//! status is cleared (an empty status). Every call is best effort: a
//! refusal or a rate limit is logged at debug and the turn goes on.
//!
//! It needs the company's `integrations.slack` block. `typing_status`:
//! `addressed` (the default) shows it only when someone
//! is plausibly waiting on this seat: a direct message, or a message that
//! mentions the seat's bot (`<@U...>`; its user id is
//! `integrations.slack.bot_user_id`, else asked once with `auth.test`).
//! `always` shows it on every Slack turn; `off` never.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crewlet_config::{Company, Organization, WorkingStatus as Mode};
use crewlet_integrations::slack::SlackClient;
use tokio::sync::{OnceCell, oneshot};
use tracing::{debug, warn};

use super::phrases::Phrases;
use crate::engine::EnvLookup;
use crate::seat::SeatRuntime;
use crate::task::TaskRequest;
use crate::working::{StatusGuard, WorkingStatus};

/// Slack forgets a status after 2 minutes: two tries fit in each window.
const HEARTBEAT: Duration = Duration::from_secs(45);
/// How often the seat's phase is looked at (an in-memory read).
const PHASE_POLL: Duration = Duration::from_millis(500);
/// A status is never held longer than this, whatever happens to the turn.
const MAX_SHOWN: Duration = Duration::from_secs(3600);
/// The phase shown before the turn reports one (every turn plans first).
const FIRST_PHASE: &str = "plan";
/// `TaskRequest::source` of Slack tasks.
const SOURCE: &str = "slack";

/// A seat's bot.
struct Bot {
    handle: String,
    token: String,
    /// From the company file, else `auth.test` (once; `None` if it fails).
    user_id: OnceCell<Option<String>>,
}

impl Bot {
    async fn user_id(&self, client: &SlackClient) -> Option<&str> {
        self.user_id
            .get_or_init(|| async {
                match client.auth_test(&self.token).await {
                    Ok(me) => Some(me.user_id).filter(|u| !u.is_empty()),
                    Err(e) => {
                        debug!(seat = %self.handle, error = %e, "cannot ask slack who the seat's bot is");
                        None
                    }
                }
            })
            .await
            .as_deref()
    }
}

/// The company's Slack working status.
pub(crate) struct SlackStatus {
    inner: Arc<Inner>,
}

struct Inner {
    client: SlackClient,
    mode: Mode,
    phrases: Phrases,
    bots: BTreeMap<String, Arc<Bot>>,
}

impl SlackStatus {
    /// `None` without the company's `integrations.slack` block (even `{}`
    /// turns Slack on), when `typing_status` is off, or when no agent seat
    /// has a Slack bot token. A token that cannot be expanded leaves its
    /// seat out with a warning naming the seat (never a value).
    pub fn from_company(company: &Company, org: &Organization, env: &EnvLookup) -> Option<Self> {
        let settings = company.integrations.slack.clone()?;
        let mode = settings.typing_status.unwrap_or(Mode::Addressed);
        if mode == Mode::Off {
            return None;
        }
        let expand = |raw: &str| crewlet_config::interpolate(raw, |v| env(v));
        let mut bots = BTreeMap::new();
        for seat in org.agents() {
            let Some(slack) = seat.role.integrations.slack.as_ref() else {
                continue;
            };
            let Some(raw) = slack.bot_token.as_deref().filter(|t| !t.trim().is_empty()) else {
                continue;
            };
            let token = match expand(raw) {
                Ok(t) if !t.trim().is_empty() => t.trim().to_owned(),
                Ok(_) => {
                    debug!(seat = %seat.handle, "the seat's Slack bot_token is empty; no working status");
                    continue;
                }
                Err(e) => {
                    warn!(seat = %seat.handle, error = %e, "the seat's Slack bot_token cannot be expanded; no working status");
                    continue;
                }
            };
            let user_id = OnceCell::new();
            if let Some(id) = slack
                .bot_user_id
                .as_deref()
                .and_then(|raw| expand(raw).ok())
                .map(|id| id.trim().to_owned())
                .filter(|id| !id.is_empty())
            {
                let _ = user_id.set(Some(id));
            }
            bots.insert(
                seat.handle.clone(),
                Arc::new(Bot {
                    handle: seat.handle.clone(),
                    token,
                    user_id,
                }),
            );
        }
        if bots.is_empty() {
            return None;
        }
        let api_url = if settings.api_url.trim().is_empty() {
            "https://slack.com/api".to_owned()
        } else {
            expand(&settings.api_url).unwrap_or_else(|_| settings.api_url.clone())
        };
        let client = match SlackClient::new(&api_url) {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "no http client for Slack; working statuses stay off");
                return None;
            }
        };
        Some(Self {
            inner: Arc::new(Inner {
                client,
                mode,
                phrases: Phrases::new(settings.status_phrases.as_ref()),
                bots,
            }),
        })
    }
}

/// `<@U123>` or `<@U123|name>` in `text`.
fn mentions(text: &str, user_id: &str) -> bool {
    text.contains(&format!("<@{user_id}>")) || text.contains(&format!("<@{user_id}|"))
}

/// A stable seed of one turn in one thread.
fn seed(handle: &str, channel: &str, thread: &str, task_id: &str) -> String {
    format!("{handle}\u{1f}{channel}\u{1f}{thread}\u{1f}{task_id}")
}

impl WorkingStatus for SlackStatus {
    fn begin(&self, seat: &Arc<SeatRuntime>, request: &TaskRequest) -> Option<StatusGuard> {
        if request.source != SOURCE {
            return None;
        }
        let bot = self.inner.bots.get(seat.seat.handle.as_str())?.clone();
        let channel = request.channel.clone().filter(|c| !c.is_empty())?;
        let thread = request.thread.clone().filter(|t| !t.is_empty())?;
        // Said to the seat, whatever the text: a DM, or a route that says so.
        let personal = request.direct
            || matches!(
                request.reason.as_deref(),
                Some("dm" | "mention" | "thread_follow")
            );
        let check_mention = self.inner.mode == Mode::Addressed && !personal;
        let content = check_mention.then(|| request.content.clone());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let inner = self.inner.clone();
        let seat = seat.clone();
        tokio::spawn(async move {
            if let Some(content) = content {
                let addressed = match bot.user_id(&inner.client).await {
                    Some(id) => mentions(&content, id),
                    None => false,
                };
                if !addressed {
                    return;
                }
            }
            inner.show(&bot, &seat, &channel, &thread, stop_rx).await;
        });
        // Aborting this task (dropping the guard) drops `stop_tx`, which
        // ends the heartbeat above: it then clears the status itself, so
        // the clear never races a status still on its way.
        Some(StatusGuard::new(tokio::spawn(async move {
            let _stop = stop_tx;
            std::future::pending::<()>().await;
        })))
    }
}

impl Inner {
    async fn show(
        &self,
        bot: &Bot,
        seat: &SeatRuntime,
        channel: &str,
        thread: &str,
        mut stop: oneshot::Receiver<()>,
    ) {
        let since = Instant::now();
        let mut shown: Option<(String, Instant)> = None;
        loop {
            let current = seat.current_task();
            let task_id = current
                .as_ref()
                .map(|t| t.task_id.clone())
                .unwrap_or_default();
            let phase = current
                .and_then(|t| t.phase)
                .unwrap_or_else(|| FIRST_PHASE.to_owned());
            let due = match &shown {
                None => true,
                Some((p, at)) => *p != phase || at.elapsed() >= HEARTBEAT,
            };
            if due {
                let seed = seed(&bot.handle, channel, thread, &task_id);
                let phrase = self.phrases.pick(&phase, &seed);
                self.set(bot, channel, thread, phrase).await;
                shown = Some((phase, Instant::now()));
            }
            if since.elapsed() >= MAX_SHOWN {
                debug!(seat = %bot.handle, "the Slack working status was shown for its longest; cleared");
                break;
            }
            tokio::select! {
                _ = &mut stop => break,
                () = tokio::time::sleep(PHASE_POLL) => {}
            }
        }
        if shown.is_some() {
            self.set(bot, channel, thread, "").await;
        }
    }

    async fn set(&self, bot: &Bot, channel: &str, thread: &str, status: &str) {
        if let Err(e) = self
            .client
            .set_status(&bot.token, channel, thread, status)
            .await
        {
            debug!(seat = %bot.handle, %channel, error = %e, cleared = status.is_empty(),
                   "cannot set the Slack working status");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mention_is_the_bots_id_in_slacks_markup() {
        assert!(mentions("hey <@UENG> look", "UENG"));
        assert!(mentions("hey <@UENG|eng> look", "UENG"));
        assert!(!mentions("hey <@UENGX> look", "UENG"));
        assert!(!mentions("hey UENG look", "UENG"));
    }
}
