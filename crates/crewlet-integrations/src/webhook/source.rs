//! [`WebhookSource`]: everything Crewlet knows about one webhook source, in
//! that source's module. The API's webhook route, the engine's router and
//! the redaction checks ask the source (`Source::webhook()`) instead of
//! matching on [`Source`] themselves.

use chrono::{DateTime, Utc};
use crewlet_config::{Company, Contact, Organization, RoleIntegrations, UnitIntegrations};

use super::secrets::{SecretRef, WebhookSecrets};
use super::signature::body_key;
use super::{Headers, Inbound, Source, WebhookError};
use super::{confluence, github, gitlab, jira, mattermost, plane, slack};

/// One inbound request, as a source verifies it.
#[derive(Clone, Copy)]
pub struct WebhookRequest<'a> {
    pub headers: &'a dyn Headers,
    pub body: &'a [u8],
    /// The seat named in the URL, if any (Slack's secret is that seat's).
    pub handle: Option<&'a str>,
    /// For signed timestamps: the caller's clock.
    pub now: DateTime<Utc>,
}

/// One webhook source: verification and normalization, where its secrets
/// sit in the company, which headers it sends (kept, credential, secret),
/// how it answers, and who a seat is on it.
pub trait WebhookSource: Send + Sync + 'static {
    fn source(&self) -> Source;

    // --- secrets -------------------------------------------------------

    /// The secrets this source verifies with, read from the company: their
    /// names, paths and raw values ([`WebhookSecrets::from_company`]
    /// expands them).
    fn secrets<'c>(&self, company: &'c Company, org: &'c Organization) -> Vec<SecretRef<'c>>;

    /// Company YAML fields holding this source's credentials (webhook
    /// secrets and account tokens): `crewlet-telemetry` redacts every value
    /// under these keys (a test asserts its list covers them). Most sources
    /// sign with a `webhook_secret` and call their API with a `token`.
    fn secret_fields(&self) -> &'static [&'static str] {
        &["webhook_secret", "token"]
    }

    // --- verification ----------------------------------------------------

    /// Verifies `request` with this source's secret from `secrets`, then
    /// normalizes it.
    fn receive(
        &self,
        request: WebhookRequest<'_>,
        secrets: &WebhookSecrets,
    ) -> Result<Inbound, WebhookError>;

    /// The second dedupe key of a verified delivery (see
    /// [`super::replay_key`]): by default the digest of the signed body,
    /// since a replayed delivery is the same bytes.
    fn replay_key(&self, _headers: &dyn Headers, body: &[u8]) -> Option<String> {
        Some(body_key(body))
    }

    /// `Err(reason)` when the seat `handle` has no route on this source at
    /// all (404): Slack retries a 503 for ever, so a seat without its own
    /// Slack app has no Slack URL.
    fn seat_route(&self, _secrets: &WebhookSecrets, _handle: &str) -> Result<(), String> {
        Ok(())
    }

    // --- HTTP ------------------------------------------------------------

    /// Headers whose absence means "not authenticated" (401) rather than
    /// "malformed" (400).
    fn credential_headers(&self) -> &'static [&'static str];

    /// Headers that carry a signature or token: never copied into events.
    /// By default every credential header is one.
    fn secret_headers(&self) -> &'static [&'static str] {
        self.credential_headers()
    }

    /// Headers that identify a delivery (event name, delivery id, retry
    /// count), copied into the `raw_webhook` event.
    fn kept_headers(&self) -> &'static [&'static str];

    /// The status of an accepted (or ignored, or repeated) delivery.
    fn accepted_status(&self) -> u16 {
        202
    }

    // --- identities and ownership ---------------------------------------

    /// The seat's own account on this source (`integrations.github.user`,
    /// `integrations.slack.bot_user_id`, ...).
    fn seat_account<'s>(&self, integrations: &'s RoleIntegrations) -> Option<&'s str>;

    /// The `contact` field that identifies a person on this source.
    fn contact_id<'s>(&self, contact: &'s Contact) -> Option<&'s str>;

    /// Whether `@handle` in a text names a seat by its handle (everywhere
    /// but Slack, whose mentions are user ids).
    fn handle_is_identity(&self) -> bool {
        true
    }

    /// The project, space or channel an org-wide seat owns here.
    fn seat_project<'s>(&self, _integrations: &'s RoleIntegrations) -> Option<&'s str> {
        None
    }

    /// The single project, space or channel a unit names for this source
    /// (`integrations.jira.project`, the unit's `slack_channel`, ...).
    fn unit_project<'u>(
        &self,
        _integrations: &'u UnitIntegrations,
        _slack_channel: Option<&'u str>,
    ) -> Option<&'u str> {
        None
    }

    /// The list of projects, repositories or channels a unit owns here.
    fn unit_projects<'u>(&self, integrations: &'u UnitIntegrations) -> &'u [String];

    /// A bot's message wakes only the seats it mentions (a chat loop guard:
    /// two seats' bots in one channel would otherwise wake each other).
    fn bot_messages_need_a_mention(&self) -> bool {
        false
    }

    /// A seat a message is routed to follows its thread.
    fn follows_threads(&self) -> bool {
        false
    }
}

impl Source {
    /// This source's [`WebhookSource`].
    pub fn webhook(self) -> &'static dyn WebhookSource {
        match self {
            Source::Slack => &slack::Slack,
            Source::Github => &github::Github,
            Source::Gitlab => &gitlab::Gitlab,
            Source::Plane => &plane::Plane,
            Source::Jira => &jira::Jira,
            Source::Confluence => &confluence::Confluence,
            Source::Mattermost => &mattermost::Mattermost,
        }
    }
}

/// Headers kept from every delivery whatever its source.
const COMMON_KEPT_HEADERS: &[&str] = &["content-type", "user-agent"];

/// The headers copied into `raw_webhook` events: the common ones and every
/// source's [`kept_headers`](WebhookSource::kept_headers) (a request
/// keeps whichever of them it carries).
pub fn kept_headers() -> impl Iterator<Item = &'static str> {
    COMMON_KEPT_HEADERS.iter().copied().chain(
        Source::ALL
            .into_iter()
            .flat_map(|s| s.webhook().kept_headers().iter().copied()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_describes_itself() {
        for s in Source::ALL {
            assert_eq!(s.webhook().source(), s);
        }
    }

    #[test]
    fn no_secret_header_is_ever_kept() {
        for s in Source::ALL {
            for secret in s.webhook().secret_headers() {
                assert!(
                    kept_headers().all(|k| k != *secret),
                    "{s}: {secret} is kept"
                );
                assert!(s.webhook().credential_headers().contains(secret));
            }
        }
    }

    #[test]
    fn slack_answers_200_and_the_others_202() {
        for s in Source::ALL {
            let want = if s == Source::Slack { 200 } else { 202 };
            if s == Source::Mattermost {
                continue;
            }
            assert_eq!(s.webhook().accepted_status(), want, "{s}");
        }
    }
}
