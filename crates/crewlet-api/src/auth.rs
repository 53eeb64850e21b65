//! Bearer tokens (Tier A `api.auth.tokens`). Presented tokens are compared
//! with every configured token in constant time: both sides are hashed with
//! SHA-256 and compared with `subtle`, and the loop never exits early, so
//! neither the position of a mismatch nor the length of a token leaks.
//!
//! Each token carries scopes, which nest: `read` (every read, metadata
//! only), `read:content` (the reads with their content: prompts, responses,
//! memory, task text; see [`crate::content`]), `operate` (writes that run
//! work: tasks, budgets; includes `read:content`), `admin` (the company
//! configuration, which can name programs, variables and hosts within Tier
//! A's `security` block; includes `operate`). A route says which it needs
//! through its extractor ([`ReadAccess`], [`TokenAccess`] for `operate`,
//! [`AdminAccess`]); a valid token without it answers 403 naming the scope,
//! no token where one is needed 401 naming it too. Anonymous callers read
//! what the listener allows ([`AnonymousAccess`]): metadata by default on
//! loopback, nothing elsewhere.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use crewlet_config::{AnonymousAccess, ApiAuth, Scope};
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

use crate::error::HttpError;
use crate::state::ApiState;

/// One configured token: its id, digest and scopes.
struct Entry {
    id: String,
    digest: [u8; 32],
    scopes: Vec<Scope>,
}

/// The configured tokens, as digests.
pub(crate) struct Tokens {
    entries: Vec<Entry>,
    anonymous: AnonymousAccess,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field(
                "ids",
                &self
                    .entries
                    .iter()
                    .map(|e| (&e.id, &e.scopes))
                    .collect::<Vec<_>>(),
            )
            .field("anonymous", &self.anonymous)
            .finish()
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl Tokens {
    /// The tokens of `auth`, on a listener whose anonymous callers may
    /// read `anonymous`.
    pub fn new(auth: &ApiAuth, anonymous: AnonymousAccess) -> Self {
        Self {
            entries: auth
                .tokens
                .iter()
                .filter(|t| !t.token.trim().is_empty())
                .map(|t| Entry {
                    id: t.id.clone(),
                    digest: digest(t.token.as_bytes()),
                    scopes: Scope::ALL.into_iter().filter(|s| t.grants(*s)).collect(),
                })
                .collect(),
            anonymous,
        }
    }

    /// What anonymous callers may read.
    pub fn anonymous(&self) -> AnonymousAccess {
        self.anonymous
    }

    /// Warns once per token that has no `scopes` (it keeps every power).
    pub fn warn_unscoped(auth: &ApiAuth) {
        for (i, t) in auth.tokens.iter().enumerate() {
            if t.scopes.is_none() {
                tracing::warn!(
                    token_id = %t.id,
                    "api token `{}` has no scopes (api.auth.tokens[{i}].scopes): it keeps every scope (read, read:content, operate, admin) for compatibility; this is deprecated, list the scopes it needs",
                    t.id
                );
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The id of the token equal to `presented`, compared in constant time
    /// with every configured token.
    #[cfg(test)]
    pub fn verify(&self, presented: &str) -> Option<&str> {
        self.find(presented).map(|e| e.id.as_str())
    }

    fn find(&self, presented: &str) -> Option<&Entry> {
        let given = digest(presented.as_bytes());
        let mut found: Option<&Entry> = None;
        let mut any = Choice::from(0);
        for entry in &self.entries {
            let eq = given.ct_eq(&entry.digest);
            if bool::from(eq & !any) {
                found = Some(entry);
            }
            any |= eq;
        }
        found
    }
}

/// Who called: the token id, or `None` for an anonymous read.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: Option<String>,
    /// Whether the caller may see content (`read:content`, or anonymous
    /// reads opened to content on loopback); without it content fields are
    /// left out of every answer.
    pub content: bool,
}

impl Caller {
    /// The name recorded as a config revision's author.
    pub fn name(&self) -> String {
        self.token_id
            .as_deref()
            .map_or_else(|| "anonymous".to_owned(), |id| format!("api:{id}"))
    }
}

fn bearer(parts: &Parts) -> Result<Option<&str>, HttpError> {
    let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| unauthorized("the authorization header is not text"))?;
    let (scheme, token) = value.trim().split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(unauthorized(
            "the authorization header is not `Bearer <token>`",
        ));
    }
    Ok(Some(token.trim()))
}

fn unauthorized(reason: impl Into<String>) -> HttpError {
    HttpError::new(StatusCode::UNAUTHORIZED, "unauthorized", reason)
}

fn forbidden(id: &str, scope: Scope, parts: &Parts) -> HttpError {
    HttpError::new(
        StatusCode::FORBIDDEN,
        "forbidden",
        format!(
            "token `{id}` lacks the `{scope}` scope that {} {} needs; an operator grants it in api.auth.tokens[].scopes of config.yaml",
            parts.method,
            parts.uri.path()
        ),
    )
}

fn check(
    parts: &Parts,
    state: &ApiState,
    scope: Scope,
    anonymous_ok: bool,
) -> Result<Caller, HttpError> {
    let tokens = state.tokens();
    match bearer(parts)? {
        Some(token) => match tokens.find(token) {
            Some(entry) if entry.scopes.contains(&scope) => Ok(Caller {
                token_id: Some(entry.id.clone()),
                content: entry.scopes.contains(&Scope::ReadContent),
            }),
            Some(entry) => Err(forbidden(&entry.id, scope, parts)),
            None => Err(unauthorized("the bearer token is not valid")),
        },
        None if anonymous_ok => Ok(Caller {
            token_id: None,
            content: tokens.anonymous() == AnonymousAccess::Content,
        }),
        None if tokens.is_empty() => Err(unauthorized(format!(
            "{} {} needs a bearer token with the `{scope}` scope, and none is configured: add api.auth.tokens to config.yaml",
            parts.method,
            parts.uri.path()
        ))),
        None => Err(unauthorized(format!(
            "{} {} needs a bearer token with the `{scope}` scope (Authorization: Bearer <token>)",
            parts.method,
            parts.uri.path()
        ))),
    }
}

/// A read: open to anonymous callers where the listener allows it
/// (`api.auth.allow_anonymous_read`), metadata only unless it allows
/// content. A token that is presented must be valid and carry `read` (which
/// every scope includes); its content shows with `read:content`.
#[derive(Debug, Clone)]
pub struct ReadAccess(pub Caller);

impl FromRequestParts<ApiState> for ReadAccess {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, HttpError> {
        let anonymous_ok = state.tokens().anonymous() != AnonymousAccess::None;
        check(parts, state, Scope::Read, anonymous_ok).map(ReadAccess)
    }
}

/// A write that runs work (tasks, budgets): always needs a valid token
/// with the `operate` scope.
#[derive(Debug, Clone)]
pub struct TokenAccess(pub Caller);

/// [`TokenAccess`] by the name of its scope.
pub type OperateAccess = TokenAccess;

impl FromRequestParts<ApiState> for TokenAccess {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, HttpError> {
        check(parts, state, Scope::Operate, false).map(TokenAccess)
    }
}

/// Any `/config` route: always needs a valid token with the `admin` scope.
#[derive(Debug, Clone)]
pub struct AdminAccess(pub Caller);

impl FromRequestParts<ApiState> for AdminAccess {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, HttpError> {
        check(parts, state, Scope::Admin, false).map(AdminAccess)
    }
}

#[cfg(test)]
mod tests {
    use crewlet_config::ApiToken;

    use super::*;

    fn tokens() -> Tokens {
        Tokens::new(
            &ApiAuth {
                tokens: vec![
                    ApiToken {
                        id: "ops".into(),
                        token: "s3cret-token".into(),
                        scopes: None,
                    },
                    ApiToken {
                        id: "ci".into(),
                        token: "another-one".into(),
                        scopes: None,
                    },
                    ApiToken {
                        id: "blank".into(),
                        token: "  ".into(),
                        scopes: None,
                    },
                ],
                allow_anonymous_read: None,
                allowed_origins: vec![],
                disabled: None,
            },
            AnonymousAccess::Metadata,
        )
    }

    #[test]
    fn tokens_are_matched_by_digest_and_blank_ones_never_match() {
        let t = tokens();
        assert_eq!(t.verify("s3cret-token"), Some("ops"));
        assert_eq!(t.verify("another-one"), Some("ci"));
        assert_eq!(t.verify("s3cret-toke"), None, "a prefix is not the token");
        assert_eq!(t.verify("s3cret-tokenX"), None);
        assert_eq!(t.verify("  "), None, "blank tokens are dropped");
        assert_eq!(t.verify(""), None);
        let debug = format!("{t:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
    }

    #[test]
    fn scopes_are_kept_per_token_and_unset_means_all() {
        let t = Tokens::new(
            &ApiAuth {
                tokens: vec![
                    ApiToken::new("all", "t-all"),
                    ApiToken::new("reader", "t-read").with_scopes([Scope::Read]),
                    ApiToken::new("content", "t-content").with_scopes([Scope::ReadContent]),
                    ApiToken::new("ops", "t-ops").with_scopes([Scope::Operate]),
                    ApiToken::new("admin", "t-admin").with_scopes([Scope::Admin]),
                ],
                ..ApiAuth::default()
            },
            AnonymousAccess::None,
        );
        let scopes = |token: &str| t.find(token).map(|e| e.scopes.clone());
        let up_to = |n: usize| Some(Scope::ALL[..n].to_vec());
        assert_eq!(scopes("t-all"), up_to(4));
        assert_eq!(scopes("t-read"), up_to(1));
        assert_eq!(scopes("t-content"), up_to(2));
        assert_eq!(scopes("t-ops"), up_to(3));
        assert_eq!(scopes("t-admin"), up_to(4), "admin includes operate");
    }
}
