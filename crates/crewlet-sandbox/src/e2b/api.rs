//! E2B's control plane (`https://api.<domain>`): sandboxes are made, kept
//! alive, paused, resumed, listed and removed here, with the team's API key
//! in `X-API-Key`.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use crate::{Result, SandboxError};

/// The metadata label every box this backend makes carries, for `list`.
pub const LABEL_KEY: &str = "crewlet";
pub const LABEL_VALUE: &str = "1";

/// Longest wait for one plain (not streaming) request, files included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// A sandbox as the control plane describes it (the fields we use).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxInfo {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// Token envd wants in `X-Access-Token` (secured sandboxes only).
    #[serde(default)]
    pub envd_access_token: Option<String>,
    /// The domain the sandbox is reached on, when not the client's.
    #[serde(default)]
    pub domain: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NewSandbox<'a> {
    #[serde(rename = "templateID")]
    template_id: &'a str,
    timeout: u64,
    env_vars: &'a BTreeMap<String, String>,
    metadata: &'a BTreeMap<String, String>,
    secure: bool,
}

#[derive(Serialize)]
struct Timeout {
    timeout: u64,
}

/// The control-plane client.
pub struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
}

/// Whole seconds for E2B, at least one.
pub fn secs(ttl: Duration) -> u64 {
    ttl.as_secs().max(1)
}

impl Api {
    pub fn new(http: reqwest::Client, base: String, key: String) -> Self {
        Self { http, base, key }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<reqwest::Response> {
        let what = format!("{method} {path}");
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("X-API-Key", &self.key);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            .map_err(|e| SandboxError::Api(scrub(&format!("{what}: {e}"), &self.key)))?;
        Ok(resp)
    }

    /// A successful response, or the error it carries.
    async fn ok(
        &self,
        what: &str,
        id: Option<&str>,
        resp: reqwest::Response,
    ) -> Result<reqwest::Response> {
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        if status == StatusCode::NOT_FOUND
            && let Some(id) = id
        {
            return Err(SandboxError::NoSuchBox(id.to_owned()));
        }
        let body = resp.text().await.unwrap_or_default();
        Err(api_error(what, status, &body, &self.key))
    }

    pub async fn create(
        &self,
        template: &str,
        timeout: Duration,
        env: &BTreeMap<String, String>,
        labels: &BTreeMap<String, String>,
    ) -> Result<SandboxInfo> {
        let mut metadata = labels.clone();
        metadata.insert(LABEL_KEY.to_owned(), LABEL_VALUE.to_owned());
        let body = NewSandbox {
            template_id: template,
            timeout: secs(timeout),
            env_vars: env,
            metadata: &metadata,
            secure: true,
        };
        let body = serde_json::to_value(&body)
            .map_err(|e| SandboxError::Invalid(format!("encode sandbox request: {e}")))?;
        let resp = self.call(Method::POST, "/sandboxes", Some(body)).await?;
        let resp = self.ok("POST /sandboxes", None, resp).await?;
        decode(resp, "POST /sandboxes").await
    }

    pub async fn get(&self, id: &str) -> Result<SandboxInfo> {
        let path = format!("/sandboxes/{}", seg(id));
        let resp = self.call(Method::GET, &path, None).await?;
        let resp = self.ok("GET /sandboxes/{id}", Some(id), resp).await?;
        decode(resp, "GET /sandboxes/{id}").await
    }

    /// Removes a sandbox; one already gone is fine.
    pub async fn delete(&self, id: &str) -> Result<()> {
        let path = format!("/sandboxes/{}", seg(id));
        let resp = self.call(Method::DELETE, &path, None).await?;
        match self.ok("DELETE /sandboxes/{id}", Some(id), resp).await {
            Ok(_) | Err(SandboxError::NoSuchBox(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub async fn set_timeout(&self, id: &str, ttl: Duration) -> Result<()> {
        let path = format!("/sandboxes/{}/timeout", seg(id));
        let body = serde_json::json!(Timeout { timeout: secs(ttl) });
        let resp = self.call(Method::POST, &path, Some(body)).await?;
        self.ok("POST /sandboxes/{id}/timeout", Some(id), resp)
            .await?;
        Ok(())
    }

    pub async fn pause(&self, id: &str) -> Result<()> {
        let path = format!("/sandboxes/{}/pause", seg(id));
        let resp = self.call(Method::POST, &path, None).await?;
        match self.ok("POST /sandboxes/{id}/pause", Some(id), resp).await {
            Ok(_) => Ok(()),
            // 409: already paused, which is what was asked.
            Err(SandboxError::Api(m)) if m.contains(" 409 ") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Resumes a paused sandbox (or confirms a running one) for `ttl`.
    pub async fn connect(&self, id: &str, ttl: Duration) -> Result<SandboxInfo> {
        let path = format!("/sandboxes/{}/connect", seg(id));
        let body = serde_json::json!(Timeout { timeout: secs(ttl) });
        let resp = self.call(Method::POST, &path, Some(body)).await?;
        let resp = self
            .ok("POST /sandboxes/{id}/connect", Some(id), resp)
            .await?;
        decode(resp, "POST /sandboxes/{id}/connect").await
    }

    /// Running sandboxes carrying our label.
    pub async fn list(&self) -> Result<Vec<String>> {
        let filter = format!("{LABEL_KEY}={LABEL_VALUE}");
        let query: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("metadata", &filter)
            .finish();
        let path = format!("/sandboxes?{query}");
        let resp = self.call(Method::GET, &path, None).await?;
        let resp = self.ok("GET /sandboxes", None, resp).await?;
        let listed: Vec<SandboxInfo> = decode(resp, "GET /sandboxes").await?;
        let mut ids: Vec<String> = listed.into_iter().map(|s| s.sandbox_id).collect();
        ids.sort();
        Ok(ids)
    }
}

/// One URL path segment.
pub fn seg(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

async fn decode<T: for<'de> Deserialize<'de>>(resp: reqwest::Response, what: &str) -> Result<T> {
    let bytes = resp
        .bytes()
        .await
        .map_err(|e| SandboxError::Api(format!("{what}: reading the answer: {e}")))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| SandboxError::Api(format!("{what}: unexpected answer: {e}")))
}

/// `what: status: reason`, the reason taken from E2B's `{"message": ...}`
/// body when there is one, short, and never holding `secret`.
pub fn api_error(what: &str, status: StatusCode, body: &str, secret: &str) -> SandboxError {
    #[derive(Deserialize)]
    struct Body {
        message: Option<String>,
    }
    let reason = serde_json::from_str::<Body>(body)
        .ok()
        .and_then(|b| b.message)
        .unwrap_or_else(|| body.trim().to_owned());
    let mut reason: String = reason.chars().take(200).collect();
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        reason.push_str(" (check the E2B API key)");
    }
    SandboxError::Api(scrub(&format!("{what}: {status} {reason}"), secret))
}

/// `text` with every occurrence of `secret` masked.
pub fn scrub(text: &str, secret: &str) -> String {
    if secret.len() < 4 {
        return text.to_owned();
    }
    text.replace(secret, "***")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_the_reason_and_drop_the_key() {
        let e = api_error(
            "POST /sandboxes",
            StatusCode::UNAUTHORIZED,
            r#"{"code":401,"message":"Invalid API key e2b_secret123"}"#,
            "e2b_secret123",
        );
        let text = e.to_string();
        assert!(
            text.contains("401") && text.contains("Invalid API key"),
            "{text}"
        );
        assert!(!text.contains("e2b_secret123"), "{text}");
    }
}
