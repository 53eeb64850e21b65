//! Credentials read from the company file: `${VAR}` expanded, blanks and
//! unknown variables treated as "not set" (never an error: a searcher
//! then falls back to the org credential or searches nothing).

use std::fmt;

use crewlet_config::interpolate;

/// `raw` with its `${VAR}`s expanded by `env`, trimmed; `None` when unset,
/// blank, or naming a variable `env` does not know.
pub(crate) fn expand(raw: Option<&str>, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let raw = raw?.trim();
    if raw.is_empty() {
        return None;
    }
    let value = interpolate(raw, env).ok()?;
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// How a Confluence request authenticates. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq)]
pub enum ConfluenceAuth {
    /// Atlassian Cloud: account email (or username) and API token.
    Basic { user: String, token: String },
    /// Data Center personal access token.
    Bearer(String),
}

impl fmt::Debug for ConfluenceAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfluenceAuth::Basic { .. } => f.write_str("Basic(***)"),
            ConfluenceAuth::Bearer(_) => f.write_str("Bearer(***)"),
        }
    }
}

impl ConfluenceAuth {
    /// Basic with `user`, Bearer without one; `None` without a token.
    pub fn from_parts(user: Option<String>, token: Option<String>) -> Option<ConfluenceAuth> {
        let token = token?;
        Some(match user {
            Some(user) => ConfluenceAuth::Basic { user, token },
            None => ConfluenceAuth::Bearer(token),
        })
    }

    pub(crate) fn apply(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            ConfluenceAuth::Basic { user, token } => request.basic_auth(user, Some(token)),
            ConfluenceAuth::Bearer(token) => request.bearer_auth(token),
        }
    }

    /// The secret, for scrubbing it out of error text.
    pub(crate) fn secret(&self) -> &str {
        match self {
            ConfluenceAuth::Basic { token, .. } | ConfluenceAuth::Bearer(token) => token,
        }
    }
}

/// Error text from a server, capped and with `secret` scrubbed out (a
/// proxy may echo request headers into its error page).
pub(crate) fn scrub(body: &str, secret: &str) -> String {
    let mut text: String = body.chars().take(300).collect();
    if !secret.is_empty() {
        text = text.replace(secret, "***");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expand_and_debug() {
        let env = |v: &str| (v == "T").then(|| " tok ".to_owned());
        assert_eq!(expand(Some("${T}"), &env).as_deref(), Some("tok"));
        assert_eq!(expand(Some("${NOPE}"), &env), None);
        assert_eq!(expand(Some("  "), &env), None);
        let auth = ConfluenceAuth::from_parts(Some("a@b".into()), Some("sekrit".into()));
        assert!(!format!("{auth:?}").contains("sekrit"));
        assert_eq!(scrub("x sekrit y", "sekrit"), "x *** y");
    }
}
