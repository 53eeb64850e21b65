//! Jira Cloud / Data Center webhooks.
//!
//! Signature: `X-Hub-Signature: sha256=<hex HMAC-SHA256 of body>` with
//! `integrations.jira.webhook_secret`. Dedupe on
//! `X-Atlassian-Webhook-Identifier` (stable across retries), else the body's
//! digest.

use serde_json::Value;

use super::headers::{Headers, get};
use super::json::{self, push_unique, text, unique};
use super::mentions;
use super::signature::{body_key, hmac_sha256, require_secret, verify_hex_hmac};
use super::{Inbound, Notification, Source, WebhookError};
use crewlet_config::{Company, Contact, Organization, RoleIntegrations, UnitIntegrations};

use super::secrets::{Secret, SecretRef, WebhookSecrets};
use super::source::{WebhookRequest, WebhookSource};

pub const SIGNATURE_HEADER: &str = "x-hub-signature";
pub const DELIVERY_HEADER: &str = "x-atlassian-webhook-identifier";
pub const SECRET_KEY: &str = "integrations.jira.webhook_secret";
/// Its field name: the [`WebhookSecrets`] slot.
pub const SECRET_NAME: &str = "webhook_secret";

const SOURCE: Source = Source::Jira;

/// The `X-Hub-Signature: sha256=` check shared by Jira and Confluence.
pub(crate) fn verify_hub_signature<H: Headers + ?Sized>(
    from: Source,
    key: &'static str,
    headers: &H,
    body: &[u8],
    webhook_secret: Option<&[u8]>,
) -> Result<(), WebhookError> {
    let secret = require_secret(from, key, webhook_secret)?;
    let sig = get(headers, SIGNATURE_HEADER).ok_or(WebhookError::MissingHeader {
        from,
        header: SIGNATURE_HEADER,
    })?;
    verify_hex_hmac(from, SIGNATURE_HEADER, sig, "sha256=", secret, &[body])
}

/// The delivery id Atlassian sends, else the body's digest.
pub(crate) fn delivery_key<H: Headers + ?Sized>(headers: &H, body: &[u8]) -> String {
    get(headers, DELIVERY_HEADER)
        .map(str::to_string)
        .unwrap_or_else(|| body_key(body))
}

/// The `X-Hub-Signature` value Jira (and Confluence) would send for `body`.
pub fn signature(webhook_secret: &[u8], body: &[u8]) -> String {
    format!(
        "sha256={}",
        hex::encode(hmac_sha256(webhook_secret, &[body]))
    )
}

pub fn verify<H: Headers + ?Sized>(
    headers: &H,
    body: &[u8],
    webhook_secret: Option<&[u8]>,
) -> Result<(), WebhookError> {
    verify_hub_signature(SOURCE, SECRET_KEY, headers, body, webhook_secret)
}

/// `jira:issue_*` and `comment_*` events become notifications.
pub fn normalize<H: Headers + ?Sized>(headers: &H, body: &[u8]) -> Result<Inbound, WebhookError> {
    let delivery = delivery_key(headers, body);
    let payload = json::parse(SOURCE, body)?;
    let event = text(&payload, &["webhookEvent"]).unwrap_or_default();
    let kind = event.strip_prefix("jira:").unwrap_or(&event).to_string();
    let is_comment = kind.starts_with("comment_");
    if !(is_comment || kind.starts_with("issue_")) || kind.ends_with("_deleted") {
        return Ok(Inbound::ignored(
            Some(delivery),
            format!(
                "jira event {} is not routed",
                if event.is_empty() { "(none)" } else { &event }
            ),
        ));
    }
    let issue = payload.get("issue").cloned().unwrap_or(Value::Null);
    let key = text(&issue, &["key"]).ok_or_else(|| WebhookError::BadJson {
        from: SOURCE,
        reason: format!("{event} event without issue.key"),
    })?;
    let project = text(&issue, &["fields", "project", "key"])
        .or_else(|| key.rsplit_once('-').map(|(p, _)| p.to_string()))
        .unwrap_or_else(|| key.clone());
    let (body_text, mut mentions) = if is_comment {
        rich_text(payload.get("comment").and_then(|c| c.get("body")))
    } else {
        rich_text(issue.get("fields").and_then(|f| f.get("description")))
    };
    for m in mentions::jira_wiki(&body_text) {
        push_unique(&mut mentions, m);
    }
    let mut assignees = Vec::new();
    if let Some(a) = issue.get("fields").and_then(|f| f.get("assignee"))
        && let Some(id) = text(a, &["accountId"]).or_else(|| text(a, &["name"]))
    {
        push_unique(&mut assignees, id);
    }
    let sender = text(&payload, &["user", "accountId"])
        .or_else(|| text(&payload, &["comment", "author", "accountId"]))
        .or_else(|| text(&payload, &["user", "name"]));
    let sender_is_bot = payload
        .get("user")
        .and_then(|u| u.get("accountType"))
        .and_then(Value::as_str)
        == Some("app");
    let notification = Notification {
        source: SOURCE,
        kind,
        delivery_key: delivery,
        channel_or_project: project,
        url: browse_url(&issue, &key),
        thread: Some(key),
        sender,
        sender_is_bot,
        direct: false,
        title: text(&issue, &["fields", "summary"]),
        text: body_text,
        assignees,
        mentions: unique(mentions),
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

/// `https://x.atlassian.net/rest/api/2/issue/10001` -> `https://x.atlassian.net/browse/KEY`.
fn browse_url(issue: &Value, key: &str) -> Option<String> {
    let api = text(issue, &["self"])?;
    let base = &api[..api.find("/rest/")?];
    Some(format!("{base}/browse/{key}"))
}

/// Text and mentioned account ids of a Jira body: wiki markup (a string) or
/// an Atlassian Document Format tree.
pub(crate) fn rich_text(value: Option<&Value>) -> (String, Vec<String>) {
    match value {
        Some(Value::String(s)) => (s.clone(), Vec::new()),
        Some(doc @ Value::Object(_)) => {
            let mut out = String::new();
            let mut mentions = Vec::new();
            walk_adf(doc, &mut out, &mut mentions);
            (out.trim().to_string(), mentions)
        }
        _ => (String::new(), Vec::new()),
    }
}

fn walk_adf(node: &Value, out: &mut String, mentions: &mut Vec<String>) {
    match node.get("type").and_then(Value::as_str) {
        Some("text") => {
            if let Some(t) = node.get("text").and_then(Value::as_str) {
                out.push_str(t);
            }
        }
        Some("mention") => {
            if let Some(id) = text(node, &["attrs", "id"]) {
                push_unique(mentions, id);
            }
            if let Some(t) = text(node, &["attrs", "text"]) {
                out.push_str(&t);
            }
        }
        Some("hardBreak") => out.push('\n'),
        _ => {}
    }
    if let Some(Value::Array(children)) = node.get("content") {
        for child in children {
            walk_adf(child, out, mentions);
        }
        if matches!(
            node.get("type").and_then(Value::as_str),
            Some("paragraph" | "heading" | "listItem" | "codeBlock")
        ) {
            out.push('\n');
        }
    }
}

/// The source description the API, the router and the redaction checks ask.
pub struct Jira;

impl WebhookSource for Jira {
    fn source(&self) -> Source {
        SOURCE
    }

    fn secrets<'c>(&self, company: &'c Company, _org: &'c Organization) -> Vec<SecretRef<'c>> {
        let raw = company
            .integrations
            .jira
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
        i.jira.as_ref().and_then(|a| a.user.as_deref())
    }

    fn contact_id<'s>(&self, c: &'s Contact) -> Option<&'s str> {
        c.atlassian_account_id.as_deref()
    }

    fn unit_projects<'u>(&self, i: &'u UnitIntegrations) -> &'u [String] {
        &i.jira_projects
    }

    fn seat_project<'s>(&self, i: &'s RoleIntegrations) -> Option<&'s str> {
        i.jira.as_ref().and_then(|j| j.project.as_deref())
    }

    fn unit_project<'u>(
        &self,
        i: &'u UnitIntegrations,
        _slack_channel: Option<&'u str>,
    ) -> Option<&'u str> {
        i.jira.as_ref().map(|j| j.project.as_str())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Computed independently with Python:
    /// `hmac.new(b"jira-secret", b'{"webhookEvent":"jira:issue_created"}', sha256)`.
    #[test]
    fn jira_known_answer_verifies() {
        let headers = [(
            "X-Hub-Signature",
            "sha256=4ce4f83412227a95fec604b770261b97c7f5650cf98949a1edb42156781a6f57",
        )];
        let body = br#"{"webhookEvent":"jira:issue_created"}"#;
        verify(&headers, body, Some(b"jira-secret")).unwrap();
        assert!(verify(&headers, body, Some(b"other")).is_err());
        assert_eq!(verify(&headers, body, None).unwrap_err().status_code(), 503);
    }

    fn signed(body: &[u8]) -> Vec<(String, String)> {
        vec![
            (
                "X-Hub-Signature".into(),
                format!("sha256={}", hex::encode(hmac_sha256(b"s", &[body]))),
            ),
            ("X-Atlassian-Webhook-Identifier".into(), "wh-77".into()),
        ]
    }

    #[test]
    fn issue_created_with_wiki_mentions() {
        let p = json!({
            "webhookEvent": "jira:issue_created", "timestamp": 1,
            "user": {"accountId": "acc-reporter", "accountType": "atlassian"},
            "issue": {"key": "OPS-12", "self": "https://acme.atlassian.net/rest/api/2/issue/10012",
                "fields": {"summary": "Disk full", "project": {"key": "OPS"},
                    "description": "Please clean up [~accountid:acc-agent]",
                    "assignee": {"accountId": "acc-agent"}}},
        });
        let body = serde_json::to_vec(&p).unwrap();
        let n = receive(&signed(&body), &body, Some(b"s")).unwrap();
        let n = n.notification().unwrap();
        assert_eq!(n.kind, "issue_created");
        assert_eq!(n.delivery_key, "wh-77");
        assert_eq!(n.channel_or_project, "OPS");
        assert_eq!(n.thread.as_deref(), Some("OPS-12"));
        assert_eq!(n.title.as_deref(), Some("Disk full"));
        assert_eq!(n.assignees, ["acc-agent"]);
        assert_eq!(n.mentions, ["acc-agent"]);
        assert_eq!(n.sender.as_deref(), Some("acc-reporter"));
        assert_eq!(
            n.url.as_deref(),
            Some("https://acme.atlassian.net/browse/OPS-12")
        );
    }

    #[test]
    fn comment_created_with_adf_body() {
        let p = json!({
            "webhookEvent": "comment_created",
            "comment": {"author": {"accountId": "acc-bob"}, "body": {"type": "doc", "version": 1,
                "content": [{"type": "paragraph", "content": [
                    {"type": "mention", "attrs": {"id": "acc-agent", "text": "@Ops Agent"}},
                    {"type": "text", "text": " any update?"}]}]}},
            "issue": {"key": "OPS-12", "fields": {"summary": "Disk full"}},
        });
        let body = serde_json::to_vec(&p).unwrap();
        let n = normalize(&[("a", "b")], &body).unwrap();
        let n = n.notification().unwrap();
        assert_eq!(n.kind, "comment_created");
        assert_eq!(n.text, "@Ops Agent any update?");
        assert_eq!(n.mentions, ["acc-agent"]);
        assert_eq!(n.sender.as_deref(), Some("acc-bob"));
        assert_eq!(n.channel_or_project, "OPS");
        assert!(n.delivery_key.starts_with("sha256:"));
    }

    #[test]
    fn other_events_ignored_bad_payloads_refused() {
        let sprint = br#"{"webhookEvent":"sprint_started"}"#;
        assert!(matches!(
            normalize(&[("a", "b")], sprint).unwrap(),
            Inbound::Ignored { .. }
        ));
        let deleted = br#"{"webhookEvent":"jira:issue_deleted","issue":{"key":"A-1"}}"#;
        assert!(matches!(
            normalize(&[("a", "b")], deleted).unwrap(),
            Inbound::Ignored { .. }
        ));
        let no_key = br#"{"webhookEvent":"jira:issue_updated","issue":{}}"#;
        assert!(matches!(
            normalize(&[("a", "b")], no_key),
            Err(WebhookError::BadJson { .. })
        ));
    }
}
