//! [`SlackClient`]: the Slack Web API methods Crewlet calls. Every method is
//! a form-encoded `POST {base}/{method}`; Slack answers 200 with
//! `{"ok": false, "error": "..."}` when it refuses, which reads as
//! [`SlackError::Api`], and 429 (with `Retry-After`) when a method's rate
//! tier is spent, which reads as [`SlackError::RateLimited`]. The client
//! never retries: the caller decides whether waiting is worth it.
//!
//! Tokens are passed per call (a seat's bot token, the app configuration
//! token, none for the OAuth exchange), never stored, and never part of
//! an error or a `Debug` output.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

/// How long one call may take (manifest calls are the slow ones).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What a Slack call can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlackError {
    /// Slack answered `ok: false`; `messages` are the per-field details
    /// of a rejected manifest.
    #[error("{method}: {error}{}", details(messages))]
    Api {
        method: String,
        error: String,
        messages: Vec<String>,
    },
    /// 429: the method's rate tier is spent for now.
    #[error("{method}: rate limited (retry after {}s)", retry_after.map_or(0, |d| d.as_secs()))]
    RateLimited {
        method: String,
        retry_after: Option<Duration>,
    },
    /// Another HTTP status.
    #[error("{method}: HTTP {status}")]
    Status { method: String, status: u16 },
    /// No answer: connection refused, timeout, TLS.
    #[error("{method}: cannot reach Slack: {reason}")]
    Unreachable { method: String, reason: String },
    /// An answer that is not the documented JSON.
    #[error("{method}: unreadable answer: {reason}")]
    Decode { method: String, reason: String },
}

fn details(messages: &[String]) -> String {
    if messages.is_empty() {
        String::new()
    } else {
        format!(" ({})", messages.join("; "))
    }
}

impl SlackError {
    /// Slack's error code of an `ok: false` answer.
    pub fn code(&self) -> Option<&str> {
        match self {
            SlackError::Api { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The token itself is the problem: every later call would fail alike.
    pub fn is_token_error(&self) -> bool {
        matches!(
            self.code(),
            Some("token_expired" | "invalid_auth" | "not_authed" | "token_revoked")
        )
    }
}

/// What `apps.manifest.create` hands out, once: the app and its secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct AppCredentials {
    pub app_id: String,
    pub client_id: String,
    pub client_secret: String,
    pub signing_secret: String,
    /// Slack's own install link for the app (informational).
    pub oauth_authorize_url: String,
}

impl std::fmt::Debug for AppCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppCredentials")
            .field("app_id", &self.app_id)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// What `oauth.v2.access` mints for a workspace install.
#[derive(Clone, PartialEq, Eq)]
pub struct Install {
    /// The `xoxb-` bot token.
    pub bot_token: String,
    pub bot_user_id: String,
    pub app_id: String,
    pub team_id: String,
}

impl std::fmt::Debug for Install {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Install")
            .field("bot_user_id", &self.bot_user_id)
            .field("app_id", &self.app_id)
            .field("team_id", &self.team_id)
            .finish_non_exhaustive()
    }
}

/// A rotated app configuration token pair.
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigTokens {
    pub token: String,
    pub refresh_token: String,
    /// Unix seconds when `token` expires; 0 when Slack did not say.
    pub expires_at: i64,
}

impl std::fmt::Debug for ConfigTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigTokens")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// Who a token is (`auth.test`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user_id: String,
    pub team_id: String,
    pub bot_id: Option<String>,
}

/// The Slack Web API at one base URL.
#[derive(Clone)]
pub struct SlackClient {
    http: reqwest::Client,
    base: String,
}

impl std::fmt::Debug for SlackClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl SlackClient {
    /// A client for `base` (`https://slack.com/api`, or a test server).
    pub fn new(base: &str) -> Result<SlackClient, SlackError> {
        let http = crewlet_http::client_builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| SlackError::Unreachable {
                method: "(client)".into(),
                reason: e.to_string(),
            })?;
        Ok(Self::with_http(http, base))
    }

    pub fn with_http(http: reqwest::Client, base: &str) -> SlackClient {
        SlackClient {
            http,
            base: base.trim().trim_end_matches('/').to_owned(),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// POSTs `form` to `method` with `token` as the bearer; the answer's
    /// JSON when Slack says `ok: true`.
    pub async fn call(
        &self,
        method: &str,
        token: Option<&str>,
        form: &[(&str, &str)],
    ) -> Result<Value, SlackError> {
        let mut request = self.http.post(format!("{}/{method}", self.base)).form(form);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| SlackError::Unreachable {
            method: method.to_owned(),
            reason: chain(e),
        })?;
        let status = response.status();
        if status == StatusCode::TOO_MANY_REQUESTS {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            return Err(SlackError::RateLimited {
                method: method.to_owned(),
                retry_after,
            });
        }
        if !status.is_success() {
            return Err(SlackError::Status {
                method: method.to_owned(),
                status: status.as_u16(),
            });
        }
        let body: Value = response.json().await.map_err(|e| SlackError::Decode {
            method: method.to_owned(),
            reason: chain(e),
        })?;
        if body.get("ok").and_then(Value::as_bool) == Some(true) {
            return Ok(body);
        }
        Err(SlackError::Api {
            method: method.to_owned(),
            error: text(&body, "error").unwrap_or_else(|| "unknown_error".into()),
            messages: manifest_messages(&body),
        })
    }

    /// Shows `status` under the thread's composer; an empty one clears it.
    pub async fn set_status(
        &self,
        bot_token: &str,
        channel_id: &str,
        thread_ts: &str,
        status: &str,
    ) -> Result<(), SlackError> {
        self.call(
            "assistant.threads.setStatus",
            Some(bot_token),
            &[
                ("channel_id", channel_id),
                ("thread_ts", thread_ts),
                ("status", status),
            ],
        )
        .await
        .map(drop)
    }

    /// Posts `text` (in `thread_ts` when given); the new message's `ts`.
    pub async fn post_message(
        &self,
        bot_token: &str,
        channel: &str,
        message: &str,
        thread_ts: Option<&str>,
    ) -> Result<String, SlackError> {
        let mut form = vec![("channel", channel), ("text", message)];
        if let Some(ts) = thread_ts {
            form.push(("thread_ts", ts));
        }
        let body = self
            .call("chat.postMessage", Some(bot_token), &form)
            .await?;
        Ok(text(&body, "ts").unwrap_or_default())
    }

    /// Checks a manifest (against the existing app `app_id` when given).
    pub async fn manifest_validate(
        &self,
        config_token: &str,
        manifest: &Value,
        app_id: Option<&str>,
    ) -> Result<(), SlackError> {
        let manifest = manifest.to_string();
        let mut form = vec![("manifest", manifest.as_str())];
        if let Some(id) = app_id {
            form.push(("app_id", id));
        }
        self.call("apps.manifest.validate", Some(config_token), &form)
            .await
            .map(drop)
    }

    /// Creates an app; the only answer that carries its secrets.
    pub async fn manifest_create(
        &self,
        config_token: &str,
        manifest: &Value,
    ) -> Result<AppCredentials, SlackError> {
        let method = "apps.manifest.create";
        let manifest = manifest.to_string();
        let body = self
            .call(
                method,
                Some(config_token),
                &[("manifest", manifest.as_str())],
            )
            .await?;
        let creds = body.get("credentials").cloned().unwrap_or(Value::Null);
        let field = |v: &Value, key: &str| text(v, key).unwrap_or_default();
        let out = AppCredentials {
            app_id: field(&body, "app_id"),
            client_id: field(&creds, "client_id"),
            client_secret: field(&creds, "client_secret"),
            signing_secret: field(&creds, "signing_secret"),
            oauth_authorize_url: field(&body, "oauth_authorize_url"),
        };
        if out.app_id.is_empty() {
            return Err(SlackError::Decode {
                method: method.into(),
                reason: "no app_id".into(),
            });
        }
        Ok(out)
    }

    /// Replaces the manifest of the app `app_id`.
    pub async fn manifest_update(
        &self,
        config_token: &str,
        app_id: &str,
        manifest: &Value,
    ) -> Result<(), SlackError> {
        let manifest = manifest.to_string();
        self.call(
            "apps.manifest.update",
            Some(config_token),
            &[("app_id", app_id), ("manifest", manifest.as_str())],
        )
        .await
        .map(drop)
    }

    /// Exchanges an install's temporary `code` for the bot token.
    pub async fn oauth_access(
        &self,
        client_id: &str,
        client_secret: &str,
        code: &str,
        redirect_uri: &str,
    ) -> Result<Install, SlackError> {
        let method = "oauth.v2.access";
        let body = self
            .call(
                method,
                None,
                &[
                    ("client_id", client_id),
                    ("client_secret", client_secret),
                    ("code", code),
                    ("redirect_uri", redirect_uri),
                ],
            )
            .await?;
        let team = body.get("team").cloned().unwrap_or(Value::Null);
        let install = Install {
            bot_token: text(&body, "access_token").unwrap_or_default(),
            bot_user_id: text(&body, "bot_user_id").unwrap_or_default(),
            app_id: text(&body, "app_id").unwrap_or_default(),
            team_id: text(&team, "id").unwrap_or_default(),
        };
        if install.bot_token.is_empty() {
            return Err(SlackError::Decode {
                method: method.into(),
                reason: "no access_token".into(),
            });
        }
        Ok(install)
    }

    /// Trades a configuration refresh token for a new pair (the old
    /// refresh token stops working: persist the new one at once).
    pub async fn rotate_config_token(
        &self,
        refresh_token: &str,
    ) -> Result<ConfigTokens, SlackError> {
        let method = "tooling.tokens.rotate";
        let body = self
            .call(method, None, &[("refresh_token", refresh_token)])
            .await?;
        let tokens = ConfigTokens {
            token: text(&body, "token").unwrap_or_default(),
            refresh_token: text(&body, "refresh_token").unwrap_or_default(),
            expires_at: body.get("exp").and_then(Value::as_i64).unwrap_or(0),
        };
        if tokens.token.is_empty() || tokens.refresh_token.is_empty() {
            return Err(SlackError::Decode {
                method: method.into(),
                reason: "no token pair".into(),
            });
        }
        Ok(tokens)
    }

    /// Who `token` belongs to.
    pub async fn auth_test(&self, token: &str) -> Result<Identity, SlackError> {
        let body = self.call("auth.test", Some(token), &[]).await?;
        Ok(Identity {
            user_id: text(&body, "user_id").unwrap_or_default(),
            team_id: text(&body, "team_id").unwrap_or_default(),
            bot_id: text(&body, "bot_id"),
        })
    }
}

/// A reqwest error with its causes (connection refused, timeout, ...),
/// without the URL.
fn chain(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut out = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// `errors: [{message, pointer}]` of a rejected manifest, flattened.
fn manifest_messages(body: &Value) -> Vec<String> {
    body.get("errors")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| {
                    let message = text(item, "message")?;
                    Some(match text(item, "pointer") {
                        Some(p) => format!("{message} at {p}"),
                        None => message,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}
