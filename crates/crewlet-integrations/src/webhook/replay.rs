//! Replay keys: a signed body resent under a fresh delivery id is the same
//! delivery. Where a source's signature does not cover its delivery id
//! (GitHub's `X-GitHub-Delivery`, Atlassian's `X-Atlassian-Webhook-Identifier`,
//! Plane's header, GitLab's token mode), anyone who captured one request can
//! resend it with a new id; deduping on the digest of the signed body as
//! well refuses that within the dedupe window.

use super::{Headers, Source};

/// The second dedupe key of a verified delivery: the SHA-256 of its body
/// (`sha256:{hex}`) for sources whose signature leaves the delivery id
/// out, `None` where the id is signed (Slack's `event_id` is in the signed
/// body; GitLab's Standard Webhooks signature covers `webhook-id`). Each
/// source says which ([`WebhookSource::replay_key`](super::WebhookSource::replay_key)).
pub fn replay_key(source: Source, headers: &dyn Headers, body: &[u8]) -> Option<String> {
    source.webhook().replay_key(headers, body)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::gitlab::WEBHOOK_SIGNATURE_HEADER;
    use super::*;

    #[test]
    fn unsigned_ids_get_the_body_digest_and_signed_ids_none() {
        let none: HashMap<String, String> = HashMap::new();
        let body = br#"{"a":1}"#;
        let github = replay_key(Source::Github, &none, body);
        assert!(github.as_deref().is_some_and(|k| k.starts_with("sha256:")));
        assert_eq!(github, replay_key(Source::Jira, &none, body));
        assert_ne!(github, replay_key(Source::Github, &none, br#"{"a":2}"#));
        assert_eq!(replay_key(Source::Slack, &none, body), None);
        let mut signed = HashMap::new();
        signed.insert(WEBHOOK_SIGNATURE_HEADER.to_owned(), "v1,abc".to_owned());
        assert_eq!(replay_key(Source::Gitlab, &signed, body), None);
        assert!(replay_key(Source::Gitlab, &none, body).is_some());
    }
}
