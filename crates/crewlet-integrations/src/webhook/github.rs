//! GitHub repository and organization webhooks.
//!
//! Signature: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of body>` with
//! `integrations.github.webhook_secret`; dedupe on `X-GitHub-Delivery`
//! (the same id on redelivery); the event name is `X-GitHub-Event`.

use serde_json::Value;

use super::headers::{Headers, get};
use super::json::{self, push_unique, text, texts, unique};
use super::mentions;
use super::signature::{hmac_sha256, require_secret, verify_hex_hmac};
use super::{Inbound, Notification, Source, WebhookError};
use crewlet_config::{Company, Contact, Organization, RoleIntegrations, UnitIntegrations};

use super::secrets::{Secret, SecretRef, WebhookSecrets};
use super::source::{WebhookRequest, WebhookSource};

pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";
pub const DELIVERY_HEADER: &str = "x-github-delivery";
pub const EVENT_HEADER: &str = "x-github-event";
pub const SECRET_KEY: &str = "integrations.github.webhook_secret";
/// Its field name: the [`WebhookSecrets`] slot.
pub const SECRET_NAME: &str = "webhook_secret";

const SOURCE: Source = Source::Github;

/// The `X-Hub-Signature-256` value GitHub would send for `body`.
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
    let secret = require_secret(SOURCE, SECRET_KEY, webhook_secret)?;
    let sig = get(headers, SIGNATURE_HEADER).ok_or(WebhookError::MissingHeader {
        from: SOURCE,
        header: SIGNATURE_HEADER,
    })?;
    verify_hex_hmac(SOURCE, SIGNATURE_HEADER, sig, "sha256=", secret, &[body])
}

/// `issues`, `issue_comment`, `pull_request`, `pull_request_review` and
/// `pull_request_review_comment` become notifications; `ping` and other
/// events are ignored.
pub fn normalize<H: Headers + ?Sized>(headers: &H, body: &[u8]) -> Result<Inbound, WebhookError> {
    let delivery = get(headers, DELIVERY_HEADER)
        .ok_or(WebhookError::MissingHeader {
            from: SOURCE,
            header: DELIVERY_HEADER,
        })?
        .to_string();
    let event = get(headers, EVENT_HEADER)
        .ok_or(WebhookError::MissingHeader {
            from: SOURCE,
            header: EVENT_HEADER,
        })?
        .to_ascii_lowercase();
    let payload = json::parse(SOURCE, body)?;
    let action = text(&payload, &["action"]);

    // (the issue or pull request, the comment or review if any)
    let (item, comment) = match event.as_str() {
        "issues" => (payload.get("issue"), None),
        "issue_comment" => (payload.get("issue"), payload.get("comment")),
        "pull_request" => (payload.get("pull_request"), None),
        "pull_request_review_comment" => (payload.get("pull_request"), payload.get("comment")),
        "pull_request_review" => (payload.get("pull_request"), payload.get("review")),
        _ => {
            return Ok(Inbound::ignored(
                Some(delivery),
                format!("github event {event} is not routed"),
            ));
        }
    };
    if comment.is_some() && action.as_deref() == Some("deleted") {
        return Ok(Inbound::ignored(
            Some(delivery),
            format!("github {event} deleted"),
        ));
    }
    let item = item.ok_or_else(|| WebhookError::BadJson {
        from: SOURCE,
        reason: format!("{event} event without its issue or pull request"),
    })?;
    let repo =
        text(&payload, &["repository", "full_name"]).ok_or_else(|| WebhookError::BadJson {
            from: SOURCE,
            reason: format!("{event} event without repository.full_name"),
        })?;

    let title = text(item, &["title"]);
    let body_text = match comment {
        Some(c) => text(c, &["body"]),
        None => text(item, &["body"]),
    }
    .unwrap_or_default();

    let mut assignees = Vec::new();
    // The subject of the action comes first: who was just assigned, or asked to review.
    match action.as_deref() {
        Some("assigned") => {
            if let Some(login) = text(&payload, &["assignee", "login"]) {
                push_unique(&mut assignees, login);
            }
        }
        Some("review_requested") => {
            if let Some(login) = text(&payload, &["requested_reviewer", "login"]) {
                push_unique(&mut assignees, login);
            }
        }
        _ => {}
    }
    for login in texts(item, &["assignees"], &["login"]) {
        push_unique(&mut assignees, login);
    }
    if let Some(login) = text(item, &["assignee", "login"]) {
        push_unique(&mut assignees, login);
    }

    let mentions = unique(
        mentions::at_handles(&body_text)
            .into_iter()
            .chain(match comment {
                // A new issue or PR can address someone in its title too.
                None => title
                    .as_deref()
                    .map(mentions::at_handles)
                    .unwrap_or_default(),
                Some(_) => Vec::new(),
            }),
    );
    let url = comment
        .and_then(|c| text(c, &["html_url"]))
        .or_else(|| text(item, &["html_url"]));
    let kind = match &action {
        Some(a) => format!("{event}.{a}"),
        None => event.clone(),
    };
    let notification = Notification {
        source: SOURCE,
        kind,
        delivery_key: delivery,
        channel_or_project: repo,
        thread: text(item, &["number"]),
        sender: text(&payload, &["sender", "login"]),
        sender_is_bot: payload
            .get("sender")
            .and_then(|s| s.get("type"))
            .and_then(Value::as_str)
            == Some("Bot"),
        direct: false,
        title,
        text: body_text,
        assignees,
        mentions,
        url,
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
pub struct Github;

impl WebhookSource for Github {
    fn source(&self) -> Source {
        SOURCE
    }

    fn secrets<'c>(&self, company: &'c Company, _org: &'c Organization) -> Vec<SecretRef<'c>> {
        let raw = company
            .integrations
            .github
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
        &[EVENT_HEADER, DELIVERY_HEADER, "x-github-hook-id"]
    }

    fn seat_account<'s>(&self, i: &'s RoleIntegrations) -> Option<&'s str> {
        i.github.as_ref().and_then(|a| a.user.as_deref())
    }

    fn contact_id<'s>(&self, c: &'s Contact) -> Option<&'s str> {
        c.github_login.as_deref()
    }

    fn unit_projects<'u>(&self, i: &'u UnitIntegrations) -> &'u [String] {
        &i.github_repositories
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn signed(secret: &[u8], event: &str, body: &[u8]) -> Vec<(String, String)> {
        vec![
            (
                "X-Hub-Signature-256".into(),
                format!("sha256={}", hex::encode(hmac_sha256(secret, &[body]))),
            ),
            (
                "X-GitHub-Delivery".into(),
                "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
            ),
            ("X-GitHub-Event".into(), event.into()),
        ]
    }

    /// GitHub's documented example ("Validating webhook deliveries"), also
    /// checked with `openssl dgst -sha256 -hmac`.
    #[test]
    fn github_documented_example_verifies() {
        let headers = [(
            SIGNATURE_HEADER,
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        )];
        verify(
            &headers,
            b"Hello, World!",
            Some(b"It's a Secret to Everybody"),
        )
        .unwrap();
        assert!(matches!(
            verify(
                &headers,
                b"Hello, World?",
                Some(b"It's a Secret to Everybody")
            ),
            Err(WebhookError::BadSignature { .. })
        ));
    }

    #[test]
    fn missing_signature_or_secret() {
        assert_eq!(
            verify(&[("x", "y")], b"{}", Some(b"s"))
                .unwrap_err()
                .status_code(),
            401
        );
        assert_eq!(
            verify(&[("x", "y")], b"{}", None)
                .unwrap_err()
                .status_code(),
            503
        );
        let sha1 = [(SIGNATURE_HEADER, "sha1=abcd")];
        assert!(matches!(
            verify(&sha1, b"{}", Some(b"s")),
            Err(WebhookError::BadSignature { .. })
        ));
    }

    fn issue_payload() -> Value {
        json!({
            "action": "assigned",
            "issue": {
                "number": 42, "title": "Crash on start @carol",
                "body": "Steps: run it. @alice can you take this? cc @bob.",
                "html_url": "https://github.com/acme/app/issues/42",
                "assignee": {"login": "alice"},
                "assignees": [{"login": "dave"}, {"login": "alice"}],
            },
            "assignee": {"login": "alice"},
            "repository": {"full_name": "acme/app"},
            "sender": {"login": "octocat", "type": "User"},
        })
    }

    #[test]
    fn issue_assigned_puts_the_new_assignee_first() {
        let body = serde_json::to_vec(&issue_payload()).unwrap();
        let headers = signed(b"s3cret", "issues", &body);
        let n = receive(&headers, &body, Some(b"s3cret")).unwrap();
        let n = n.notification().unwrap();
        assert_eq!(n.kind, "issues.assigned");
        assert_eq!(n.delivery_key, "72d3162e-cc78-11e3-81ab-4c9367dc0958");
        assert_eq!(n.channel_or_project, "acme/app");
        assert_eq!(n.thread.as_deref(), Some("42"));
        assert_eq!(n.title.as_deref(), Some("Crash on start @carol"));
        assert_eq!(n.sender.as_deref(), Some("octocat"));
        assert_eq!(n.assignees, ["alice", "dave"]);
        assert_eq!(n.mentions, ["alice", "bob", "carol"]);
        assert_eq!(
            n.url.as_deref(),
            Some("https://github.com/acme/app/issues/42")
        );
    }

    #[test]
    fn issue_comment_uses_the_comment() {
        let mut p = issue_payload();
        p["action"] = json!("created");
        p["comment"] = json!({"body": "@reviewer-bot please review",
            "html_url": "https://github.com/acme/app/issues/42#issuecomment-1"});
        p["sender"] = json!({"login": "ci[bot]", "type": "Bot"});
        let body = serde_json::to_vec(&p).unwrap();
        let n = normalize(&signed(b"s", "issue_comment", &body), &body).unwrap();
        let n = n.notification().unwrap();
        assert_eq!(n.kind, "issue_comment.created");
        assert_eq!(n.text, "@reviewer-bot please review");
        assert_eq!(n.mentions, ["reviewer-bot"]);
        assert_eq!(n.assignees, ["dave", "alice"]);
        assert!(n.sender_is_bot);
        assert!(n.url.as_deref().unwrap().ends_with("issuecomment-1"));
    }

    #[test]
    fn pull_request_review_requested_and_review_comments() {
        let p = json!({
            "action": "review_requested",
            "pull_request": {"number": 7, "title": "Add cache", "body": "Implements #3",
                "html_url": "https://github.com/acme/app/pull/7", "assignees": []},
            "requested_reviewer": {"login": "reviewer-agent"},
            "repository": {"full_name": "acme/app"},
            "sender": {"login": "alice", "type": "User"},
        });
        let body = serde_json::to_vec(&p).unwrap();
        let n = normalize(&signed(b"s", "pull_request", &body), &body).unwrap();
        let n = n.notification().unwrap();
        assert_eq!(n.kind, "pull_request.review_requested");
        assert_eq!(n.assignees, ["reviewer-agent"]);
        assert_eq!(n.thread.as_deref(), Some("7"));

        let mut c = p.clone();
        c["action"] = json!("created");
        c["comment"] = json!({"body": "nit: rename @alice", "html_url": "https://x/r1"});
        let body = serde_json::to_vec(&c).unwrap();
        let n = normalize(&signed(b"s", "pull_request_review_comment", &body), &body).unwrap();
        let n = n.notification().unwrap();
        assert_eq!(n.kind, "pull_request_review_comment.created");
        assert_eq!(n.text, "nit: rename @alice");
        assert_eq!(n.url.as_deref(), Some("https://x/r1"));
    }

    #[test]
    fn ping_other_events_and_deleted_comments_are_ignored() {
        let body = br#"{"zen":"Keep it logically awesome.","hook_id":1}"#;
        assert!(matches!(
            normalize(&signed(b"s", "ping", body), body).unwrap(),
            Inbound::Ignored { .. }
        ));
        assert!(matches!(
            normalize(&signed(b"s", "push", body), body).unwrap(),
            Inbound::Ignored { .. }
        ));
        let mut p = issue_payload();
        p["action"] = json!("deleted");
        p["comment"] = json!({"body": "gone"});
        let body = serde_json::to_vec(&p).unwrap();
        assert!(matches!(
            normalize(&signed(b"s", "issue_comment", &body), &body).unwrap(),
            Inbound::Ignored { .. }
        ));
    }

    #[test]
    fn missing_delivery_and_bad_json_are_400() {
        let e = normalize(&[(EVENT_HEADER, "issues")], b"{}").unwrap_err();
        assert_eq!(e.status_code(), 400);
        let headers = signed(b"s", "issues", b"");
        let e = normalize(&headers, b"{not json").unwrap_err();
        assert!(matches!(e, WebhookError::BadJson { .. }));
        let e = normalize(&headers, br#"{"action":"opened"}"#).unwrap_err();
        assert!(matches!(e, WebhookError::BadJson { .. }));
    }
}
