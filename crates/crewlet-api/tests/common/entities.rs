//! Calling the per-entity `/config` routes in tests.

use reqwest::Method;
use serde_json::Value;

use super::Harness;

/// An authenticated request (JSON body when given).
pub fn request(
    h: &Harness,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> reqwest::RequestBuilder {
    let b = h.authed(h.http.request(method, h.url(path)));
    match body {
        Some(v) => b.json(v),
        None => b,
    }
}

/// Sends it and answers the status and the body as JSON (`Null` if not JSON).
pub async fn call(h: &Harness, method: Method, path: &str, body: Option<&Value>) -> (u16, Value) {
    let r = request(h, method, path, body).send().await.unwrap();
    let status = r.status().as_u16();
    let body = r.json().await.unwrap_or(Value::Null);
    (status, body)
}

pub async fn get(h: &Harness, path: &str) -> (u16, Value) {
    call(h, Method::GET, path, None).await
}

pub async fn put(h: &Harness, path: &str, body: Value) -> (u16, Value) {
    call(h, Method::PUT, path, Some(&body)).await
}

pub async fn post(h: &Harness, path: &str, body: Value) -> (u16, Value) {
    call(h, Method::POST, path, Some(&body)).await
}

pub async fn delete(h: &Harness, path: &str) -> (u16, Value) {
    call(h, Method::DELETE, path, None).await
}

/// How many revisions the store holds.
pub async fn revision_count(h: &Harness) -> usize {
    h.stores.config.list(1000).await.unwrap().len()
}

/// The newest record of `GET /config/audit`.
pub async fn latest(h: &Harness) -> Value {
    let (status, body) = get(h, "/config/audit?limit=1").await;
    assert_eq!(status, 200, "{body}");
    body["revisions"][0].clone()
}

/// Asserts a 201 write answered the new active revision, recorded in
/// `/config/audit` as written by the harness token with `summary`.
pub async fn assert_written(h: &Harness, answer: &(u16, Value), summary: &str) {
    let (status, record) = answer;
    assert_eq!(*status, 201, "{record}");
    let audit = latest(h).await;
    assert_eq!(audit["revision_id"], record["revision_id"], "{audit}");
    assert_eq!(audit["created_by"], "api:ops");
    assert_eq!(audit["source"], "api.entity");
    assert_eq!(audit["summary"], summary);
    assert_eq!(audit["is_active"], true);
}

/// Asserts a 400 `code` with a problem whose path contains `path`, and
/// that nothing was stored.
pub async fn assert_refused(
    h: &Harness,
    answer: &(u16, Value),
    code: &str,
    path: &str,
    before: usize,
) {
    let (status, body) = answer;
    assert_eq!(*status, 400, "{body}");
    assert_eq!(body["error"], code, "{body}");
    let problems = body["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("no problems: {body}"));
    assert!(
        problems
            .iter()
            .any(|p| p["path"].as_str().is_some_and(|s| s.contains(path))),
        "no problem at `{path}`: {problems:#?}"
    );
    assert_eq!(revision_count(h).await, before, "nothing stored");
}
