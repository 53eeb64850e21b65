//! Slack Events API. Each agent seat is its own Slack app, so the signing
//! secret is per seat (`integrations.slack.signing_secret` on the role) and
//! the webhook URL names the seat: `/webhooks/slack/{handle}`.
//!
//! Signature: `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:{ts}:{body}">`
//! with `X-Slack-Request-Timestamp: {ts}` within ±300 s of now.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::headers::{Headers, get};
use super::json::{self, text};
use super::mentions;
use super::signature::{check_timestamp, hmac_sha256, require_secret, verify_hex_hmac};
use super::{Inbound, Notification, Source, WebhookError};
use crewlet_config::{Company, Contact, Organization, RoleIntegrations, UnitIntegrations};

use super::secrets::{Secret, SecretRef, WebhookSecrets};
use super::source::{WebhookRequest, WebhookSource};

pub const SIGNATURE_HEADER: &str = "x-slack-signature";
pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
/// Where the secret lives in the company YAML (on the role).
pub const SECRET_KEY: &str = "integrations.slack.signing_secret";
/// Its field name: the [`WebhookSecrets`] slot.
pub const SECRET_NAME: &str = "signing_secret";

const SOURCE: Source = Source::Slack;

/// Message subtypes that are edits, deletions or membership noise, not
/// something said to the seat.
const IGNORED_SUBTYPES: &[&str] = &[
    "message_changed",
    "message_deleted",
    "message_replied",
    "channel_join",
    "channel_leave",
    "group_join",
    "group_leave",
    "channel_topic",
    "channel_purpose",
    "channel_name",
    "channel_archive",
    "channel_unarchive",
    "pinned_item",
    "unpinned_item",
    "ekm_access_denied",
];

/// Verifies the v0 signature and the timestamp window.
pub fn verify<H: Headers + ?Sized>(
    headers: &H,
    body: &[u8],
    signing_secret: Option<&[u8]>,
    now: DateTime<Utc>,
) -> Result<(), WebhookError> {
    let secret = require_secret(SOURCE, SECRET_KEY, signing_secret)?;
    let missing = |header| WebhookError::MissingHeader {
        from: SOURCE,
        header,
    };
    let ts = get(headers, TIMESTAMP_HEADER).ok_or_else(|| missing(TIMESTAMP_HEADER))?;
    let sig = get(headers, SIGNATURE_HEADER).ok_or_else(|| missing(SIGNATURE_HEADER))?;
    check_timestamp(SOURCE, TIMESTAMP_HEADER, ts, now)?;
    verify_hex_hmac(
        SOURCE,
        SIGNATURE_HEADER,
        sig,
        "v0=",
        secret,
        &[b"v0:", ts.as_bytes(), b":", body],
    )
}

/// The `X-Slack-Signature` value Slack would send for `body` at `timestamp`
/// (for tests and fakes that play Slack).
pub fn signature(signing_secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    format!(
        "v0={}",
        hex::encode(hmac_sha256(
            signing_secret,
            &[b"v0:", timestamp.as_bytes(), b":", body]
        ))
    )
}

/// `url_verification` -> [`Inbound::Challenge`]; `event_callback` with a
/// `message` or `app_mention` event -> [`Inbound::Notification`] deduped on
/// `event_id`; the app's own messages, edits and everything else -> ignored.
pub fn normalize(body: &[u8]) -> Result<Inbound, WebhookError> {
    let payload = json::parse(SOURCE, body)?;
    match payload.get("type").and_then(Value::as_str) {
        Some("url_verification") => {
            let challenge =
                text(&payload, &["challenge"]).ok_or_else(|| WebhookError::BadJson {
                    from: SOURCE,
                    reason: "url_verification without a challenge".into(),
                })?;
            Ok(Inbound::Challenge(challenge))
        }
        Some("event_callback") => normalize_event(payload),
        other => Ok(Inbound::ignored(
            None,
            format!(
                "slack payload type {} is not routed",
                other.unwrap_or("(none)")
            ),
        )),
    }
}

/// [`verify`] then [`normalize`].
pub fn receive<H: Headers + ?Sized>(
    headers: &H,
    body: &[u8],
    signing_secret: Option<&[u8]>,
    now: DateTime<Utc>,
) -> Result<Inbound, WebhookError> {
    verify(headers, body, signing_secret, now)?;
    normalize(body)
}

fn normalize_event(payload: Value) -> Result<Inbound, WebhookError> {
    let event_id = text(&payload, &["event_id"]).ok_or_else(|| WebhookError::BadJson {
        from: SOURCE,
        reason: "event_callback without event_id".into(),
    })?;
    let event = payload.get("event").cloned().unwrap_or(Value::Null);
    let kind = text(&event, &["type"]).unwrap_or_default();
    if kind != "message" && kind != "app_mention" {
        return Ok(Inbound::ignored(
            Some(event_id),
            format!("slack event {kind} is not routed"),
        ));
    }
    if let Some(subtype) = text(&event, &["subtype"])
        && IGNORED_SUBTYPES.contains(&subtype.as_str())
    {
        return Ok(Inbound::ignored(
            Some(event_id),
            format!("slack message subtype {subtype} is not routed"),
        ));
    }
    if is_own_message(&payload, &event) {
        return Ok(Inbound::ignored(
            Some(event_id),
            "the seat's own message".to_string(),
        ));
    }
    let channel = text(&event, &["channel"]).ok_or_else(|| WebhookError::BadJson {
        from: SOURCE,
        reason: format!("{kind} event without a channel"),
    })?;
    let message_text = text(&event, &["text"]).unwrap_or_default();
    let bot_id = text(&event, &["bot_id"]);
    let notification = Notification {
        source: SOURCE,
        kind,
        delivery_key: event_id,
        channel_or_project: channel,
        thread: text(&event, &["thread_ts"]).or_else(|| text(&event, &["ts"])),
        sender: text(&event, &["user"]).or_else(|| bot_id.clone()),
        sender_is_bot: bot_id.is_some()
            || text(&event, &["subtype"]).as_deref() == Some("bot_message"),
        direct: matches!(
            text(&event, &["channel_type"]).as_deref(),
            Some("im" | "mpim")
        ),
        title: None,
        mentions: mentions::slack_users(&message_text),
        text: message_text,
        assignees: Vec::new(),
        url: None,
        raw: payload,
    };
    Ok(Inbound::Notification(Box::new(notification)))
}

/// A message posted by the very app this webhook belongs to: answering it
/// would make the seat talk to itself.
fn is_own_message(payload: &Value, event: &Value) -> bool {
    let own_app = text(payload, &["api_app_id"]);
    if own_app.is_some() && text(event, &["app_id"]) == own_app {
        return true;
    }
    let Some(user) = text(event, &["user"]) else {
        return false;
    };
    let Some(Value::Array(auths)) = payload.get("authorizations") else {
        return false;
    };
    auths.iter().any(|a| {
        a.get("is_bot").and_then(Value::as_bool) == Some(true)
            && text(a, &["user_id"]).as_deref() == Some(user.as_str())
    })
}

/// The source description the API, the router and the redaction checks ask.
pub struct Slack;

impl WebhookSource for Slack {
    fn source(&self) -> Source {
        SOURCE
    }

    fn secrets<'c>(&self, _company: &'c Company, org: &'c Organization) -> Vec<SecretRef<'c>> {
        org.seats()
            .iter()
            .map(|seat| SecretRef {
                name: SECRET_NAME,
                seat: Some(seat.handle.as_str()),
                path: format!("{}.{SECRET_KEY}", seat.yaml_path),
                raw: seat
                    .role
                    .integrations
                    .slack
                    .as_ref()
                    .and_then(|s| s.signing_secret.as_ref()),
            })
            .collect()
    }

    fn secret_fields(&self) -> &'static [&'static str] {
        &["signing_secret", "bot_token"]
    }

    fn receive(
        &self,
        r: WebhookRequest<'_>,
        secrets: &WebhookSecrets,
    ) -> Result<Inbound, WebhookError> {
        let key = r
            .handle
            .and_then(|h| secrets.get(SOURCE, SECRET_NAME, Some(h)))
            .map(Secret::bytes);
        receive(r.headers, r.body, key, r.now)
    }

    /// Slack's `event_id` is in the signed body: no second key.
    fn replay_key(&self, _headers: &dyn Headers, _body: &[u8]) -> Option<String> {
        None
    }

    fn seat_route(&self, secrets: &WebhookSecrets, handle: &str) -> Result<(), String> {
        match secrets.get(SOURCE, SECRET_NAME, Some(handle)) {
            Some(_) => Ok(()),
            None => Err(format!(
                "seat `{handle}` has no Slack app here: set its integrations.slack.signing_secret"
            )),
        }
    }

    fn credential_headers(&self) -> &'static [&'static str] {
        &[SIGNATURE_HEADER, TIMESTAMP_HEADER]
    }

    fn secret_headers(&self) -> &'static [&'static str] {
        &[SIGNATURE_HEADER]
    }

    fn kept_headers(&self) -> &'static [&'static str] {
        &[
            TIMESTAMP_HEADER,
            "x-slack-retry-num",
            "x-slack-retry-reason",
        ]
    }

    /// Slack expects 200 (it retries anything else).
    fn accepted_status(&self) -> u16 {
        200
    }

    fn seat_account<'s>(&self, i: &'s RoleIntegrations) -> Option<&'s str> {
        i.slack.as_ref().and_then(|s| s.bot_user_id.as_deref())
    }

    fn contact_id<'s>(&self, c: &'s Contact) -> Option<&'s str> {
        c.slack_user_id.as_deref()
    }

    fn handle_is_identity(&self) -> bool {
        false
    }

    fn unit_project<'u>(
        &self,
        _i: &'u UnitIntegrations,
        slack_channel: Option<&'u str>,
    ) -> Option<&'u str> {
        slack_channel
    }

    fn unit_projects<'u>(&self, i: &'u UnitIntegrations) -> &'u [String] {
        &i.slack_channels
    }

    fn bot_messages_need_a_mention(&self) -> bool {
        true
    }

    fn follows_threads(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    fn sign(secret: &[u8], ts: &str, body: &[u8]) -> String {
        signature(secret, ts, body)
    }

    /// Slack's documented example ("Verifying requests from Slack"), signature
    /// computed independently with Python's hmac module.
    const DOC_SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";
    const DOC_TS: &str = "1531420618";
    const DOC_BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const DOC_SIG: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    #[test]
    fn slack_documented_example_verifies() {
        let headers = [(SIGNATURE_HEADER, DOC_SIG), (TIMESTAMP_HEADER, DOC_TS)];
        verify(
            &headers,
            DOC_BODY.as_bytes(),
            Some(DOC_SECRET),
            at(1_531_420_618 + 10),
        )
        .unwrap();
        assert_eq!(sign(DOC_SECRET, DOC_TS, DOC_BODY.as_bytes()), DOC_SIG);
    }

    #[test]
    fn tampered_body_wrong_secret_and_stale_timestamp_are_refused() {
        let headers = [(SIGNATURE_HEADER, DOC_SIG), (TIMESTAMP_HEADER, DOC_TS)];
        let now = at(1_531_420_618);
        let e = verify(&headers, b"token=other", Some(DOC_SECRET), now).unwrap_err();
        assert!(matches!(e, WebhookError::BadSignature { .. }));
        let e = verify(&headers, DOC_BODY.as_bytes(), Some(b"other-secret"), now).unwrap_err();
        assert!(matches!(e, WebhookError::BadSignature { .. }));
        let e = verify(
            &headers,
            DOC_BODY.as_bytes(),
            Some(DOC_SECRET),
            at(1_531_420_618 + 301),
        )
        .unwrap_err();
        assert!(matches!(e, WebhookError::StaleTimestamp { .. }), "{e}");
        let e = verify(&headers, DOC_BODY.as_bytes(), None, now).unwrap_err();
        assert_eq!(e.status_code(), 503);
        let e = verify(&[(TIMESTAMP_HEADER, DOC_TS)], b"", Some(DOC_SECRET), now).unwrap_err();
        assert_eq!(
            e,
            WebhookError::MissingHeader {
                from: SOURCE,
                header: SIGNATURE_HEADER
            }
        );
        let bad_hex = [(SIGNATURE_HEADER, "v0=zz"), (TIMESTAMP_HEADER, DOC_TS)];
        assert!(matches!(
            verify(&bad_hex, b"", Some(DOC_SECRET), now),
            Err(WebhookError::BadSignature { .. })
        ));
        let no_prefix = [
            (SIGNATURE_HEADER, &DOC_SIG[3..]),
            (TIMESTAMP_HEADER, DOC_TS),
        ];
        assert!(verify(&no_prefix, DOC_BODY.as_bytes(), Some(DOC_SECRET), now).is_err());
    }

    #[test]
    fn url_verification_returns_the_challenge() {
        let body = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        let now = at(1_700_000_000);
        let ts = now.timestamp().to_string();
        let sig = sign(b"seat-secret", &ts, body);
        let headers = [
            (SIGNATURE_HEADER, sig.as_str()),
            (TIMESTAMP_HEADER, ts.as_str()),
        ];
        assert_eq!(
            receive(&headers, body, Some(b"seat-secret"), now).unwrap(),
            Inbound::Challenge("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".into())
        );
    }

    fn callback(event: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "token": "x", "team_id": "T1", "api_app_id": "A_SELF",
            "type": "event_callback", "event_id": "Ev123", "event_time": 1,
            "authorizations": [{"user_id": "U_SELF_BOT", "is_bot": true}],
            "event": event,
        }))
        .unwrap()
    }

    #[test]
    fn app_mention_in_a_thread_is_normalized() {
        let body = callback(json!({
            "type": "app_mention", "user": "U_ALICE", "channel": "C_GEN",
            "text": "<@U_SELF_BOT> can you look? cc <@U_BOB|bob>",
            "ts": "1700000001.000200", "thread_ts": "1700000000.000100",
        }));
        let now = at(1_700_000_000);
        let ts = now.timestamp().to_string();
        let sig = sign(b"s", &ts, &body);
        let headers = [
            (SIGNATURE_HEADER, sig.as_str()),
            (TIMESTAMP_HEADER, ts.as_str()),
        ];
        let inbound = receive(&headers, &body, Some(b"s"), now).unwrap();
        let n = inbound.notification().unwrap();
        assert_eq!(n.source, Source::Slack);
        assert_eq!(n.kind, "app_mention");
        assert_eq!(n.delivery_key, "Ev123");
        assert_eq!(n.channel_or_project, "C_GEN");
        assert_eq!(n.thread.as_deref(), Some("1700000000.000100"));
        assert_eq!(n.sender.as_deref(), Some("U_ALICE"));
        assert!(!n.sender_is_bot);
        assert_eq!(n.mentions, ["U_SELF_BOT", "U_BOB"]);
        assert!(n.text.starts_with("<@U_SELF_BOT> can you"));
        assert_eq!(n.raw["team_id"], "T1");
    }

    #[test]
    fn top_level_message_threads_on_its_own_ts() {
        let body = callback(json!({
            "type": "message", "channel_type": "channel", "user": "U_ALICE",
            "channel": "C_GEN", "text": "morning", "ts": "1700000001.000200",
        }));
        let n = normalize(&body).unwrap();
        assert_eq!(
            n.notification().unwrap().thread.as_deref(),
            Some("1700000001.000200")
        );
    }

    #[test]
    fn own_messages_edits_and_other_events_are_ignored() {
        let own_app = callback(json!({"type": "message", "channel": "C", "text": "hi",
            "ts": "1.0", "bot_id": "B1", "app_id": "A_SELF"}));
        assert!(matches!(
            normalize(&own_app).unwrap(),
            Inbound::Ignored { .. }
        ));
        let own_user = callback(json!({"type": "message", "channel": "C", "text": "hi",
            "ts": "1.0", "user": "U_SELF_BOT"}));
        assert!(matches!(
            normalize(&own_user).unwrap(),
            Inbound::Ignored { .. }
        ));
        let edit = callback(json!({"type": "message", "subtype": "message_changed",
            "channel": "C", "ts": "1.0"}));
        assert!(matches!(
            normalize(&edit).unwrap(),
            Inbound::Ignored { delivery_key: Some(k), .. } if k == "Ev123"
        ));
        let reaction = callback(json!({"type": "reaction_added", "user": "U1"}));
        assert!(matches!(
            normalize(&reaction).unwrap(),
            Inbound::Ignored { .. }
        ));
        // Another agent's app posting is routed, flagged as a bot.
        let other_bot = callback(
            json!({"type": "message", "channel": "C", "text": "<@U_SELF_BOT> done",
            "ts": "1.0", "bot_id": "B2", "app_id": "A_OTHER", "user": "U_OTHER_BOT"}),
        );
        let n = normalize(&other_bot).unwrap();
        assert!(n.notification().unwrap().sender_is_bot);
    }

    #[test]
    fn malformed_payloads_are_bad_json() {
        assert!(matches!(
            normalize(b"not json"),
            Err(WebhookError::BadJson { .. })
        ));
        let no_id = br#"{"type":"event_callback","event":{"type":"message"}}"#;
        assert!(matches!(
            normalize(no_id),
            Err(WebhookError::BadJson { .. })
        ));
        let no_channel =
            callback(json!({"type": "message", "text": "x", "ts": "1.0", "user": "U1"}));
        assert!(matches!(
            normalize(&no_channel),
            Err(WebhookError::BadJson { .. })
        ));
    }
}
