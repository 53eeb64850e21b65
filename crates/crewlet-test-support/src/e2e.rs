//! Pieces shared by the end-to-end tests that drive a running Crewlet over
//! HTTP: signed webhook requests, a free port, a fresh directory, `GET` and
//! `POST` returning the status and the JSON body.
//!
//! Webhooks are signed with the production helpers of
//! `crewlet_integrations::webhook` (the API verifies with the same code), so
//! these fixtures test routing and handling, not the signature scheme; the
//! API's own tests check that against an independent HMAC.

use std::path::PathBuf;

use crewlet_integrations::webhook::{github, slack};
use serde_json::{Value, json};

/// A webhook request: its body and its headers.
pub type Signed = (Vec<u8>, Vec<(&'static str, String)>);

/// `body` as a Slack Events API request signed now with `secret`:
/// `content-type: application/json`, the request timestamp and its `v0`
/// signature.
pub fn slack_signed(secret: &str, body: Vec<u8>) -> Signed {
    let ts = chrono::Utc::now().timestamp().to_string();
    let sig = slack::signature(secret.as_bytes(), &ts, &body);
    (
        body,
        vec![
            ("content-type", "application/json".into()),
            (slack::TIMESTAMP_HEADER, ts),
            (slack::SIGNATURE_HEADER, sig),
        ],
    )
}

/// `body` as a GitHub webhook delivery of `event` with id `delivery`, signed
/// (`sha256=`) with `secret`.
pub fn github_signed(secret: &str, event: &str, delivery: &str, body: Vec<u8>) -> Signed {
    let sig = github::signature(secret.as_bytes(), &body);
    (
        body,
        vec![
            ("content-type", "application/json".into()),
            (github::EVENT_HEADER, event.into()),
            (github::DELIVERY_HEADER, delivery.into()),
            (github::SIGNATURE_HEADER, sig),
        ],
    )
}

/// A GitHub `issues.opened` (#7 "Build is red" by `octocat`) on `acme/app`,
/// delivery `delivery`, signed with `secret`.
pub fn github_issue(secret: &str, delivery: &str) -> Signed {
    let body = json!({
        "action": "opened",
        "issue": {"number": 7, "title": "Build is red", "body": "CI fails on main",
                  "html_url": "https://github.com/acme/app/issues/7",
                  "user": {"login": "octocat"}, "assignees": []},
        "repository": {"full_name": "acme/app"},
        "sender": {"login": "octocat"}
    })
    .to_string()
    .into_bytes();
    github_signed(secret, "issues", delivery, body)
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// A fresh directory for the test `test`:
/// `$TMPDIR/crewlet-e2e-{pid}-{test}-{uuid}`. Left behind for inspection.
pub fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "crewlet-e2e-{}-{test}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// `GET base+path`: the status (0 when nothing answers) and the JSON body
/// (`Null` when it is not JSON).
pub async fn get(base: &str, path: &str) -> (u16, Value) {
    match reqwest::get(format!("{base}{path}")).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

/// `POST base+path` with `body` and `headers`: the status and the JSON body
/// (`Null` when it is not JSON). Panics when nothing answers.
pub async fn post(
    base: &str,
    path: &str,
    body: Vec<u8>,
    headers: &[(&'static str, String)],
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, v);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json::<Value>().await.unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn github_issue_is_signed_with_the_secret_and_names_the_delivery() {
        let (body, headers) = github_issue("s3cret", "d-1");
        let header = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        assert_eq!(header(github::DELIVERY_HEADER), "d-1");
        assert_eq!(header(github::EVENT_HEADER), "issues");
        assert_eq!(
            header(github::SIGNATURE_HEADER),
            github::signature(b"s3cret", &body)
        );
    }

    #[test]
    fn slack_signed_signs_the_body_at_its_timestamp() {
        let (body, headers) = slack_signed("s3cret", b"{}".to_vec());
        let ts = &headers[1].1;
        assert_eq!(headers[1].0, slack::TIMESTAMP_HEADER);
        assert_eq!(headers[2].0, slack::SIGNATURE_HEADER);
        assert_eq!(headers[2].1, slack::signature(b"s3cret", ts, &body));
    }

    #[test]
    fn temp_dirs_are_fresh() {
        let a = temp_dir("test-support");
        let b = temp_dir("test-support");
        assert_ne!(a, b);
        assert!(a.is_dir() && b.is_dir());
        let _ = std::fs::remove_dir(a);
        let _ = std::fs::remove_dir(b);
    }
}
