//! Slack in the engine: the working status a seat's own bot shows in the
//! thread while a Slack-triggered turn runs (`integrations.slack`
//! `typing_status` and `status_phrases`). Inbound Slack events reach the
//! seats through the webhook API and the router, not through here.

mod phrases;
mod status;

pub(crate) use status::SlackStatus;

use std::collections::BTreeMap;
use std::sync::Arc;

use crewlet_config::{Company, Organization};
use crewlet_integrations::slack::SlackClient;
use tracing::warn;

use crate::engine::EnvLookup;

/// The seats' Slack bots, for posting as a seat (a colleague's question to a
/// person): the Web API client and each seat's expanded bot token.
pub(crate) struct SlackSeats {
    pub client: SlackClient,
    tokens: BTreeMap<String, String>,
}

impl SlackSeats {
    /// `None` without `integrations.slack` or without a seat bot token.
    pub fn from_company(
        company: &Company,
        org: &Organization,
        env: &EnvLookup,
    ) -> Option<Arc<Self>> {
        let settings = company.integrations.slack.as_ref()?;
        let expand = |raw: &str| crewlet_config::interpolate(raw, |v| env(v));
        let tokens: BTreeMap<String, String> = org
            .agents()
            .filter_map(|seat| {
                let raw = seat
                    .role
                    .integrations
                    .slack
                    .as_ref()?
                    .bot_token
                    .as_deref()?;
                let token = expand(raw).ok()?.trim().to_owned();
                (!token.is_empty()).then(|| (seat.handle.clone(), token))
            })
            .collect();
        if tokens.is_empty() {
            return None;
        }
        let base = expand(&settings.api_url).unwrap_or_else(|_| settings.api_url.clone());
        match SlackClient::new(&base) {
            Ok(client) => Some(Arc::new(Self { client, tokens })),
            Err(e) => {
                warn!(error = %e, "no Slack client; seats cannot post to Slack");
                None
            }
        }
    }

    /// Posts `text` to `channel` (a user id opens the DM) as `handle`'s bot.
    pub async fn post_as(&self, handle: &str, channel: &str, text: &str) -> Result<(), String> {
        self.post_in(handle, channel, text, None).await
    }

    /// Posts `text` as `handle`'s bot in `channel`, in the thread `thread_ts`.
    pub async fn post_in(
        &self,
        handle: &str,
        channel: &str,
        text: &str,
        thread_ts: Option<&str>,
    ) -> Result<(), String> {
        let token = self
            .tokens
            .get(handle)
            .ok_or_else(|| format!("`{handle}` has no Slack bot"))?;
        self.client
            .post_message(token, channel, text, thread_ts)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }

    pub fn has_bot(&self, handle: &str) -> bool {
        self.tokens.contains_key(handle)
    }
}
