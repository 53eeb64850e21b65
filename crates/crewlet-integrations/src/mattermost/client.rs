//! [`MattermostClient`]: the REST API v4 calls Crewlet makes, as one
//! account (a seat's bot, or the operator's admin for provisioning).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::wire::{AccessToken, Bot, Channel, Post, PostList, Team, User};

/// How long one REST call may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What a Mattermost call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum MattermostError {
    /// The server answered with an error status; `id` is Mattermost's error
    /// id (`api.context.session_expired.app_error`, ...).
    #[error("mattermost answered {status} to {what}: {message} ({id})")]
    Status {
        what: String,
        status: u16,
        id: String,
        message: String,
    },
    /// No answer: connection refused, timeout, TLS.
    #[error("cannot reach mattermost for {what}: {reason}")]
    Unreachable { what: String, reason: String },
    /// An answer that does not read as the documented shape.
    #[error("mattermost answer to {what} does not read: {reason}")]
    Decode { what: String, reason: String },
    /// The configured URL is not an http(s) URL.
    #[error("mattermost url `{0}` is not an http(s) url")]
    BadUrl(String),
}

impl MattermostError {
    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            MattermostError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// 401/403: the credential, not the server, is the problem.
    pub fn is_auth(&self) -> bool {
        matches!(self.status(), Some(401 | 403))
    }

    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// A server or network problem (5xx, unreachable): "cannot tell", never
    /// a verdict on a credential.
    pub fn is_transient(&self) -> bool {
        match self {
            MattermostError::Unreachable { .. } => true,
            MattermostError::Status { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

/// One account's view of a Mattermost server.
#[derive(Clone)]
pub struct MattermostClient {
    http: reqwest::Client,
    /// `https://chat.example` (no trailing slash).
    base: String,
    token: String,
}

impl std::fmt::Debug for MattermostClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MattermostClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// The server's base URL without a trailing slash, checked to be http(s).
pub fn normalize_url(url: &str) -> Result<String, MattermostError> {
    let trimmed = url.trim().trim_end_matches('/');
    if !(trimmed.starts_with("http://") || trimmed.starts_with("https://"))
        || trimmed.len() <= "https://".len()
    {
        return Err(MattermostError::BadUrl(url.to_owned()));
    }
    Ok(trimmed.to_owned())
}

/// An HTTP client for [`MattermostClient::with_http`]: one pool shared by
/// every seat of a server.
pub fn http_client() -> Result<reqwest::Client, MattermostError> {
    crewlet_http::client_builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| MattermostError::Unreachable {
            what: "building the http client".into(),
            reason: e.to_string(),
        })
}

impl MattermostClient {
    pub fn new(url: &str, token: &str) -> Result<Self, MattermostError> {
        Ok(Self::with_http(http_client()?, &normalize_url(url)?, token))
    }

    /// Shares `http`'s connection pool (one per fleet, not one per seat).
    pub fn with_http(http: reqwest::Client, base: &str, token: &str) -> Self {
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        }
    }

    /// The same server and connection pool, as another account.
    pub fn with_token(&self, token: &str) -> Self {
        Self::with_http(self.http.clone(), &self.base, token)
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// `ws(s)://host/api/v4/websocket`.
    pub fn websocket_url(&self) -> String {
        let rest = self
            .base
            .strip_prefix("https://")
            .map(|r| format!("wss://{r}"))
            .or_else(|| {
                self.base
                    .strip_prefix("http://")
                    .map(|r| format!("ws://{r}"))
            })
            .unwrap_or_else(|| self.base.clone());
        format!("{rest}/api/v4/websocket")
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<T, MattermostError> {
        let value = self.call_value(method, path, body, true).await?;
        serde_json::from_value(value).map_err(|e| MattermostError::Decode {
            what: path.to_owned(),
            reason: e.to_string(),
        })
    }

    async fn call_value(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        auth: bool,
    ) -> Result<Value, MattermostError> {
        let what = format!("{method} {path}");
        let mut req = self
            .http
            .request(method, format!("{}/api/v4{path}", self.base));
        if auth {
            req = req.bearer_auth(&self.token);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| MattermostError::Unreachable {
            what: what.clone(),
            reason: e.without_url().to_string(),
        })?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| MattermostError::Unreachable {
                what: what.clone(),
                reason: e.without_url().to_string(),
            })?;
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        if !status.is_success() {
            let field = |k: &str| {
                value
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let message = match field("message") {
                m if m.is_empty() => status.canonical_reason().unwrap_or("error").to_owned(),
                m => m,
            };
            return Err(MattermostError::Status {
                what,
                status: status.as_u16(),
                id: field("id"),
                message,
            });
        }
        Ok(value)
    }

    fn body<B: Serialize>(b: &B) -> Option<Value> {
        serde_json::to_value(b).ok()
    }

    // --- the server ------------------------------------------------------

    /// `GET /system/ping` without credentials: `Ok(version)` when it answers.
    pub async fn ping(&self) -> Result<String, MattermostError> {
        let what = "GET /system/ping".to_owned();
        let resp = self
            .http
            .get(format!("{}/api/v4/system/ping", self.base))
            .send()
            .await
            .map_err(|e| MattermostError::Unreachable {
                what: what.clone(),
                reason: e.without_url().to_string(),
            })?;
        if resp.status() != StatusCode::OK {
            return Err(MattermostError::Status {
                what,
                status: resp.status().as_u16(),
                id: String::new(),
                message: "ping failed".into(),
            });
        }
        Ok(resp
            .headers()
            .get("x-version-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("unknown")
            .to_owned())
    }

    /// `GET /config/client?format=old` (no credentials): string values.
    pub async fn client_config(&self) -> Result<Value, MattermostError> {
        self.call_value(Method::GET, "/config/client?format=old", None, false)
            .await
    }

    /// `GET /config` (admin).
    pub async fn config(&self) -> Result<Value, MattermostError> {
        self.call_value(Method::GET, "/config", None, true).await
    }

    // --- users, teams, channels -------------------------------------------

    pub async fn me(&self) -> Result<User, MattermostError> {
        self.call(Method::GET, "/users/me", None).await
    }

    pub async fn user(&self, id: &str) -> Result<User, MattermostError> {
        self.call(Method::GET, &format!("/users/{id}"), None).await
    }

    pub async fn user_by_username(&self, username: &str) -> Result<User, MattermostError> {
        let name = username.trim_start_matches('@');
        self.call(Method::GET, &format!("/users/username/{name}"), None)
            .await
    }

    pub async fn team_by_name(&self, name: &str) -> Result<Team, MattermostError> {
        self.call(Method::GET, &format!("/teams/name/{name}"), None)
            .await
    }

    pub async fn is_team_member(
        &self,
        team_id: &str,
        user_id: &str,
    ) -> Result<bool, MattermostError> {
        found(
            self.call_value(
                Method::GET,
                &format!("/teams/{team_id}/members/{user_id}"),
                None,
                true,
            )
            .await,
        )
    }

    pub async fn add_team_member(
        &self,
        team_id: &str,
        user_id: &str,
    ) -> Result<(), MattermostError> {
        self.call_value(
            Method::POST,
            &format!("/teams/{team_id}/members"),
            Some(json!({"team_id": team_id, "user_id": user_id})),
            true,
        )
        .await
        .map(drop)
    }

    pub async fn channel_by_name(
        &self,
        team_id: &str,
        name: &str,
    ) -> Result<Channel, MattermostError> {
        self.call(
            Method::GET,
            &format!("/teams/{team_id}/channels/name/{name}"),
            None,
        )
        .await
    }

    pub async fn channel(&self, id: &str) -> Result<Channel, MattermostError> {
        self.call(Method::GET, &format!("/channels/{id}"), None)
            .await
    }

    /// The channels `user_id` is in on the team, direct messages included.
    pub async fn channels_for_user(
        &self,
        user_id: &str,
        team_id: &str,
    ) -> Result<Vec<Channel>, MattermostError> {
        self.call(
            Method::GET,
            &format!("/users/{user_id}/teams/{team_id}/channels"),
            None,
        )
        .await
    }

    pub async fn is_channel_member(
        &self,
        channel_id: &str,
        user_id: &str,
    ) -> Result<bool, MattermostError> {
        found(
            self.call_value(
                Method::GET,
                &format!("/channels/{channel_id}/members/{user_id}"),
                None,
                true,
            )
            .await,
        )
    }

    pub async fn add_channel_member(
        &self,
        channel_id: &str,
        user_id: &str,
    ) -> Result<(), MattermostError> {
        self.call_value(
            Method::POST,
            &format!("/channels/{channel_id}/members"),
            Some(json!({"user_id": user_id})),
            true,
        )
        .await
        .map(drop)
    }

    /// The direct channel between two users (created on first use).
    pub async fn direct_channel(&self, a: &str, b: &str) -> Result<Channel, MattermostError> {
        self.call(Method::POST, "/channels/direct", Some(json!([a, b])))
            .await
    }

    // --- posts -------------------------------------------------------------

    /// Posts of a channel changed after `since_ms` (Mattermost's `since` is
    /// update-based), oldest first.
    pub async fn posts_since(
        &self,
        channel_id: &str,
        since_ms: i64,
    ) -> Result<Vec<Post>, MattermostError> {
        let list: PostList = self
            .call(
                Method::GET,
                &format!("/channels/{channel_id}/posts?since={since_ms}"),
                None,
            )
            .await?;
        Ok(list.oldest_first())
    }

    pub async fn post(&self, id: &str) -> Result<Post, MattermostError> {
        self.call(Method::GET, &format!("/posts/{id}"), None).await
    }

    /// Posts `message` in a channel, in the thread of `root_id` when given.
    pub async fn create_post(
        &self,
        channel_id: &str,
        message: &str,
        root_id: Option<&str>,
    ) -> Result<Post, MattermostError> {
        let mut body = json!({"channel_id": channel_id, "message": message});
        if let Some(root) = root_id.filter(|r| !r.is_empty()) {
            body["root_id"] = json!(root);
        }
        self.call(Method::POST, "/posts", Some(body)).await
    }

    pub async fn react(
        &self,
        user_id: &str,
        post_id: &str,
        emoji: &str,
    ) -> Result<(), MattermostError> {
        self.call_value(
            Method::POST,
            "/reactions",
            Some(json!({"user_id": user_id, "post_id": post_id, "emoji_name": emoji.trim_matches(':')})),
            true,
        )
        .await
        .map(drop)
    }

    /// Raises the "is typing" line in a channel (or a thread).
    pub async fn typing(
        &self,
        user_id: &str,
        channel_id: &str,
        parent_id: Option<&str>,
    ) -> Result<(), MattermostError> {
        self.call_value(
            Method::POST,
            &format!("/users/{user_id}/typing"),
            Some(json!({"channel_id": channel_id, "parent_id": parent_id.unwrap_or_default()})),
            true,
        )
        .await
        .map(drop)
    }

    // --- bots and tokens (admin) -------------------------------------------

    pub async fn bots(&self) -> Result<Vec<Bot>, MattermostError> {
        self.call(
            Method::GET,
            "/bots?include_deleted=true&page=0&per_page=200",
            None,
        )
        .await
    }

    pub async fn create_bot(
        &self,
        username: &str,
        display_name: &str,
        description: &str,
    ) -> Result<Bot, MattermostError> {
        #[derive(Serialize)]
        struct New<'a> {
            username: &'a str,
            display_name: &'a str,
            description: &'a str,
        }
        self.call(
            Method::POST,
            "/bots",
            Self::body(&New {
                username,
                display_name,
                description,
            }),
        )
        .await
    }

    pub async fn patch_bot(
        &self,
        user_id: &str,
        display_name: &str,
    ) -> Result<Bot, MattermostError> {
        self.call(
            Method::PUT,
            &format!("/bots/{user_id}"),
            Some(json!({"display_name": display_name})),
        )
        .await
    }

    pub async fn enable_bot(&self, user_id: &str) -> Result<Bot, MattermostError> {
        self.call(Method::POST, &format!("/bots/{user_id}/enable"), None)
            .await
    }

    pub async fn disable_bot(&self, user_id: &str) -> Result<Bot, MattermostError> {
        self.call(Method::POST, &format!("/bots/{user_id}/disable"), None)
            .await
    }

    pub async fn tokens(&self, user_id: &str) -> Result<Vec<AccessToken>, MattermostError> {
        self.call(
            Method::GET,
            &format!("/users/{user_id}/tokens?page=0&per_page=100"),
            None,
        )
        .await
    }

    pub async fn mint_token(
        &self,
        user_id: &str,
        description: &str,
    ) -> Result<AccessToken, MattermostError> {
        self.call(
            Method::POST,
            &format!("/users/{user_id}/tokens"),
            Some(json!({"description": description})),
        )
        .await
    }

    pub async fn revoke_token(&self, token_id: &str) -> Result<(), MattermostError> {
        self.call_value(
            Method::POST,
            "/users/tokens/revoke",
            Some(json!({"token_id": token_id})),
            true,
        )
        .await
        .map(drop)
    }
}

/// A membership lookup: found, not found (404), or an error.
fn found(r: Result<Value, MattermostError>) -> Result<bool, MattermostError> {
    match r {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_normalized_and_the_socket_follows_the_scheme() {
        let c = MattermostClient::new("https://chat.example/", "t").unwrap();
        assert_eq!(c.base_url(), "https://chat.example");
        assert_eq!(c.websocket_url(), "wss://chat.example/api/v4/websocket");
        let c = MattermostClient::new("http://127.0.0.1:8065", "t").unwrap();
        assert_eq!(c.websocket_url(), "ws://127.0.0.1:8065/api/v4/websocket");
        assert!(matches!(
            MattermostClient::new("chat.example", "t"),
            Err(MattermostError::BadUrl(_))
        ));
        assert!(!format!("{c:?}").contains('t') || !format!("{c:?}").contains("token"));
    }

    #[test]
    fn errors_say_whether_the_credential_or_the_server_is_at_fault() {
        let status = |s| MattermostError::Status {
            what: "x".into(),
            status: s,
            id: String::new(),
            message: String::new(),
        };
        assert!(status(401).is_auth() && !status(401).is_transient());
        assert!(status(503).is_transient() && !status(503).is_auth());
        assert!(status(404).is_not_found());
        let down = MattermostError::Unreachable {
            what: "x".into(),
            reason: "refused".into(),
        };
        assert!(down.is_transient());
    }
}
