//! Mattermost as a [`WebhookSource`]: who a seat is on it and what it owns.
//! Mattermost has no usable inbound webhook (its outgoing webhooks fire only
//! in public channels and carry no thread, channel type or mentions), so
//! nothing arrives over HTTP: the engine holds one websocket per seat
//! ([`crate::mattermost`]) and publishes what it reads as `raw_webhook`
//! events with this source.

use crewlet_config::{Company, Contact, Organization, RoleIntegrations, UnitIntegrations};

use super::secrets::{SecretRef, WebhookSecrets};
use super::source::{WebhookRequest, WebhookSource};
use super::{Inbound, Source, WebhookError};

pub struct Mattermost;

impl WebhookSource for Mattermost {
    fn source(&self) -> Source {
        Source::Mattermost
    }

    fn secrets<'c>(&self, _company: &'c Company, _org: &'c Organization) -> Vec<SecretRef<'c>> {
        Vec::new()
    }

    fn secret_fields(&self) -> &'static [&'static str] {
        &["bot_token"]
    }

    fn receive(
        &self,
        _request: WebhookRequest<'_>,
        _secrets: &WebhookSecrets,
    ) -> Result<Inbound, WebhookError> {
        Err(WebhookError::BadJson {
            from: Source::Mattermost,
            reason: "Mattermost is read over each seat's websocket, not received as a webhook"
                .into(),
        })
    }

    fn seat_route(&self, _secrets: &WebhookSecrets, _handle: &str) -> Result<(), String> {
        Err("Mattermost has no webhook route: the engine opens a websocket per seat".into())
    }

    fn credential_headers(&self) -> &'static [&'static str] {
        &[]
    }

    fn kept_headers(&self) -> &'static [&'static str] {
        &[]
    }

    /// The bot's username: the handle unless `username` is set.
    fn seat_account<'s>(&self, i: &'s RoleIntegrations) -> Option<&'s str> {
        i.mattermost
            .as_ref()
            .map(|m| m.username.as_str())
            .filter(|u| !u.is_empty())
    }

    fn contact_id<'s>(&self, c: &'s Contact) -> Option<&'s str> {
        c.mattermost_user_id.as_deref()
    }

    fn unit_projects<'u>(&self, _i: &'u UnitIntegrations) -> &'u [String] {
        &[]
    }

    fn bot_messages_need_a_mention(&self) -> bool {
        true
    }

    fn follows_threads(&self) -> bool {
        true
    }
}
