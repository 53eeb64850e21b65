//! Confluence Cloud / Data Center webhooks: page and comment events.
//!
//! Signature: `X-Hub-Signature: sha256=<hex HMAC-SHA256 of body>` with
//! `integrations.confluence.webhook_secret`. Dedupe on
//! `X-Atlassian-Webhook-Identifier`, else the body's digest.
//!
//! Confluence payloads carry no page body by default; the notification's
//! text is the body excerpt when one is sent, else the title.

use serde_json::Value;

use super::headers::Headers;
use super::jira::{delivery_key, verify_hub_signature};
use super::json::{self, strip_html, text, unique};
use super::mentions;
use super::{Inbound, Notification, Source, WebhookError};
use crewlet_config::{Company, Contact, Organization, RoleIntegrations, UnitIntegrations};

use super::secrets::{Secret, SecretRef, WebhookSecrets};
use super::source::{WebhookRequest, WebhookSource};

pub use super::jira::{DELIVERY_HEADER, SIGNATURE_HEADER, signature};
pub const SECRET_KEY: &str = "integrations.confluence.webhook_secret";
/// Its field name: the [`WebhookSecrets`] slot.
pub const SECRET_NAME: &str = "webhook_secret";

const SOURCE: Source = Source::Confluence;

pub fn verify<H: Headers + ?Sized>(
    headers: &H,
    body: &[u8],
    webhook_secret: Option<&[u8]>,
) -> Result<(), WebhookError> {
    verify_hub_signature(SOURCE, SECRET_KEY, headers, body, webhook_secret)
}

/// `page_*` and `comment_*` events (named in `webhookEvent` or `eventType`,
/// else inferred from the payload) become notifications.
pub fn normalize<H: Headers + ?Sized>(headers: &H, body: &[u8]) -> Result<Inbound, WebhookError> {
    let delivery = delivery_key(headers, body);
    let payload = json::parse(SOURCE, body)?;
    let named = text(&payload, &["webhookEvent"]).or_else(|| text(&payload, &["eventType"]));
    let comment = payload.get("comment").filter(|c| c.is_object());
    let page = payload
        .get("page")
        .or_else(|| payload.get("blog"))
        .filter(|p| p.is_object());
    let kind = match (&named, comment, page) {
        (Some(name), _, _) => name.clone(),
        (None, Some(_), _) => "comment".to_string(),
        (None, None, Some(_)) => "page".to_string(),
        (None, None, None) => String::new(),
    };
    let routed =
        kind.starts_with("page") || kind.starts_with("blog") || kind.starts_with("comment");
    if !routed || kind.ends_with("_removed") || kind.ends_with("_trashed") {
        return Ok(Inbound::ignored(
            Some(delivery),
            format!(
                "confluence event {} is not routed",
                if kind.is_empty() { "(none)" } else { &kind }
            ),
        ));
    }
    let is_comment = kind.starts_with("comment");
    let subject = if is_comment { comment } else { page }.ok_or_else(|| WebhookError::BadJson {
        from: SOURCE,
        reason: format!(
            "{kind} event without a {} object",
            if is_comment { "comment" } else { "page" }
        ),
    })?;
    // A comment's page: its `parent` (or `container`), else the page sent alongside.
    let container = if is_comment {
        subject
            .get("parent")
            .or_else(|| subject.get("container"))
            .or(page)
            .cloned()
            .unwrap_or(Value::Null)
    } else {
        subject.clone()
    };
    let space = text(subject, &["spaceKey"])
        .or_else(|| text(&container, &["spaceKey"]))
        .or_else(|| text(&container, &["space", "key"]))
        .or_else(|| text(&payload, &["space", "key"]))
        .ok_or_else(|| WebhookError::BadJson {
            from: SOURCE,
            reason: format!("{kind} event without a space key"),
        })?;
    let storage = text(subject, &["body", "storage", "value"]).unwrap_or_default();
    let title = text(&container, &["title"]);
    let body_text = if storage.is_empty() {
        text(subject, &["excerpt"])
            .or_else(|| title.clone())
            .unwrap_or_default()
    } else {
        strip_html(&storage)
    };
    let mentions = unique(
        mentions::attribute_values(&storage, "ri:account-id")
            .into_iter()
            .chain(mentions::attribute_values(&storage, "ri:userkey")),
    );
    let sender = text(&payload, &["userAccountId"])
        .or_else(|| text(subject, &["lastModifierAccountId"]))
        .or_else(|| text(subject, &["creatorAccountId"]));
    let notification = Notification {
        source: SOURCE,
        kind,
        delivery_key: delivery,
        channel_or_project: space,
        thread: text(&container, &["id"]),
        sender,
        sender_is_bot: text(&payload, &["accountType"]).as_deref() == Some("app"),
        direct: false,
        title,
        text: body_text,
        assignees: Vec::new(),
        mentions,
        url: text(subject, &["self"]),
        raw: payload,
    };
    Ok(Inbound::Notification(Box::new(notification)))
}

/// [`verify`] then [`normalize`].
pub fn receive<H: Headers + ?Sized>(
    headers: &H,
    body: &[u8],
    webhook_secret: Option<&[u8]>,
) -> Result<Inbound, WebhookError> {
    verify(headers, body, webhook_secret)?;
    normalize(headers, body)
}

/// The source description the API, the router and the redaction checks ask.
pub struct Confluence;

impl WebhookSource for Confluence {
    fn source(&self) -> Source {
        SOURCE
    }

    fn secrets<'c>(&self, company: &'c Company, _org: &'c Organization) -> Vec<SecretRef<'c>> {
        let raw = company
            .integrations
            .confluence
            .as_ref()
            .and_then(|c| c.webhook_secret.as_ref());
        vec![SecretRef::company(SECRET_NAME, SECRET_KEY, raw)]
    }

    fn receive(
        &self,
        r: WebhookRequest<'_>,
        secrets: &WebhookSecrets,
    ) -> Result<Inbound, WebhookError> {
        let secret = secrets.get(SOURCE, SECRET_NAME, None).map(Secret::bytes);
        receive(r.headers, r.body, secret)
    }

    fn credential_headers(&self) -> &'static [&'static str] {
        &[SIGNATURE_HEADER]
    }

    fn kept_headers(&self) -> &'static [&'static str] {
        &[
            DELIVERY_HEADER,
            "x-atlassian-webhook-retry",
            "x-atlassian-webhook-flow",
        ]
    }

    fn seat_account<'s>(&self, i: &'s RoleIntegrations) -> Option<&'s str> {
        i.confluence.as_ref().and_then(|a| a.user.as_deref())
    }

    fn contact_id<'s>(&self, c: &'s Contact) -> Option<&'s str> {
        c.atlassian_account_id.as_deref()
    }

    fn unit_projects<'u>(&self, i: &'u UnitIntegrations) -> &'u [String] {
        &i.confluence_spaces
    }

    fn seat_project<'s>(&self, i: &'s RoleIntegrations) -> Option<&'s str> {
        i.confluence.as_ref().and_then(|c| c.space.as_deref())
    }

    fn unit_project<'u>(
        &self,
        i: &'u UnitIntegrations,
        _slack_channel: Option<&'u str>,
    ) -> Option<&'u str> {
        i.confluence.as_ref().map(|c| c.space.as_str())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Computed independently with Python:
    /// `hmac.new(b"confluence-secret", b'{"page":{"id":1}}', sha256)`.
    #[test]
    fn confluence_known_answer_verifies() {
        let headers = [(
            "X-Hub-Signature",
            "sha256=13eee01368815b8f7e07e845a70a39c9476cf6b03cf7a36ad7ab9e52284ac549",
        )];
        let body = br#"{"page":{"id":1}}"#;
        verify(&headers, body, Some(b"confluence-secret")).unwrap();
        assert!(matches!(
            verify(&headers, body, Some(b"jira-secret")),
            Err(WebhookError::BadSignature { .. })
        ));
        assert!(matches!(
            verify(&headers, body, Some(b"")),
            Err(WebhookError::MissingSecret { .. })
        ));
    }

    #[test]
    fn page_updated() {
        let p = json!({
            "webhookEvent": "page_updated", "userAccountId": "acc-editor", "timestamp": 1,
            "page": {"id": 6127617, "spaceKey": "ENG", "title": "Runbook",
                     "self": "https://acme.atlassian.net/wiki/spaces/ENG/pages/6127617/Runbook",
                     "body": {"storage": {"value": "<p>Owner: <ac:link><ri:user ri:account-id=\"acc-agent\" /></ac:link> please review</p>"}}},
        });
        let body = serde_json::to_vec(&p).unwrap();
        let headers = vec![
            ("X-Hub-Signature".to_string(), signature(b"s", &body)),
            (
                "X-Atlassian-Webhook-Identifier".to_string(),
                "c-1".to_string(),
            ),
        ];
        let n = receive(&headers, &body, Some(b"s")).unwrap();
        let n = n.notification().unwrap();
        assert_eq!(n.kind, "page_updated");
        assert_eq!(n.delivery_key, "c-1");
        assert_eq!(n.channel_or_project, "ENG");
        assert_eq!(n.thread.as_deref(), Some("6127617"));
        assert_eq!(n.title.as_deref(), Some("Runbook"));
        assert_eq!(n.text, "Owner: please review");
        assert_eq!(n.mentions, ["acc-agent"]);
        assert_eq!(n.sender.as_deref(), Some("acc-editor"));
    }

    #[test]
    fn comment_created_threads_on_its_page() {
        let p = json!({
            "userAccountId": "acc-bob",
            "comment": {"id": 99, "self": "https://acme.atlassian.net/wiki/x#comment-99",
                        "parent": {"id": 6127617, "title": "Runbook", "spaceKey": "ENG"}},
        });
        let body = serde_json::to_vec(&p).unwrap();
        let n = normalize(&[("a", "b")], &body).unwrap();
        let n = n.notification().unwrap();
        assert_eq!(n.kind, "comment");
        assert_eq!(n.thread.as_deref(), Some("6127617"));
        assert_eq!(n.channel_or_project, "ENG");
        assert_eq!(n.text, "Runbook");
    }

    #[test]
    fn other_events_ignored_bad_payloads_refused() {
        let space = br#"{"webhookEvent":"space_created","space":{"key":"X"}}"#;
        assert!(matches!(
            normalize(&[("a", "b")], space).unwrap(),
            Inbound::Ignored { .. }
        ));
        let removed = br#"{"webhookEvent":"page_removed","page":{"id":1,"spaceKey":"X"}}"#;
        assert!(matches!(
            normalize(&[("a", "b")], removed).unwrap(),
            Inbound::Ignored { .. }
        ));
        let no_space = br#"{"webhookEvent":"page_created","page":{"id":1}}"#;
        assert!(matches!(
            normalize(&[("a", "b")], no_space),
            Err(WebhookError::BadJson { .. })
        ));
        let no_page = br#"{"webhookEvent":"page_created"}"#;
        assert!(matches!(
            normalize(&[("a", "b")], no_page),
            Err(WebhookError::BadJson { .. })
        ));
    }
}
