//! Bearer tokens (Tier A `api.auth.tokens`). Presented tokens are compared
//! with every configured token in constant time: both sides are hashed with
//! SHA-256 and compared with `subtle`, and the loop never exits early, so
//! neither the position of a mismatch nor the length of a token leaks.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use crewlet_config::ApiAuth;
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

use crate::error::HttpError;
use crate::state::ApiState;

/// The configured tokens, as digests.
pub(crate) struct Tokens {
    entries: Vec<(String, [u8; 32])>,
    allow_anonymous_read: bool,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field(
                "ids",
                &self.entries.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            )
            .field("allow_anonymous_read", &self.allow_anonymous_read)
            .finish()
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

impl Tokens {
    pub fn new(auth: &ApiAuth) -> Self {
        Self {
            entries: auth
                .tokens
                .iter()
                .filter(|t| !t.token.trim().is_empty())
                .map(|t| (t.id.clone(), digest(t.token.as_bytes())))
                .collect(),
            allow_anonymous_read: auth.allow_anonymous_read,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The id of the token equal to `presented`, compared in constant time
    /// with every configured token.
    pub fn verify(&self, presented: &str) -> Option<&str> {
        let given = digest(presented.as_bytes());
        let mut found: Option<&str> = None;
        let mut any = Choice::from(0);
        for (id, expected) in &self.entries {
            let eq = given.ct_eq(expected);
            if bool::from(eq & !any) {
                found = Some(id);
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

fn check(parts: &Parts, state: &ApiState, anonymous_ok: bool) -> Result<Caller, HttpError> {
    let tokens = state.tokens();
    match bearer(parts)? {
        Some(token) => match tokens.verify(token) {
            Some(id) => Ok(Caller {
                token_id: Some(id.to_owned()),
            }),
            None => Err(unauthorized("the bearer token is not valid")),
        },
        None if anonymous_ok => Ok(Caller { token_id: None }),
        None if tokens.is_empty() => Err(unauthorized(
            "this route needs a bearer token, and none is configured: add api.auth.tokens to config.yaml",
        )),
        None => Err(unauthorized(
            "this route needs a bearer token (Authorization: Bearer <token>)",
        )),
    }
}

/// A read: open unless `api.auth.allow_anonymous_read: false`. A token that
/// is presented must be valid.
#[derive(Debug, Clone)]
pub struct ReadAccess(pub Caller);

impl FromRequestParts<ApiState> for ReadAccess {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, HttpError> {
        let anonymous_ok = state.tokens().allow_anonymous_read;
        check(parts, state, anonymous_ok).map(ReadAccess)
    }
}

/// A write or any `/config` route: always needs a valid token.
#[derive(Debug, Clone)]
pub struct TokenAccess(pub Caller);

impl FromRequestParts<ApiState> for TokenAccess {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, HttpError> {
        check(parts, state, false).map(TokenAccess)
    }
}

#[cfg(test)]
mod tests {
    use crewlet_config::ApiToken;

    use super::*;

    fn tokens() -> Tokens {
        Tokens::new(&ApiAuth {
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
            allow_anonymous_read: true,
            allowed_origins: vec![],
        })
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
}
