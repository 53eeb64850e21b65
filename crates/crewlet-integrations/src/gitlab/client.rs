//! [`GitlabClient`]: the REST API v4 calls provisioning makes, as one
//! account (the operator's admin, or a seat checking its own token).
//!
//! Authentication is the `PRIVATE-TOKEN` header. List endpoints are read
//! page by page (`page`, `per_page=100`), following `X-Next-Page`.

use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// How long one REST call may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Page size asked for on list endpoints (GitLab's maximum).
const PER_PAGE: usize = 100;
/// A list longer than this many pages is refused rather than read forever.
const MAX_PAGES: usize = 500;

/// What a GitLab call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum GitlabError {
    /// The server answered with an error status.
    #[error("gitlab answered {status} to {what}: {message}")]
    Status {
        what: String,
        status: u16,
        message: String,
    },
    /// No answer: connection refused, timeout, TLS.
    #[error("cannot reach gitlab for {what}: {reason}")]
    Unreachable { what: String, reason: String },
    /// An answer that does not read as the documented shape.
    #[error("gitlab answer to {what} does not read: {reason}")]
    Decode { what: String, reason: String },
    /// The configured URL is not an http(s) URL.
    #[error("gitlab url `{0}` is not an http(s) url")]
    BadUrl(String),
}

impl GitlabError {
    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            GitlabError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// 401/403: the credential, not the server, is the problem.
    pub fn is_auth(&self) -> bool {
        matches!(self.status(), Some(401 | 403))
    }
}

/// A group or a project: both have members and hooks under the same paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    Group,
    Project,
}

impl Space {
    fn path(self) -> &'static str {
        match self {
            Space::Group => "groups",
            Space::Project => "projects",
        }
    }

    pub fn noun(self) -> &'static str {
        match self {
            Space::Group => "group",
            Space::Project => "project",
        }
    }
}

/// A user as `/user` and `/users` show it (admin-only fields optional).
#[derive(Debug, Clone, Deserialize)]
pub struct User {
    pub id: u64,
    pub username: String,
    #[serde(default)]
    pub name: String,
    /// `active`, `blocked`, `deactivated`, ...
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub is_admin: Option<bool>,
}

/// A group (`full_path`) or project (`path_with_namespace`).
#[derive(Debug, Clone, Deserialize)]
pub struct Namespace {
    pub id: u64,
    #[serde(default, alias = "path_with_namespace")]
    pub full_path: String,
}

/// A direct member of a group or project.
#[derive(Debug, Clone, Deserialize)]
pub struct Member {
    pub id: u64,
    pub access_level: u32,
}

/// A group or project webhook (GitLab never shows its secret token).
#[derive(Debug, Clone, Deserialize)]
pub struct Hook {
    pub id: u64,
    pub url: String,
    #[serde(default)]
    pub issues_events: bool,
    #[serde(default)]
    pub confidential_issues_events: bool,
    #[serde(default)]
    pub note_events: bool,
    #[serde(default)]
    pub confidential_note_events: bool,
    #[serde(default)]
    pub merge_requests_events: bool,
}

impl Hook {
    /// The events Crewlet routes: issues, comments, merge requests.
    pub const EVENTS: [&'static str; 5] = [
        "issues_events",
        "confidential_issues_events",
        "note_events",
        "confidential_note_events",
        "merge_requests_events",
    ];

    /// The events among [`Hook::EVENTS`] this hook does not send.
    pub fn missing_events(&self) -> Vec<&'static str> {
        let on = [
            self.issues_events,
            self.confidential_issues_events,
            self.note_events,
            self.confidential_note_events,
            self.merge_requests_events,
        ];
        Self::EVENTS
            .iter()
            .zip(on)
            .filter(|(_, on)| !on)
            .map(|(name, _)| *name)
            .collect()
    }
}

/// A personal access token just minted: its value is shown this once.
#[derive(Clone, Deserialize)]
pub struct NewToken {
    pub id: u64,
    #[serde(default)]
    pub token: String,
}

impl std::fmt::Debug for NewToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewToken")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// One account's view of a GitLab instance.
#[derive(Clone)]
pub struct GitlabClient {
    http: reqwest::Client,
    /// `https://gitlab.example` (no trailing slash, no `/api/v4`).
    base: String,
    token: String,
}

impl std::fmt::Debug for GitlabClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitlabClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// The instance URL without a trailing slash (or `/api/v4`), checked to be
/// http(s).
pub fn normalize_url(url: &str) -> Result<String, GitlabError> {
    let trimmed = url.trim().trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/api/v4").unwrap_or(trimmed);
    let parsed = reqwest::Url::parse(trimmed).map_err(|_| GitlabError::BadUrl(url.to_owned()))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(GitlabError::BadUrl(url.to_owned()));
    }
    Ok(trimmed.to_owned())
}

/// A path or id as one URL path segment (`acme/app` is `acme%2Fapp`).
pub fn encode_segment(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl GitlabClient {
    pub fn new(url: &str, token: &str) -> Result<Self, GitlabError> {
        let http = crewlet_http::client_builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| GitlabError::Unreachable {
                what: "building the http client".into(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            http,
            base: normalize_url(url)?,
            token: token.trim().to_owned(),
        })
    }

    /// The same instance and connection pool, as another account.
    pub fn with_token(&self, token: &str) -> Self {
        Self {
            http: self.http.clone(),
            base: self.base.clone(),
            token: token.trim().to_owned(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// One call; `Ok((value, next page))`.
    async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Value>,
    ) -> Result<(Value, Option<usize>), GitlabError> {
        let what = format!("{method} {path}");
        let mut req = self
            .http
            .request(method, format!("{}/api/v4{path}", self.base))
            .header("PRIVATE-TOKEN", &self.token);
        if !query.is_empty() {
            req = req.query(query);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let unreachable = |e: reqwest::Error| GitlabError::Unreachable {
            what: what.clone(),
            reason: e.without_url().to_string(),
        };
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status();
        let next = resp
            .headers()
            .get("x-next-page")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<usize>().ok());
        let bytes = resp.bytes().await.map_err(unreachable)?;
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        if !status.is_success() {
            let message = match value.get("message").or_else(|| value.get("error")) {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => status.canonical_reason().unwrap_or("error").to_owned(),
            };
            return Err(GitlabError::Status {
                what,
                status: status.as_u16(),
                message,
            });
        }
        Ok((value, next))
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<T, GitlabError> {
        let (value, _) = self.send(method, path, &[], body).await?;
        decode(path, value)
    }

    /// Every page of a list endpoint.
    async fn list<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Vec<T>, GitlabError> {
        let mut out = Vec::new();
        let mut page = 1;
        for _ in 0..MAX_PAGES {
            let mut q = query.to_vec();
            q.push(("per_page", PER_PAGE.to_string()));
            q.push(("page", page.to_string()));
            let (value, next) = self.send(Method::GET, path, &q, None).await?;
            let batch: Vec<T> = decode(path, value)?;
            let len = batch.len();
            out.extend(batch);
            page = match next {
                Some(n) if n > page => n,
                // No `X-Next-Page` (some proxies drop it): a full page may
                // have more after it.
                None if len >= PER_PAGE => page + 1,
                _ => return Ok(out),
            };
        }
        Err(GitlabError::Decode {
            what: format!("GET {path}"),
            reason: format!("more than {MAX_PAGES} pages"),
        })
    }

    // --- users ----------------------------------------------------------

    /// `GET /user`: whom this client's token authenticates as.
    pub async fn me(&self) -> Result<User, GitlabError> {
        self.call(Method::GET, "/user", None).await
    }

    /// `GET /users?username=`: the account with that username, if any.
    pub async fn user_by_username(&self, username: &str) -> Result<Option<User>, GitlabError> {
        let users: Vec<User> = self
            .list("/users", &[("username", username.to_owned())])
            .await?;
        Ok(users
            .into_iter()
            .find(|u| u.username.eq_ignore_ascii_case(username)))
    }

    /// `POST /users` (admin): a confirmed account with a random password
    /// nobody knows; it signs in only with the tokens minted for it.
    pub async fn create_user(
        &self,
        username: &str,
        name: &str,
        email: &str,
    ) -> Result<User, GitlabError> {
        let body = json!({
            "username": username,
            "name": name,
            "email": email,
            "skip_confirmation": true,
            "force_random_password": true,
        });
        self.call(Method::POST, "/users", Some(body)).await
    }

    /// `POST /users/:id/personal_access_tokens` (admin).
    pub async fn mint_token(
        &self,
        user_id: u64,
        name: &str,
        scopes: &[String],
        expires_at: &str,
    ) -> Result<NewToken, GitlabError> {
        let body = json!({"name": name, "scopes": scopes, "expires_at": expires_at});
        self.call(
            Method::POST,
            &format!("/users/{user_id}/personal_access_tokens"),
            Some(body),
        )
        .await
    }

    /// `DELETE /personal_access_tokens/:id` (admin, or the owner).
    pub async fn revoke_token(&self, token_id: u64) -> Result<(), GitlabError> {
        self.send(
            Method::DELETE,
            &format!("/personal_access_tokens/{token_id}"),
            &[],
            None,
        )
        .await
        .map(drop)
    }

    // --- groups and projects ---------------------------------------------

    /// `GET /groups/:path` or `GET /projects/:path`.
    pub async fn namespace(&self, space: Space, path: &str) -> Result<Namespace, GitlabError> {
        self.call(
            Method::GET,
            &format!("/{}/{}", space.path(), encode_segment(path)),
            None,
        )
        .await
    }

    /// `GET /:space/:id/members/:user_id`: a direct membership, if any.
    pub async fn member(
        &self,
        space: Space,
        id: u64,
        user_id: u64,
    ) -> Result<Option<Member>, GitlabError> {
        let path = format!("/{}/{id}/members/{user_id}", space.path());
        match self.call(Method::GET, &path, None).await {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST /:space/:id/members`.
    pub async fn add_member(
        &self,
        space: Space,
        id: u64,
        user_id: u64,
        level: u32,
    ) -> Result<Member, GitlabError> {
        let body = json!({"user_id": user_id, "access_level": level});
        self.call(
            Method::POST,
            &format!("/{}/{id}/members", space.path()),
            Some(body),
        )
        .await
    }

    /// `PUT /:space/:id/members/:user_id`.
    pub async fn set_member_level(
        &self,
        space: Space,
        id: u64,
        user_id: u64,
        level: u32,
    ) -> Result<Member, GitlabError> {
        self.call(
            Method::PUT,
            &format!("/{}/{id}/members/{user_id}", space.path()),
            Some(json!({"access_level": level})),
        )
        .await
    }

    /// `GET /:space/:id/hooks`, every page.
    pub async fn hooks(&self, space: Space, id: u64) -> Result<Vec<Hook>, GitlabError> {
        self.list(&format!("/{}/{id}/hooks", space.path()), &[])
            .await
    }

    /// `POST /:space/:id/hooks`, or `PUT .../hooks/:hook_id` when `existing`:
    /// `url` with `token`, sending [`Hook::EVENTS`] and no pushes.
    pub async fn put_hook(
        &self,
        space: Space,
        id: u64,
        existing: Option<u64>,
        url: &str,
        token: &str,
    ) -> Result<Hook, GitlabError> {
        let mut body = json!({"url": url, "token": token, "enable_ssl_verification": true});
        for event in Hook::EVENTS {
            body[event] = Value::Bool(true);
        }
        let (method, path) = match existing {
            None => (Method::POST, format!("/{}/{id}/hooks", space.path())),
            Some(hook) => (Method::PUT, format!("/{}/{id}/hooks/{hook}", space.path())),
        };
        if existing.is_none() {
            body["push_events"] = Value::Bool(false);
        }
        self.call(method, &path, Some(body)).await
    }
}

fn decode<T: DeserializeOwned>(path: &str, value: Value) -> Result<T, GitlabError> {
    serde_json::from_value(value).map_err(|e| GitlabError::Decode {
        what: path.to_owned(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_trailing_slashes_and_the_api_suffix() {
        assert_eq!(
            normalize_url("https://gitlab.example/").ok().as_deref(),
            Some("https://gitlab.example")
        );
        assert_eq!(
            normalize_url(" http://127.0.0.1:9/api/v4/ ")
                .ok()
                .as_deref(),
            Some("http://127.0.0.1:9")
        );
        assert!(normalize_url("gitlab.example").is_err());
        assert!(normalize_url("ftp://gitlab.example").is_err());
    }

    #[test]
    fn segments_encode_slashes() {
        assert_eq!(encode_segment("acme/app"), "acme%2Fapp");
        assert_eq!(encode_segment("a.b-c_d~e"), "a.b-c_d~e");
        assert_eq!(encode_segment("x y"), "x%20y");
    }

    #[test]
    fn a_hook_lists_the_events_it_lacks() {
        let hook: Hook = serde_json::from_value(json!({
            "id": 1, "url": "u", "issues_events": true, "note_events": true
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            hook.missing_events(),
            [
                "confidential_issues_events",
                "confidential_note_events",
                "merge_requests_events"
            ]
        );
    }

    #[test]
    fn debug_shows_no_token() {
        let c = GitlabClient::new("https://g.example", "glpat-sekrit")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!format!("{c:?}").contains("sekrit"));
        let t = NewToken {
            id: 3,
            token: "glpat-sekrit".into(),
        };
        assert!(!format!("{t:?}").contains("sekrit"));
    }
}
