//! Inbound webhooks: verification and normalization, one module per source.
//!
//! Every source module exposes the same three pure functions:
//! - `verify(headers, body, secret, ..)`: is this request really from the
//!   source? Constant-time comparisons only; a missing or empty secret is
//!   [`WebhookError::MissingSecret`], never "accept everything".
//! - `normalize(headers, body)`: the request as an [`Inbound`], assuming it
//!   was verified.
//! - `receive(..)`: `verify` then `normalize`.
//!
//! and implements [`WebhookSource`] (reached with [`Source::webhook`]): the
//! one place that knows the source's secrets ([`WebhookSecrets`]), its
//! headers (kept, credential, secret), its accepted status, and the seat
//! identities and ownership the router matches. The API maps a
//! [`WebhookError`] to a status with [`WebhookError::status_code`],
//! [`WebhookError::code`] and [`WebhookError::retry_after_secs`].
//!
//! Also here: the [`RawWebhook`] envelope of the `raw_webhook` event (an
//! [`EventPayload`](crewlet_core::payload::EventPayload)), and the
//! claim-then-publish-then-release dedupe policy ([`dedupe`]) the API and
//! the router share.

pub mod confluence;
pub mod dedupe;
pub mod github;
pub mod gitlab;
pub mod jira;
pub mod mattermost;
pub mod plane;
pub mod slack;

mod headers;
mod json;
pub(crate) mod mentions;
mod notification;
pub mod prompt;
mod raw;
mod replay;
mod secrets;
mod signature;
mod source;

pub use headers::Headers;
pub use notification::{Inbound, Notification, Source};
pub use raw::{
    EVENT_SOURCE, RawWebhook, TAG_DELIVERY_KEY, TAG_HANDLE, TAG_WEBHOOK_SOURCE, delivery_key_tag,
};
pub use replay::replay_key;
pub use secrets::{Secret, SecretRef, WebhookSecrets};
pub use source::{WebhookRequest, WebhookSource, kept_headers};

/// Why an inbound webhook was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// The signature or token does not match the body and the secret.
    #[error("{from} webhook: header {header} does not match the body and the configured secret")]
    BadSignature { from: Source, header: &'static str },
    /// The signed timestamp is too far from now (a replay, or a bad clock).
    #[error(
        "{from} webhook: timestamp {timestamp} in header {header} is more than {tolerance_secs} s away from now"
    )]
    StaleTimestamp {
        from: Source,
        header: &'static str,
        timestamp: String,
        tolerance_secs: i64,
    },
    /// A header the source always sends is absent or not text.
    #[error("{from} webhook: header {header} is missing or not valid text")]
    MissingHeader { from: Source, header: &'static str },
    /// The body is not JSON, or lacks a field the source always sends.
    #[error("{from} webhook: body is not the expected JSON: {reason}")]
    BadJson { from: Source, reason: String },
    /// No secret is configured, so nothing can be verified yet.
    #[error("{from} webhook: no secret is configured; set {key} in the company YAML")]
    MissingSecret { from: Source, key: &'static str },
}

impl WebhookError {
    /// The HTTP status the API answers with: 401 for authentication failures
    /// (a missing header the source lists among its
    /// [`credential_headers`](WebhookSource::credential_headers) included),
    /// 400 for malformed requests, 503 when no secret is configured.
    pub fn status_code(&self) -> u16 {
        match self {
            WebhookError::BadSignature { .. } | WebhookError::StaleTimestamp { .. } => 401,
            WebhookError::MissingHeader { from, header } => {
                if from.webhook().credential_headers().contains(header) {
                    401
                } else {
                    400
                }
            }
            WebhookError::BadJson { .. } => 400,
            WebhookError::MissingSecret { .. } => 503,
        }
    }

    /// The machine-readable code of the API's error body.
    pub fn code(&self) -> &'static str {
        match self {
            WebhookError::BadSignature { .. } => "bad_signature",
            WebhookError::StaleTimestamp { .. } => "stale_timestamp",
            WebhookError::MissingHeader { .. } if self.status_code() == 401 => "missing_signature",
            WebhookError::MissingHeader { .. } => "missing_header",
            WebhookError::BadJson { .. } => "bad_json",
            WebhookError::MissingSecret { .. } => "missing_secret",
        }
    }

    /// `Retry-After` seconds to send with the status, if any: the sender should
    /// retry once the operator has configured the secret.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            WebhookError::MissingSecret { .. } => Some(300),
            _ => None,
        }
    }

    /// Which source refused the request.
    pub fn source(&self) -> Source {
        match self {
            WebhookError::BadSignature { from, .. }
            | WebhookError::StaleTimestamp { from, .. }
            | WebhookError::MissingHeader { from, .. }
            | WebhookError::BadJson { from, .. }
            | WebhookError::MissingSecret { from, .. } => *from,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_the_documented_statuses() {
        let bad = WebhookError::BadSignature {
            from: Source::Github,
            header: github::SIGNATURE_HEADER,
        };
        assert_eq!(bad.status_code(), 401);
        assert_eq!(bad.retry_after_secs(), None);
        let stale = WebhookError::StaleTimestamp {
            from: Source::Slack,
            header: slack::TIMESTAMP_HEADER,
            timestamp: "1".into(),
            tolerance_secs: 300,
        };
        assert_eq!(stale.status_code(), 401);
        let missing_sig = WebhookError::MissingHeader {
            from: Source::Github,
            header: github::SIGNATURE_HEADER,
        };
        assert_eq!(missing_sig.status_code(), 401);
        let missing_delivery = WebhookError::MissingHeader {
            from: Source::Github,
            header: github::DELIVERY_HEADER,
        };
        assert_eq!(missing_delivery.status_code(), 400);
        let json = WebhookError::BadJson {
            from: Source::Plane,
            reason: "x".into(),
        };
        assert_eq!(json.status_code(), 400);
        let secret = WebhookError::MissingSecret {
            from: Source::Jira,
            key: jira::SECRET_KEY,
        };
        assert_eq!(secret.status_code(), 503);
        assert_eq!(secret.retry_after_secs(), Some(300));
        assert_eq!(secret.source(), Source::Jira);
        assert_eq!(bad.code(), "bad_signature");
        assert_eq!(stale.code(), "stale_timestamp");
        assert_eq!(missing_sig.code(), "missing_signature");
        assert_eq!(missing_delivery.code(), "missing_header");
        assert_eq!(json.code(), "bad_json");
        assert_eq!(secret.code(), "missing_secret");
    }

    /// Every header a source reports missing as a credential is 401 for
    /// that source, whichever module the header constant lives in.
    #[test]
    fn credential_headers_are_the_sources_own() {
        for (from, header) in [
            (Source::Slack, slack::SIGNATURE_HEADER),
            (Source::Slack, slack::TIMESTAMP_HEADER),
            (Source::Github, github::SIGNATURE_HEADER),
            (Source::Gitlab, gitlab::TOKEN_HEADER),
            (Source::Gitlab, gitlab::WEBHOOK_SIGNATURE_HEADER),
            (Source::Gitlab, gitlab::WEBHOOK_TIMESTAMP_HEADER),
            (Source::Gitlab, gitlab::WEBHOOK_ID_HEADER),
            (Source::Plane, plane::SIGNATURE_HEADER),
            (Source::Jira, jira::SIGNATURE_HEADER),
            (Source::Confluence, jira::SIGNATURE_HEADER),
        ] {
            let e = WebhookError::MissingHeader { from, header };
            assert_eq!(e.status_code(), 401, "{from} {header}");
        }
        for (from, header) in [
            (Source::Github, github::EVENT_HEADER),
            (Source::Gitlab, gitlab::EVENT_HEADER),
            (Source::Plane, plane::EVENT_HEADER),
        ] {
            let e = WebhookError::MissingHeader { from, header };
            assert_eq!(e.status_code(), 400, "{from} {header}");
        }
    }

    #[test]
    fn error_messages_name_the_input_and_the_fix() {
        let e = WebhookError::MissingSecret {
            from: Source::Github,
            key: github::SECRET_KEY,
        };
        assert_eq!(
            e.to_string(),
            "github webhook: no secret is configured; set integrations.github.webhook_secret in the company YAML"
        );
        let e = WebhookError::MissingHeader {
            from: Source::Slack,
            header: slack::SIGNATURE_HEADER,
        };
        assert!(e.to_string().contains("x-slack-signature"));
    }
}
