//! Where a coding agent's question to a person goes: the conversation its
//! task came from, posted by the seat's own bot. A Mattermost thread is
//! followed from then on, so the person's reply in it reaches the seat
//! (and resumes the run) without a mention.

use std::sync::Arc;

use crewlet_core::payload::TaskRequest;
use crewlet_store::{ThreadFollows, ThreadRef};

use crate::mattermost::Mattermost;
use crate::slack::SlackSeats;

/// The chat surfaces a seat can ask on.
#[derive(Clone, Default)]
pub(crate) struct ChatSurfaces {
    pub mattermost: Option<Arc<Mattermost>>,
    pub slack: Option<Arc<SlackSeats>>,
    pub follows: Option<Arc<dyn ThreadFollows>>,
}

impl ChatSurfaces {
    /// Whether `handle` can post in the conversation `request` came from.
    pub fn can_post(&self, handle: &str, request: &TaskRequest) -> bool {
        if request.channel.as_deref().is_none_or(str::is_empty) {
            return false;
        }
        match request.source.as_str() {
            "mattermost" => self
                .mattermost
                .as_ref()
                .is_some_and(|mm| mm.bots.contains_key(handle)),
            "slack" => self.slack.as_ref().is_some_and(|s| s.has_bot(handle)),
            _ => false,
        }
    }

    /// Posts `text` as `handle` in the thread (or direct channel) of `request`.
    pub async fn post(
        &self,
        handle: &str,
        request: &TaskRequest,
        text: &str,
    ) -> Result<(), String> {
        let channel = request
            .channel
            .as_deref()
            .filter(|c| !c.is_empty())
            .ok_or("the task names no channel")?;
        let thread = request.thread.as_deref().filter(|t| !t.is_empty());
        match request.source.as_str() {
            "mattermost" => {
                let bot = self
                    .mattermost
                    .as_ref()
                    .and_then(|mm| mm.bots.get(handle))
                    .ok_or_else(|| format!("`{handle}` has no Mattermost bot"))?;
                let post = bot
                    .client
                    .create_post(channel, text, thread)
                    .await
                    .map_err(|e| format!("cannot post on Mattermost: {e}"))?;
                // The reply comes in this thread: the seat follows it.
                let root = thread.unwrap_or(post.id.as_str());
                if let Some(follows) = &self.follows {
                    let t = ThreadRef::new(crate::mattermost::inbox::BACKEND, channel, root);
                    if let Err(e) = follows.follow(handle, &t).await {
                        tracing::warn!(agent = handle, error = %e, "cannot follow the thread the question was asked in");
                    }
                }
                Ok(())
            }
            "slack" => {
                let slack = self
                    .slack
                    .as_ref()
                    .ok_or_else(|| format!("`{handle}` has no Slack bot"))?;
                slack.post_in(handle, channel, text, thread).await
            }
            other => Err(format!("cannot post on `{other}`")),
        }
    }
}
