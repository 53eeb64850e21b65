//! The Slack Web API client against the fake: answers, `ok: false`
//! refusals and 429s read as typed results, and no token is ever part of
//! an error.

use std::time::Duration;

use crewlet_integrations::slack::{SlackClient, SlackError};
use crewlet_test_support::slack::{FakeSlack, StatusCall};

async fn client(slack: &FakeSlack) -> SlackClient {
    SlackClient::new(&format!("{}/", slack.api_url())).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn statuses_posts_and_identity_as_a_seats_bot() {
    let slack = FakeSlack::start().await;
    slack.add_bot("xoxb-eng", "UENG");
    let c = client(&slack).await;
    c.set_status("xoxb-eng", "C1", "1700.1", "is thinking...")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    c.set_status("xoxb-eng", "C1", "1700.1", "")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        slack.statuses(),
        [
            StatusCall {
                token: "xoxb-eng".into(),
                channel: "C1".into(),
                thread_ts: "1700.1".into(),
                status: "is thinking...".into()
            },
            StatusCall {
                token: "xoxb-eng".into(),
                channel: "C1".into(),
                thread_ts: "1700.1".into(),
                status: String::new()
            },
        ]
    );
    let ts = c
        .post_message("xoxb-eng", "C1", "hello & welcome = 100%", Some("1700.1"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let posted = slack.messages();
    assert_eq!(posted[0].ts, ts);
    assert_eq!(posted[0].text, "hello & welcome = 100%");
    assert_eq!(posted[0].thread_ts.as_deref(), Some("1700.1"));
    let me = c
        .auth_test("xoxb-eng")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(me.user_id, "UENG");
}

#[tokio::test]
async fn refusals_and_rate_limits_are_typed_errors_without_the_token() {
    let slack = FakeSlack::start().await;
    let c = client(&slack).await;
    let err = c
        .set_status("xoxb-secret-value", "C1", "1.2", "x")
        .await
        .err()
        .unwrap_or_else(|| panic!("an unknown token works"));
    assert_eq!(err.code(), Some("invalid_auth"));
    assert!(err.is_token_error());
    assert!(!err.to_string().contains("secret-value"));

    slack.add_bot("xoxb-eng", "UENG");
    slack.rate_limit("chat.postMessage", true);
    let err = c.post_message("xoxb-eng", "C1", "hi", None).await.err();
    assert_eq!(
        err,
        Some(SlackError::RateLimited {
            method: "chat.postMessage".into(),
            retry_after: Some(Duration::from_secs(1)),
        })
    );

    let err = c
        .manifest_validate("xoxe-unknown", &serde_json::json!({}), None)
        .await
        .err();
    assert_eq!(
        err.as_ref().and_then(SlackError::code),
        Some("invalid_auth")
    );
    slack.add_config_token("xoxe-ok");
    let err = c
        .manifest_validate(
            "xoxe-ok",
            &serde_json::json!({"display_information": {}}),
            None,
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("a nameless manifest validates"));
    assert_eq!(err.code(), Some("invalid_manifest"));
    assert!(
        err.to_string().contains("/display_information/name"),
        "{err}"
    );
}
