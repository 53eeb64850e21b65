//! Known answers from the vendors' own documentation, so our code is checked
//! against the services rather than against our fakes:
//!
//! - signatures with a published test vector: the Standard Webhooks vector
//!   that GitLab's signed webhooks follow, GitHub's "Hello, World!" example
//!   and Slack's slash-command example;
//! - payloads in the documented shape whose signature the vendor explains
//!   but does not publish (Plane `X-Plane-Signature`, Confluence
//!   `X-Hub-Signature`): the expected signatures were computed once with
//!   Python's `hmac` module, as Plane's own verification snippet does, and
//!   are pinned here;
//! - Confluence content-search answers in the documented shape, Cloud
//!   (`_links.base` ends in `/wiki`, `webui` `/spaces/...`) and Data Center
//!   (no context path, `webui` `/display/...`, numeric ids), served by a
//!   local server and turned into hits with the links a person can open.

use std::path::PathBuf;

use axum::Router;
use axum::extract::RawQuery;
use axum::routing::get;
use chrono::{DateTime, TimeZone, Utc};
use crewlet_config::Company;
use crewlet_integrations::knowledge::{ConfluenceSearcher, KnowledgeSearcher};
use crewlet_integrations::webhook::{
    confluence, github, gitlab, gitlab::GitLabSecrets, plane, slack,
};
use crewlet_integrations::{Inbound, WebhookError};
use http::{HeaderMap, HeaderName, HeaderValue};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/vendor")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(
            HeaderName::from_bytes(k.as_bytes()).unwrap_or_else(|e| panic!("{e}")),
            HeaderValue::from_str(v).unwrap_or_else(|e| panic!("{e}")),
        );
    }
    h
}

fn at(unix: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(unix, 0)
        .single()
        .unwrap_or_else(|| panic!("bad time"))
}

/// The Standard Webhooks test vector (GitLab's signed webhooks use this
/// scheme: `webhook-id`, `webhook-timestamp`, `webhook-signature`).
#[test]
fn gitlab_standard_webhooks_vector() {
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let (id, ts) = ("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330");
    let body = br#"{"test": 2432232314}"#;
    let expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
    assert_eq!(
        gitlab::standard_signature(secret, id, ts, body).as_deref(),
        Some(expected)
    );
    let secrets = GitLabSecrets {
        webhook_token: None,
        signing_secret: Some(secret),
    };
    let h = headers(&[
        ("webhook-id", id),
        ("webhook-timestamp", ts),
        ("webhook-signature", expected),
    ]);
    assert!(gitlab::verify(&h, body, secrets, at(1_614_265_330)).is_ok());
    // One byte of the body changed: refused.
    let tampered = br#"{"test": 2432232315}"#;
    assert!(matches!(
        gitlab::verify(&h, tampered, secrets, at(1_614_265_330)),
        Err(WebhookError::BadSignature { .. })
    ));
}

/// GitHub's documented example: secret "It's a Secret to Everybody", body
/// "Hello, World!".
#[test]
fn github_documented_signature() {
    let expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let secret = b"It's a Secret to Everybody";
    assert_eq!(github::signature(secret, b"Hello, World!"), expected);
    let h = headers(&[("X-Hub-Signature-256", expected)]);
    assert!(github::verify(&h, b"Hello, World!", Some(secret)).is_ok());
    assert!(github::verify(&h, b"Hello, World?", Some(secret)).is_err());
}

/// Slack's documented slash-command example (signing secret, timestamp,
/// form body and `v0=` signature as published).
#[test]
fn slack_documented_signature() {
    let secret = b"8f742231b10e8888abcd99yyyzzz85a5";
    let ts = "1531420618";
    let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    let expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
    assert_eq!(slack::signature(secret, ts, body.as_bytes()), expected);
    let h = headers(&[
        ("X-Slack-Signature", expected),
        ("X-Slack-Request-Timestamp", ts),
    ]);
    assert!(slack::verify(&h, body.as_bytes(), Some(secret), at(1_531_420_618 + 30)).is_ok());
    // The same delivery ten minutes later is a replay.
    assert!(slack::verify(&h, body.as_bytes(), Some(secret), at(1_531_420_618 + 600)).is_err());
}

/// Plane's documented project-update payload, signed as Plane documents
/// (hex HMAC-SHA256 of the raw body); a project event wakes nobody.
#[test]
fn plane_documented_payload_and_signature() {
    let body = fixture("plane-project-update.json");
    let secret = b"plane-docs-example-secret";
    let expected = "d53d0c33a4d668dece7535cab6bcce724d2fdab357460161803906a9605ffa41";
    assert_eq!(plane::signature(secret, &body), expected);
    let h = headers(&[
        ("X-Plane-Signature", expected),
        ("X-Plane-Delivery", "f819eff4-cd50-4987-bc97-e5be1e04c94f"),
        ("X-Plane-Event", "project"),
    ]);
    match plane::receive(&h, &body, Some(secret)) {
        Ok(Inbound::Ignored { .. }) => {}
        other => panic!("a project update should be ignored: {other:?}"),
    }
    let mut tampered = body.clone();
    if let Some(b) = tampered.iter_mut().find(|b| **b == b'v') {
        *b = b'w';
    }
    assert!(plane::receive(&h, &tampered, Some(secret)).is_err());
}

/// Confluence Cloud's documented `page_created` payload (no event name in
/// the body: it is inferred), signed with `X-Hub-Signature: sha256=`.
#[test]
fn confluence_documented_page_created() {
    let body = fixture("confluence-page-created.json");
    let secret = b"confluence-docs-example-secret";
    let expected = "sha256=bb76afb900df0a5696b340c52f1e64b88b66d0c41be21b86c198519039a25f4f";
    assert_eq!(confluence::signature(secret, &body), expected);
    let h = headers(&[("X-Hub-Signature", expected)]);
    let inbound = confluence::receive(&h, &body, Some(secret)).unwrap_or_else(|e| panic!("{e}"));
    let n = inbound
        .notification()
        .unwrap_or_else(|| panic!("not a notification: {inbound:?}"));
    assert_eq!(n.channel_or_project, "TST");
    assert!(n.text.contains("Release checklist"), "{}", n.text);
    assert!(confluence::receive(&h, &body[1..], Some(secret)).is_err());
}

/// Serves `answer` at `/rest/api/content/search` (under `prefix`) and
/// returns the base URL and the queries it saw.
async fn serve(
    prefix: &'static str,
    answer: Vec<u8>,
) -> (String, std::sync::Arc<parking_lot::Mutex<Vec<String>>>) {
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = Router::new().route(
        &format!("{prefix}/rest/api/content/search"),
        get(move |RawQuery(q): RawQuery| {
            let answer = answer.clone();
            let log = log.clone();
            async move {
                log.lock().push(q.unwrap_or_default());
                ([("content-type", "application/json")], answer)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}{prefix}"), seen)
}

async fn search(url: &str) -> Vec<crewlet_integrations::knowledge::KnowledgeHit> {
    let yaml = format!(
        "name: Fixture Co\nintegrations:\n  confluence: {{url: \"{url}\", email: bot@example.com, token: t0ken}}\nknowledge:\n  confluence_spaces: [TST, OPS]\nroles:\n  - {{name: Engineer, handle: eng}}\n"
    );
    let company = Company::from_yaml("fixture", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let searcher =
        ConfluenceSearcher::from_company(&company, |_| None).unwrap_or_else(|| panic!("none"));
    searcher.search("eng", "release", 5, &[]).await
}

#[tokio::test]
async fn confluence_cloud_search_answer_becomes_hits_with_openable_links() {
    let (url, seen) = serve("/wiki", fixture("confluence-search-cloud.json")).await;
    let hits = search(&url).await;
    assert_eq!(hits.len(), 1, "{hits:?}");
    let h = &hits[0];
    assert_eq!(h.title, "Release checklist");
    assert_eq!(h.page_id, "65611");
    assert_eq!(h.container, "TST");
    assert_eq!(h.ancestors, ["Engineering home"]);
    // The documented base (the site's /wiki), not our configured URL.
    assert_eq!(
        h.url,
        "https://your-domain.atlassian.net/wiki/spaces/TST/pages/65611/Release+checklist"
    );
    assert_eq!(
        h.snippet,
        "Tag the build, then run the smoke tests & announce."
    );
    let q = seen.lock().clone();
    assert!(q[0].contains("cql="), "{q:?}");
}

#[tokio::test]
async fn confluence_data_center_search_answer_becomes_hits_with_openable_links() {
    let (url, _) = serve("", fixture("confluence-search-datacenter.json")).await;
    let hits = search(&url).await;
    assert_eq!(hits.len(), 1, "{hits:?}");
    let h = &hits[0];
    assert_eq!(h.page_id, "1376257", "numeric ids are kept as text");
    assert_eq!(h.container, "OPS");
    assert_eq!(
        h.url,
        "http://confluence.example.com:8090/display/OPS/On-call+handbook"
    );
    assert_eq!(h.snippet, "Paging Acknowledge within 5 minutes.");
}
