//! The [`WebhookSource`] descriptions as their users ask them: the API's
//! route (secrets, receive, statuses), and `crewlet-telemetry`'s redaction
//! list, which cannot import them (telemetry does not depend on this crate).

use chrono::Utc;
use crewlet_integrations::webhook::{github, gitlab, slack};
use crewlet_integrations::{Inbound, Source, WebhookError, WebhookRequest, WebhookSecrets};
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::json;

const COMPANY: &str = r#"
name: Acme
providers:
  llm:
    main: {type: openai, model: m, api_keys: [k-k-k-k]}
integrations:
  github: {webhook_secret: gh-hook-secret, token: gh-token-1}
  gitlab: {webhook_token: gl-hook-token, signing_secret: "whsec_c2VjcmV0c2VjcmV0"}
  plane: {webhook_secret: plane-hook-secret}
  jira: {webhook_secret: jira-hook-secret}
  confluence: {webhook_secret: wiki-hook-secret}
roles:
  - name: Eng
    handle: eng
    integrations:
      slack: {signing_secret: slack-sign-eng, bot_token: xoxb-seat-token, bot_user_id: UENG}
  - {name: Ops, handle: ops}
"#;

fn company() -> crewlet_config::Company {
    crewlet_config::check_company("t.yaml", COMPANY)
        .unwrap_or_else(|p| panic!("{p:?}"))
        .0
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (k, v) in pairs {
        map.insert(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    map
}

#[test]
fn telemetry_redacts_every_field_a_source_declares_secret() {
    for s in Source::ALL {
        for field in s.webhook().secret_fields() {
            assert!(
                crewlet_telemetry::COMPANY_SECRET_KEYS.contains(field),
                "{s}: `{field}` holds a credential but crewlet-telemetry does not redact it"
            );
        }
    }
    // And in practice: every webhook secret the sources read is one
    // telemetry finds in the company.
    let company = company();
    let org = company.organization();
    let found = crewlet_telemetry::secrets_in_company(&company, |_| None);
    let secrets = WebhookSecrets::from_company(&company, &org, |_| None);
    assert_eq!(secrets.values().len(), 7);
    for v in secrets.values() {
        assert!(found.contains(&v), "{v} is not redacted");
    }
}

#[test]
fn sources_verify_with_the_secret_they_declare() {
    let company = company();
    let org = company.organization();
    let secrets = WebhookSecrets::from_company(&company, &org, |_| None);
    let now = Utc::now();

    let body = serde_json::to_vec(&json!({"zen": "hi", "hook_id": 1})).unwrap();
    let sig = github::signature(b"gh-hook-secret", &body);
    let h = headers(&[
        ("X-Hub-Signature-256", &sig),
        ("X-GitHub-Delivery", "d-1"),
        ("X-GitHub-Event", "ping"),
    ]);
    let request = WebhookRequest {
        headers: &h,
        body: &body,
        handle: None,
        now,
    };
    let got = Source::Github.webhook().receive(request, &secrets);
    assert_eq!(got, github::receive(&h, &body, Some(b"gh-hook-secret")));
    assert!(matches!(got, Ok(Inbound::Ignored { .. })), "{got:?}");
    assert!(Source::Github.webhook().replay_key(&h, &body).is_some());

    // GitLab's classic token.
    let body = br#"{"object_kind":"push"}"#;
    let h = headers(&[
        ("X-Gitlab-Token", "gl-hook-token"),
        ("X-Gitlab-Event", "Push Hook"),
    ]);
    let request = WebhookRequest {
        headers: &h,
        body,
        handle: None,
        now,
    };
    let via_source = Source::Gitlab.webhook().receive(request, &secrets);
    let direct = gitlab::receive(
        &h,
        body,
        gitlab::GitLabSecrets {
            webhook_token: Some(b"gl-hook-token"),
            signing_secret: Some("whsec_c2VjcmV0c2VjcmV0"),
        },
        now,
    );
    assert_eq!(via_source, direct);

    // Slack: the seat's own app; a seat without one has no route.
    let body = br#"{"type":"url_verification","challenge":"c-1"}"#;
    let ts = now.timestamp().to_string();
    let sig = slack::signature(b"slack-sign-eng", &ts, body);
    let h = headers(&[
        ("X-Slack-Signature", &sig),
        ("X-Slack-Request-Timestamp", &ts),
    ]);
    let slack_source = Source::Slack.webhook();
    let request = WebhookRequest {
        headers: &h,
        body,
        handle: Some("eng"),
        now,
    };
    assert_eq!(
        slack_source.receive(request, &secrets),
        Ok(Inbound::Challenge("c-1".into()))
    );
    let for_ops = WebhookRequest {
        handle: Some("ops"),
        ..request
    };
    assert!(matches!(
        slack_source.receive(for_ops, &secrets),
        Err(WebhookError::MissingSecret { .. })
    ));
    assert_eq!(slack_source.seat_route(&secrets, "eng"), Ok(()));
    assert_eq!(
        slack_source.seat_route(&secrets, "ops"),
        Err(
            "seat `ops` has no Slack app here: set its integrations.slack.signing_secret"
                .to_owned()
        )
    );
    assert_eq!(slack_source.replay_key(&h, body), None);
}
