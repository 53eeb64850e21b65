//! GitLab project and group webhooks.
//!
//! Two ways to authenticate, whichever the hook is set up with:
//! - classic: `X-Gitlab-Token` equal to `integrations.gitlab.webhook_token`;
//! - signed (Standard Webhooks): `webhook-id`, `webhook-timestamp` (±300 s)
//!   and `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{ts}.{body}">`
//!   keyed with the base64 part of `integrations.gitlab.signing_secret`
//!   (`whsec_...`).
//!
//! Dedupe on `X-Gitlab-Event-UUID`, else `webhook-id`.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, Utc};

use super::headers::{Headers, get};
use super::json::{self, push_unique, text, texts};
use super::mentions;
use super::signature::{body_key, check_timestamp, hmac_matches, hmac_sha256, secrets_equal};
use super::{Inbound, Notification, Source, WebhookError};
use crewlet_config::{Company, Contact, Organization, RoleIntegrations, UnitIntegrations};

use super::secrets::{Secret, SecretRef, WebhookSecrets};
use super::source::{WebhookRequest, WebhookSource};

pub const TOKEN_HEADER: &str = "x-gitlab-token";
pub const EVENT_UUID_HEADER: &str = "x-gitlab-event-uuid";
pub const EVENT_HEADER: &str = "x-gitlab-event";
pub const WEBHOOK_ID_HEADER: &str = "webhook-id";
pub const WEBHOOK_TIMESTAMP_HEADER: &str = "webhook-timestamp";
pub const WEBHOOK_SIGNATURE_HEADER: &str = "webhook-signature";
pub const TOKEN_KEY: &str = "integrations.gitlab.webhook_token";
/// Its field name: the [`WebhookSecrets`] slot.
pub const TOKEN_NAME: &str = "webhook_token";
pub const SIGNING_SECRET_KEY: &str = "integrations.gitlab.signing_secret";
/// Its field name: the [`WebhookSecrets`] slot.
pub const SIGNING_SECRET_NAME: &str = "signing_secret";

const SOURCE: Source = Source::Gitlab;

/// The GitLab secrets of a company; either or both may be set.
#[derive(Clone, Copy, Default)]
pub struct GitLabSecrets<'a> {
    /// Compared with `X-Gitlab-Token`.
    pub webhook_token: Option<&'a [u8]>,
    /// `whsec_<base64>`: verifies Standard Webhooks signatures.
    pub signing_secret: Option<&'a str>,
}

impl fmt::Debug for GitLabSecrets<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = |set: bool| if set { "<redacted>" } else { "<unset>" };
        f.debug_struct("GitLabSecrets")
            .field("webhook_token", &state(self.webhook_token.is_some()))
            .field("signing_secret", &state(self.signing_secret.is_some()))
            .finish()
    }
}

fn usable(secret: Option<&[u8]>) -> Option<&[u8]> {
    secret.filter(|s| !s.iter().all(u8::is_ascii_whitespace))
}

/// Verifies a signed request when it carries `webhook-signature` and a
/// signing secret is configured, else the `X-Gitlab-Token`.
pub fn verify<H: Headers + ?Sized>(
    headers: &H,
    body: &[u8],
    secrets: GitLabSecrets<'_>,
    now: DateTime<Utc>,
) -> Result<(), WebhookError> {
    let token = usable(secrets.webhook_token);
    let signing = usable(secrets.signing_secret.map(str::as_bytes));
    if token.is_none() && signing.is_none() {
        return Err(WebhookError::MissingSecret {
            from: SOURCE,
            key: TOKEN_KEY,
        });
    }
    let signature = get(headers, WEBHOOK_SIGNATURE_HEADER);
    if let (Some(secret), Some(signature)) = (signing, signature) {
        return verify_standard(headers, body, secret, signature, now);
    }
    if let Some(expected) = token {
        let given = get(headers, TOKEN_HEADER).ok_or(WebhookError::MissingHeader {
            from: SOURCE,
            header: TOKEN_HEADER,
        })?;
        return if secrets_equal(given.as_bytes(), expected) {
            Ok(())
        } else {
            Err(WebhookError::BadSignature {
                from: SOURCE,
                header: TOKEN_HEADER,
            })
        };
    }
    Err(WebhookError::MissingHeader {
        from: SOURCE,
        header: WEBHOOK_SIGNATURE_HEADER,
    })
}

/// Standard Webhooks verification, shared by any source that signs that way.
fn verify_standard<H: Headers + ?Sized>(
    headers: &H,
    body: &[u8],
    whsec: &[u8],
    signature: &str,
    now: DateTime<Utc>,
) -> Result<(), WebhookError> {
    let missing = |header| WebhookError::MissingHeader {
        from: SOURCE,
        header,
    };
    let id = get(headers, WEBHOOK_ID_HEADER).ok_or_else(|| missing(WEBHOOK_ID_HEADER))?;
    let ts =
        get(headers, WEBHOOK_TIMESTAMP_HEADER).ok_or_else(|| missing(WEBHOOK_TIMESTAMP_HEADER))?;
    check_timestamp(SOURCE, WEBHOOK_TIMESTAMP_HEADER, ts, now)?;
    let key = standard_key(whsec).ok_or(WebhookError::MissingSecret {
        from: SOURCE,
        key: SIGNING_SECRET_KEY,
    })?;
    // Several space-separated signatures may be sent during key rotation.
    let matched = signature.split_whitespace().any(|entry| {
        let Some(b64) = entry.strip_prefix("v1,") else {
            return false;
        };
        let Ok(tag) = BASE64.decode(b64) else {
            return false;
        };
        hmac_matches(
            &key,
            &[id.as_bytes(), b".", ts.as_bytes(), b".", body],
            &tag,
        )
    });
    if matched {
        Ok(())
    } else {
        Err(WebhookError::BadSignature {
            from: SOURCE,
            header: WEBHOOK_SIGNATURE_HEADER,
        })
    }
}

/// The HMAC key of a `whsec_<base64>` secret (the prefix is optional).
/// `None` when the rest is not base64: a secret that can verify nothing.
fn standard_key(secret: &[u8]) -> Option<Vec<u8>> {
    let s = std::str::from_utf8(secret).ok()?.trim();
    let b64 = s.strip_prefix("whsec_").unwrap_or(s);
    BASE64.decode(b64).ok().filter(|k| !k.is_empty())
}

/// The `webhook-signature` value a Standard Webhooks sender would send, or
/// `None` when `signing_secret` is not `whsec_<base64>`.
pub fn standard_signature(
    signing_secret: &str,
    webhook_id: &str,
    timestamp: &str,
    body: &[u8],
) -> Option<String> {
    let key = standard_key(signing_secret.as_bytes())?;
    let tag = hmac_sha256(
        &key,
        &[
            webhook_id.as_bytes(),
            b".",
            timestamp.as_bytes(),
            b".",
            body,
        ],
    );
    Some(format!("v1,{}", BASE64.encode(tag)))
}

/// `issue` / `work_item`, `note` and `merge_request` hooks become
/// notifications; the rest is ignored.
pub fn normalize<H: Headers + ?Sized>(headers: &H, body: &[u8]) -> Result<Inbound, WebhookError> {
    let delivery = get(headers, EVENT_UUID_HEADER)
        .or_else(|| get(headers, WEBHOOK_ID_HEADER))
        .ok_or(WebhookError::MissingHeader {
            from: SOURCE,
            header: EVENT_UUID_HEADER,
        })?
        .to_string();
    let payload = json::parse(SOURCE, body)?;
    let object_kind = text(&payload, &["object_kind"]).unwrap_or_default();
    let attrs = payload
        .get("object_attributes")
        .cloned()
        .unwrap_or_default();
    let project =
        text(&payload, &["project", "path_with_namespace"]).ok_or_else(|| WebhookError::BadJson {
            from: SOURCE,
            reason: format!("{object_kind} hook without project.path_with_namespace"),
        });

    let (kind, thread, title, body_text) = match object_kind.as_str() {
        "issue" | "work_item" | "merge_request" => {
            let action = text(&attrs, &["action"]);
            let object = if object_kind == "merge_request" {
                "merge_request"
            } else {
                "issue"
            };
            let kind = match action {
                Some(a) => format!("{object}.{a}"),
                None => object.to_string(),
            };
            (
                kind,
                text(&attrs, &["iid"]),
                text(&attrs, &["title"]),
                text(&attrs, &["description"]).unwrap_or_default(),
            )
        }
        "note" => {
            let noteable = text(&attrs, &["noteable_type"]).unwrap_or_default();
            let (parent_key, parent_id) = match noteable.as_str() {
                "Issue" => ("issue", "iid"),
                "MergeRequest" => ("merge_request", "iid"),
                "Commit" => ("commit", "id"),
                "Snippet" => ("snippet", "id"),
                _ => ("issue", "iid"),
            };
            let parent = payload.get(parent_key).cloned().unwrap_or_default();
            (
                format!("note.{parent_key}"),
                text(&parent, &[parent_id]),
                text(&parent, &["title"]),
                text(&attrs, &["note"]).unwrap_or_default(),
            )
        }
        other => {
            return Ok(Inbound::ignored(
                Some(delivery),
                format!(
                    "gitlab {} is not routed",
                    if other.is_empty() { "hook" } else { other }
                ),
            ));
        }
    };
    let project = project?;

    let mut assignees = Vec::new();
    for name in texts(&payload, &["assignees"], &["username"]) {
        push_unique(&mut assignees, name);
    }
    if object_kind == "note" {
        // Note hooks carry the parent's assignees only as ids; keep what names there are.
        for name in texts(&payload, &["merge_request", "assignees"], &["username"]) {
            push_unique(&mut assignees, name);
        }
    }
    let notification = Notification {
        source: SOURCE,
        kind,
        delivery_key: delivery,
        channel_or_project: project,
        thread,
        sender: text(&payload, &["user", "username"]),
        sender_is_bot: text(&payload, &["user", "username"]).is_some_and(|u| is_bot_user(&u)),
        direct: false,
        title,
        mentions: mentions::at_handles(&body_text),
        text: body_text,
        assignees,
        url: text(&attrs, &["url"]),
        raw: payload,
    };
    Ok(Inbound::Notification(Box::new(notification)))
}

/// Project and group access tokens act as `project_{id}_bot_{hash}` /
/// `group_{id}_bot_{hash}` users.
fn is_bot_user(username: &str) -> bool {
    (username.starts_with("project_") || username.starts_with("group_"))
        && username.contains("_bot")
}

/// [`verify`] then [`normalize`].
pub fn receive<H: Headers + ?Sized>(
    headers: &H,
    body: &[u8],
    secrets: GitLabSecrets<'_>,
    now: DateTime<Utc>,
) -> Result<Inbound, WebhookError> {
    verify(headers, body, secrets, now)?;
    normalize(headers, body)
}

/// The source description the API, the router and the redaction checks ask.
pub struct Gitlab;

impl WebhookSource for Gitlab {
    fn source(&self) -> Source {
        SOURCE
    }

    fn secrets<'c>(&self, company: &'c Company, _org: &'c Organization) -> Vec<SecretRef<'c>> {
        let i = company.integrations.gitlab.as_ref();
        vec![
            SecretRef {
                name: TOKEN_NAME,
                seat: None,
                path: TOKEN_KEY.to_owned(),
                raw: i.and_then(|g| g.webhook_token.as_ref()),
            },
            SecretRef {
                name: SIGNING_SECRET_NAME,
                seat: None,
                path: SIGNING_SECRET_KEY.to_owned(),
                raw: i.and_then(|g| g.signing_secret.as_ref()),
            },
        ]
    }

    fn secret_fields(&self) -> &'static [&'static str] {
        &["webhook_token", "signing_secret", "token"]
    }

    fn receive(
        &self,
        r: WebhookRequest<'_>,
        secrets: &WebhookSecrets,
    ) -> Result<Inbound, WebhookError> {
        let secrets = GitLabSecrets {
            webhook_token: secrets.get(SOURCE, TOKEN_NAME, None).map(Secret::bytes),
            signing_secret: secrets
                .get(SOURCE, SIGNING_SECRET_NAME, None)
                .map(Secret::as_str),
        };
        receive(r.headers, r.body, secrets, r.now)
    }

    fn replay_key(&self, headers: &dyn Headers, body: &[u8]) -> Option<String> {
        // The Standard Webhooks signature covers `webhook-id`; the token does not.
        match get(headers, WEBHOOK_SIGNATURE_HEADER) {
            Some(_) => None,
            None => Some(body_key(body)),
        }
    }

    fn credential_headers(&self) -> &'static [&'static str] {
        &[
            TOKEN_HEADER,
            WEBHOOK_SIGNATURE_HEADER,
            WEBHOOK_TIMESTAMP_HEADER,
            WEBHOOK_ID_HEADER,
        ]
    }

    fn secret_headers(&self) -> &'static [&'static str] {
        &[TOKEN_HEADER, WEBHOOK_SIGNATURE_HEADER]
    }

    fn kept_headers(&self) -> &'static [&'static str] {
        &[
            EVENT_HEADER,
            EVENT_UUID_HEADER,
            WEBHOOK_ID_HEADER,
            "x-gitlab-instance",
        ]
    }

    fn seat_account<'s>(&self, i: &'s RoleIntegrations) -> Option<&'s str> {
        i.gitlab.as_ref().and_then(|a| a.user.as_deref())
    }

    fn contact_id<'s>(&self, c: &'s Contact) -> Option<&'s str> {
        c.gitlab_username.as_deref()
    }

    fn unit_projects<'u>(&self, i: &'u UnitIntegrations) -> &'u [String] {
        &i.gitlab_projects
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    /// Known answer from the Standard Webhooks reference test suite, checked
    /// independently with Python's hmac and base64 modules.
    #[test]
    fn standard_webhooks_known_answer_verifies() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let headers = [
            (WEBHOOK_ID_HEADER, "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            (WEBHOOK_TIMESTAMP_HEADER, "1614265330"),
            (
                WEBHOOK_SIGNATURE_HEADER,
                "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            ),
        ];
        let secrets = GitLabSecrets {
            webhook_token: None,
            signing_secret: Some(secret),
        };
        let body = br#"{"test": 2432232314}"#;
        verify(&headers, body, secrets, at(1_614_265_330)).unwrap();
        // Rotation: a wrong signature first, the right one second.
        let rotated = [
            headers[0],
            headers[1],
            (
                WEBHOOK_SIGNATURE_HEADER,
                "v1,AAAA v2,xyz v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            ),
        ];
        verify(&rotated, body, secrets, at(1_614_265_330)).unwrap();
        assert!(matches!(
            verify(&headers, br#"{"test": 1}"#, secrets, at(1_614_265_330)),
            Err(WebhookError::BadSignature { .. })
        ));
        assert!(matches!(
            verify(&headers, body, secrets, at(1_614_265_330 + 400)),
            Err(WebhookError::StaleTimestamp { .. })
        ));
    }

    #[test]
    fn classic_token_is_compared_exactly() {
        let secrets = GitLabSecrets {
            webhook_token: Some(b"glwt-token"),
            signing_secret: None,
        };
        let now = at(0);
        verify(&[("X-Gitlab-Token", "glwt-token")], b"{}", secrets, now).unwrap();
        assert!(matches!(
            verify(&[("X-Gitlab-Token", "glwt-token2")], b"{}", secrets, now),
            Err(WebhookError::BadSignature { .. })
        ));
        assert_eq!(
            verify(&[("x", "y")], b"{}", secrets, now).unwrap_err(),
            WebhookError::MissingHeader {
                from: SOURCE,
                header: TOKEN_HEADER
            }
        );
        let none = GitLabSecrets::default();
        assert_eq!(
            verify(&[("X-Gitlab-Token", "x")], b"{}", none, now)
                .unwrap_err()
                .status_code(),
            503
        );
        let blank = GitLabSecrets {
            webhook_token: Some(b""),
            signing_secret: Some(""),
        };
        assert!(matches!(
            verify(&[("X-Gitlab-Token", "")], b"{}", blank, now),
            Err(WebhookError::MissingSecret { .. })
        ));
    }

    #[test]
    fn signature_configured_but_only_token_sent() {
        let secrets = GitLabSecrets {
            webhook_token: None,
            signing_secret: Some("whsec_c2VjcmV0"),
        };
        assert_eq!(
            verify(&[("X-Gitlab-Token", "x")], b"{}", secrets, at(0)).unwrap_err(),
            WebhookError::MissingHeader {
                from: SOURCE,
                header: WEBHOOK_SIGNATURE_HEADER
            }
        );
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let secrets = GitLabSecrets {
            webhook_token: Some(b"very-secret-token"),
            signing_secret: Some("whsec_c2VjcmV0"),
        };
        let dbg = format!("{secrets:?}");
        assert!(
            !dbg.contains("very-secret") && !dbg.contains("c2VjcmV0"),
            "{dbg}"
        );
    }

    fn signed_headers(secret: &str, id: &str, now: i64, body: &[u8]) -> Vec<(String, String)> {
        let ts = now.to_string();
        let sig = standard_signature(secret, id, &ts, body).unwrap();
        vec![
            ("webhook-id".into(), id.into()),
            ("webhook-timestamp".into(), ts),
            ("webhook-signature".into(), sig),
        ]
    }

    fn issue_hook() -> Value {
        json!({
            "object_kind": "issue", "event_type": "issue",
            "user": {"username": "alice"},
            "project": {"path_with_namespace": "acme/platform"},
            "object_attributes": {"iid": 12, "title": "Flaky deploy", "action": "open",
                "description": "Deploys fail sometimes, @ops-agent please look",
                "url": "https://gitlab.example.com/acme/platform/-/issues/12"},
            "assignees": [{"username": "ops-agent"}, {"username": "bob"}],
        })
    }

    #[test]
    fn signed_issue_hook_is_normalized_and_deduped_on_webhook_id() {
        let body = serde_json::to_vec(&issue_hook()).unwrap();
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let headers = signed_headers(secret, "msg_1", 1_700_000_000, &body);
        let secrets = GitLabSecrets {
            webhook_token: Some(b"unused"),
            signing_secret: Some(secret),
        };
        let inbound = receive(&headers, &body, secrets, at(1_700_000_100)).unwrap();
        let n = inbound.notification().unwrap();
        assert_eq!(n.kind, "issue.open");
        assert_eq!(n.delivery_key, "msg_1");
        assert_eq!(n.channel_or_project, "acme/platform");
        assert_eq!(n.thread.as_deref(), Some("12"));
        assert_eq!(n.assignees, ["ops-agent", "bob"]);
        assert_eq!(n.mentions, ["ops-agent"]);
        assert_eq!(n.sender.as_deref(), Some("alice"));
        assert!(n.url.as_deref().unwrap().ends_with("/issues/12"));
    }

    #[test]
    fn note_and_merge_request_hooks() {
        let note = json!({
            "object_kind": "note", "user": {"username": "bob"},
            "project": {"path_with_namespace": "acme/platform"},
            "object_attributes": {"note": "@review-agent thoughts?", "noteable_type": "MergeRequest",
                "url": "https://gitlab.example.com/acme/platform/-/merge_requests/3#note_9"},
            "merge_request": {"iid": 3, "title": "Speed up CI", "assignees": [{"username": "carol"}]},
        });
        let body = serde_json::to_vec(&note).unwrap();
        let headers = [
            ("X-Gitlab-Event-UUID", "uuid-1"),
            ("X-Gitlab-Event", "Note Hook"),
        ];
        let n = normalize(&headers, &body).unwrap();
        let n = n.notification().unwrap();
        assert_eq!(n.kind, "note.merge_request");
        assert_eq!(n.delivery_key, "uuid-1");
        assert_eq!(n.thread.as_deref(), Some("3"));
        assert_eq!(n.title.as_deref(), Some("Speed up CI"));
        assert_eq!(n.text, "@review-agent thoughts?");
        assert_eq!(n.mentions, ["review-agent"]);
        assert_eq!(n.assignees, ["carol"]);

        let mr = json!({
            "object_kind": "merge_request", "user": {"username": "bob"},
            "project": {"path_with_namespace": "acme/platform"},
            "object_attributes": {"iid": 3, "title": "Speed up CI", "action": "update", "description": ""},
            "assignees": [{"username": "carol"}],
        });
        let body = serde_json::to_vec(&mr).unwrap();
        let n = normalize(&headers, &body).unwrap();
        assert_eq!(n.notification().unwrap().kind, "merge_request.update");
    }

    #[test]
    fn other_hooks_are_ignored_and_missing_uuid_is_400() {
        let push = br#"{"object_kind":"push","project":{"path_with_namespace":"a/b"}}"#;
        assert!(matches!(
            normalize(&[("X-Gitlab-Event-UUID", "u")], push).unwrap(),
            Inbound::Ignored { .. }
        ));
        assert_eq!(
            normalize(&[("x", "y")], push).unwrap_err().status_code(),
            400
        );
        let no_project = br#"{"object_kind":"issue","object_attributes":{}}"#;
        assert!(matches!(
            normalize(&[("X-Gitlab-Event-UUID", "u")], no_project),
            Err(WebhookError::BadJson { .. })
        ));
    }
}
