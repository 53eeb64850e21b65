//! What the company file says about each seat's Mattermost bot, as
//! provisioning and the doctor both read it: the server, the bot's
//! username and display name, its channels and where its token lives.

use crewlet_config::{Company, MattermostIntegration, has_references, interpolate};

use super::client::normalize_url;
pub use crate::provision::vars::EnvLookup;
use crate::provision::vars::whole_var;

/// Where a seat's `bot_token` comes from.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum TokenRef {
    /// A whole `${VAR}`: provisioning fills the variable.
    Var(String),
    /// A literal token: a bot managed by hand.
    Literal(String),
    /// Text around a `${VAR}`: usable at run time, not fillable.
    Mixed(String),
    /// No `bot_token`.
    Empty,
}

impl std::fmt::Debug for TokenRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenRef::Var(v) => write!(f, "Var({v})"),
            TokenRef::Literal(_) => f.write_str("Literal(..)"),
            TokenRef::Mixed(_) => f.write_str("Mixed(..)"),
            TokenRef::Empty => f.write_str("Empty"),
        }
    }
}

impl TokenRef {
    fn read(raw: &str) -> TokenRef {
        let raw = raw.trim();
        if raw.is_empty() {
            return TokenRef::Empty;
        }
        if !has_references(raw) {
            return TokenRef::Literal(raw.to_owned());
        }
        match whole_var(raw) {
            Some(var) => TokenRef::Var(var),
            None => TokenRef::Mixed(raw.to_owned()),
        }
    }

    /// The token value, expanded with `env`.
    pub fn resolve(&self, env: EnvLookup<'_>) -> Result<String, String> {
        let value = match self {
            TokenRef::Empty => return Err("the seat has no bot_token".into()),
            TokenRef::Literal(t) => t.clone(),
            TokenRef::Var(v) => env(v).ok_or_else(|| format!("{v} is not set"))?,
            TokenRef::Mixed(raw) => interpolate(raw, |v| env(v)).map_err(|e| e.to_string())?,
        };
        let value = value.trim().to_owned();
        if value.is_empty() {
            return Err(match self {
                TokenRef::Var(v) => format!("{v} is empty"),
                _ => "the bot_token is empty".into(),
            });
        }
        Ok(value)
    }
}

/// One agent seat with a Mattermost bot.
#[derive(Debug, Clone)]
pub(crate) struct SeatSpec {
    pub handle: String,
    /// `{prefix}{handle}` or the explicit `username`; `Err` when a
    /// `${VAR}` in it cannot be expanded.
    pub username: Result<String, String>,
    /// `{role name}{display_name_suffix}`.
    pub display_name: String,
    /// The provisioning channels, then the seat's own, without `~`.
    pub channels: Result<Vec<String>, String>,
    pub token: TokenRef,
}

/// The company's Mattermost block, when it is enabled.
pub(crate) fn enabled(company: &Company) -> Result<&MattermostIntegration, String> {
    company
        .integrations
        .mattermost
        .as_ref()
        .filter(|m| m.enabled)
        .ok_or_else(|| "integrations.mattermost is not enabled in this company".to_owned())
}

/// The server's base URL, `${VAR}`s expanded.
pub(crate) fn server_url(mm: &MattermostIntegration, env: EnvLookup<'_>) -> Result<String, String> {
    let url = interpolate(&mm.url, |v| env(v))
        .map_err(|e| format!("integrations.mattermost.url: {e}"))?;
    normalize_url(&url).map_err(|e| e.to_string())
}

/// The agent seats that have an `integrations.mattermost` block, in seat order.
pub(crate) fn seat_specs(
    company: &Company,
    mm: &MattermostIntegration,
    env: EnvLookup<'_>,
) -> Vec<SeatSpec> {
    let defaults = mm.provisioning.clone().unwrap_or_default();
    let expand = |raw: &str| -> Result<String, String> {
        interpolate(raw, |v| env(v))
            .map(|s| s.trim().to_owned())
            .map_err(|e| e.to_string())
    };
    let org = company.organization();
    org.agents()
        .filter_map(|seat| {
            let bot = seat.role.integrations.mattermost.as_ref()?;
            let username = if bot.username.trim().is_empty() {
                Ok(format!("{}{}", defaults.username_prefix, seat.handle))
            } else {
                expand(&bot.username).map(|u| u.trim_start_matches('@').to_owned())
            };
            let mut channels: Vec<String> = Vec::new();
            let own = expand(&bot.channel);
            for name in defaults
                .channels
                .iter()
                .map(|c| c.trim().to_owned())
                .chain(own.clone().ok())
            {
                let name = name.trim_start_matches('~').to_owned();
                if !name.is_empty() && !channels.contains(&name) {
                    channels.push(name);
                }
            }
            Some(SeatSpec {
                handle: seat.handle.clone(),
                username,
                display_name: format!("{}{}", seat.name, defaults.display_name_suffix),
                channels: own.map(|_| channels),
                token: TokenRef::read(&bot.bot_token),
            })
        })
        .collect()
}

/// `scheme://host[:port]` of a URL (the default port left out), as a
/// browser sends it in `Origin`.
pub fn origin(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url.trim()).ok()?;
    parsed.host_str()?;
    Some(parsed.origin().ascii_serialization())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bot_token_is_a_variable_a_literal_or_a_mix() {
        assert_eq!(
            TokenRef::read(" ${MM_SWE} "),
            TokenRef::Var("MM_SWE".into())
        );
        assert_eq!(TokenRef::read("abc"), TokenRef::Literal("abc".into()));
        assert_eq!(TokenRef::read("x${A}"), TokenRef::Mixed("x${A}".into()));
        assert_eq!(
            TokenRef::read("${A}${B}"),
            TokenRef::Mixed("${A}${B}".into())
        );
        assert_eq!(TokenRef::read(""), TokenRef::Empty);
        assert!(!format!("{:?}", TokenRef::read("sekrit")).contains("sekrit"));
        let env = |v: &str| (v == "A").then(|| "tok".to_owned());
        assert_eq!(TokenRef::read("${A}").resolve(&env).as_deref(), Ok("tok"));
        assert!(TokenRef::read("${B}").resolve(&env).is_err());
    }

    #[test]
    fn origins_drop_paths_and_default_ports() {
        assert_eq!(
            origin("https://chat.example:443/x").as_deref(),
            Some("https://chat.example")
        );
        assert_eq!(
            origin("http://127.0.0.1:8065").as_deref(),
            Some("http://127.0.0.1:8065")
        );
        assert_eq!(origin("nope"), None);
    }
}
