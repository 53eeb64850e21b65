//! Plane workspace webhooks (v1 `issue` / `issue_comment` events and v2
//! dot-named `workitem.*` events).
//!
//! Signature: `X-Plane-Signature: <hex HMAC-SHA256 of body>` with
//! `integrations.plane.webhook_secret`. Dedupe on the body's `delivery_id`
//! (v2), else `X-Plane-Delivery`, else the body's digest.

use serde_json::Value;

use super::headers::{Headers, get};
use super::json::{self, push_unique, strip_html, text, texts, unique};
use super::mentions;
use super::signature::{body_key, hmac_sha256, require_secret, verify_hex_hmac};
use super::{Inbound, Notification, Source, WebhookError};
use crewlet_config::{Company, Contact, Organization, RoleIntegrations, UnitIntegrations};

use super::secrets::{Secret, SecretRef, WebhookSecrets};
use super::source::{WebhookRequest, WebhookSource};

pub const SIGNATURE_HEADER: &str = "x-plane-signature";
pub const DELIVERY_HEADER: &str = "x-plane-delivery";
pub const EVENT_HEADER: &str = "x-plane-event";
pub const SECRET_KEY: &str = "integrations.plane.webhook_secret";
/// Its field name: the [`WebhookSecrets`] slot.
pub const SECRET_NAME: &str = "webhook_secret";

const SOURCE: Source = Source::Plane;

/// The `X-Plane-Signature` value Plane would send for `body`.
pub fn signature(webhook_secret: &[u8], body: &[u8]) -> String {
    hex::encode(hmac_sha256(webhook_secret, &[body]))
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
    verify_hex_hmac(SOURCE, SIGNATURE_HEADER, sig, "", secret, &[body])
}

/// Work item (issue) and comment events become notifications.
pub fn normalize<H: Headers + ?Sized>(headers: &H, body: &[u8]) -> Result<Inbound, WebhookError> {
    let payload = json::parse(SOURCE, body)?;
    let delivery = text(&payload, &["delivery_id"])
        .or_else(|| get(headers, DELIVERY_HEADER).map(str::to_string))
        .unwrap_or_else(|| body_key(body));
    let event = text(&payload, &["event"])
        .or_else(|| get(headers, EVENT_HEADER).map(str::to_string))
        .unwrap_or_default()
        .to_ascii_lowercase();
    let is_comment = event.contains("comment");
    let is_item = event.starts_with("issue")
        || event.starts_with("workitem")
        || event.starts_with("work_item");
    if !is_item {
        return Ok(Inbound::ignored(
            Some(delivery),
            format!(
                "plane event {} is not routed",
                if event.is_empty() { "(none)" } else { &event }
            ),
        ));
    }
    let data = payload.get("data").cloned().unwrap_or(Value::Null);
    if !data.is_object() {
        return Err(WebhookError::BadJson {
            from: SOURCE,
            reason: format!("{event} event without a data object"),
        });
    }
    let kind = match text(&payload, &["action"]) {
        // v2 names already carry the action (`workitem.created`).
        Some(action) if !event.contains('.') => {
            format!("{}.{action}", if is_comment { "comment" } else { "issue" })
        }
        _ => event.clone(),
    };
    let project = text(&data, &["project_detail", "identifier"])
        .or_else(|| text(&data, &["project"]))
        .or_else(|| text(&data, &["project", "id"]))
        .or_else(|| text(&data, &["project_id"]))
        .ok_or_else(|| WebhookError::BadJson {
            from: SOURCE,
            reason: format!("{event} event without data.project"),
        })?;

    let (thread, title, body_text, html) = if is_comment {
        let html = text(&data, &["comment_html"]).unwrap_or_default();
        let plain = text(&data, &["comment_stripped"]).unwrap_or_else(|| strip_html(&html));
        let thread = text(&data, &["issue"])
            .or_else(|| text(&data, &["issue", "id"]))
            .or_else(|| text(&data, &["issue_detail", "id"]))
            .or_else(|| text(&data, &["work_item_id"]));
        let title = text(&data, &["issue_detail", "name"]);
        (thread, title, plain, html)
    } else {
        let html = text(&data, &["description_html"]).unwrap_or_default();
        let plain = text(&data, &["description_stripped"]).unwrap_or_else(|| strip_html(&html));
        (text(&data, &["id"]), text(&data, &["name"]), plain, html)
    };

    let mut assignees = Vec::new();
    for a in texts(&data, &["assignees"], &["id", "display_name", "email"]) {
        push_unique(&mut assignees, a);
    }
    for a in texts(&data, &["assignee_ids"], &[]) {
        push_unique(&mut assignees, a);
    }
    let mentions = unique(
        mentions::attribute_values(&html, "entity_identifier")
            .into_iter()
            .chain(mentions::at_handles(&body_text)),
    );
    let actor = payload.get("activity").and_then(|a| a.get("actor"));
    let sender = actor.and_then(|a| {
        text(a, &["id"])
            .or_else(|| text(a, &["display_name"]))
            .or_else(|| text(a, &["email"]))
    });
    let sender_is_bot = actor
        .and_then(|a| a.get("is_bot"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let notification = Notification {
        source: SOURCE,
        kind,
        delivery_key: delivery,
        channel_or_project: project,
        thread,
        sender,
        sender_is_bot,
        direct: false,
        title,
        text: body_text,
        assignees,
        mentions,
        url: text(&data, &["url"]),
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
pub struct Plane;

impl WebhookSource for Plane {
    fn source(&self) -> Source {
        SOURCE
    }

    fn secrets<'c>(&self, company: &'c Company, _org: &'c Organization) -> Vec<SecretRef<'c>> {
        let raw = company
            .integrations
            .plane
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
        &[EVENT_HEADER, DELIVERY_HEADER]
    }

    fn seat_account<'s>(&self, i: &'s RoleIntegrations) -> Option<&'s str> {
        i.plane.as_ref().and_then(|a| a.user.as_deref())
    }

    fn contact_id<'s>(&self, c: &'s Contact) -> Option<&'s str> {
        c.plane_user_id.as_deref()
    }

    fn unit_projects<'u>(&self, i: &'u UnitIntegrations) -> &'u [String] {
        &i.plane_projects
    }

    fn seat_project<'s>(&self, i: &'s RoleIntegrations) -> Option<&'s str> {
        i.plane.as_ref().and_then(|p| p.project.as_deref())
    }

    fn unit_project<'u>(
        &self,
        i: &'u UnitIntegrations,
        _slack_channel: Option<&'u str>,
    ) -> Option<&'u str> {
        i.plane.as_ref().map(|p| p.project.as_str())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Computed independently with Python:
    /// `hmac.new(b"plane_wh_secret", b'{"event":"issue"}', hashlib.sha256).hexdigest()`.
    #[test]
    fn plane_known_answer_verifies() {
        let headers = [(
            "X-Plane-Signature",
            "2a5663c4fd8c5073c140b829ccdde2b6530a00b3e6402e5f83cdcd98ee80f60e",
        )];
        verify(&headers, br#"{"event":"issue"}"#, Some(b"plane_wh_secret")).unwrap();
        assert!(matches!(
            verify(&headers, br#"{"event":"issue" }"#, Some(b"plane_wh_secret")),
            Err(WebhookError::BadSignature { .. })
        ));
        assert_eq!(
            verify(&headers, b"{}", None).unwrap_err().status_code(),
            503
        );
        assert_eq!(
            verify(&[("x", "y")], b"{}", Some(b"s"))
                .unwrap_err()
                .status_code(),
            401
        );
    }

    fn signed(body: &[u8]) -> Vec<(String, String)> {
        vec![
            (
                "X-Plane-Signature".into(),
                hex::encode(hmac_sha256(b"s", &[body])),
            ),
            (
                "X-Plane-Delivery".into(),
                "f819eff4-cd50-4987-bc97-e5be1e04c94f".into(),
            ),
        ]
    }

    #[test]
    fn v1_issue_event() {
        let p = json!({
            "event": "issue", "action": "created", "webhook_id": "w", "workspace_id": "ws",
            "data": {"id": "item-1", "name": "Design login", "project": "proj-1",
                     "description_html": "<p>Please draft it @writer</p>",
                     "assignees": ["user-9", "user-8"]},
            "activity": {"actor": {"id": "user-1", "display_name": "Ann"}},
        });
        let body = serde_json::to_vec(&p).unwrap();
        let n = receive(&signed(&body), &body, Some(b"s")).unwrap();
        let n = n.notification().unwrap();
        assert_eq!(n.kind, "issue.created");
        assert_eq!(n.delivery_key, "f819eff4-cd50-4987-bc97-e5be1e04c94f");
        assert_eq!(n.channel_or_project, "proj-1");
        assert_eq!(n.thread.as_deref(), Some("item-1"));
        assert_eq!(n.title.as_deref(), Some("Design login"));
        assert_eq!(n.text, "Please draft it @writer");
        assert_eq!(n.assignees, ["user-9", "user-8"]);
        assert_eq!(n.mentions, ["writer"]);
        assert_eq!(n.sender.as_deref(), Some("user-1"));
    }

    #[test]
    fn comment_with_mention_component_and_v2_delivery_id() {
        let p = json!({
            "event": "workitem.comment.created", "delivery_id": "dlv-2",
            "data": {"id": "c-1", "issue": "item-1", "project": "proj-1",
                     "comment_html": "<p><mention-component entity_identifier=\"user-7\" entity_name=\"user_mention\"></mention-component> can you check?</p>",
                     "comment_stripped": " can you check?"},
            "activity": {"actor": {"id": "user-1"}},
        });
        let body = serde_json::to_vec(&p).unwrap();
        let n = normalize(&signed(&body), &body).unwrap();
        let n = n.notification().unwrap();
        assert_eq!(n.kind, "workitem.comment.created");
        assert_eq!(n.delivery_key, "dlv-2");
        assert_eq!(n.thread.as_deref(), Some("item-1"));
        assert_eq!(n.mentions, ["user-7"]);
        assert_eq!(n.text, " can you check?");
    }

    #[test]
    fn other_events_ignored_and_missing_delivery_falls_back_to_digest() {
        let body = br#"{"event":"project","action":"update","data":{"id":"p"}}"#;
        assert!(matches!(
            normalize(&[("a", "b")], body).unwrap(),
            Inbound::Ignored { .. }
        ));
        let body = br#"{"event":"issue","action":"updated","data":{"id":"i","project":"p"}}"#;
        let n = normalize(&[("a", "b")], body).unwrap();
        assert!(
            n.notification()
                .unwrap()
                .delivery_key
                .starts_with("sha256:")
        );
        let no_data = br#"{"event":"issue","action":"updated"}"#;
        assert!(matches!(
            normalize(&[("a", "b")], no_data),
            Err(WebhookError::BadJson { .. })
        ));
    }
}
