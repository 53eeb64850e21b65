//! Which seats `crewlet slack provision` can manage, read from the company
//! file as written: an agent seat whose `integrations.slack` names its
//! `signing_secret` and `bot_token` as whole `${VAR}` placeholders gets an
//! app, and its secrets land in exactly those variables. Literal values
//! are an app managed by hand (reported, left alone); a mix of the two
//! is refused, since provisioning could fill only half of it.

use crewlet_config::{Company, has_references, references};
use serde_json::Value;

use super::manifest::seat_manifest;

/// How a credential is written in the company file.
#[derive(Clone, PartialEq, Eq)]
enum Written {
    Missing,
    /// A whole `${VAR}`.
    Var(String),
    Literal,
    /// Text around a `${VAR}`, or several.
    Mixed,
}

impl Written {
    fn read(raw: Option<&str>) -> Written {
        let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else {
            return Written::Missing;
        };
        if !has_references(raw) {
            return Written::Literal;
        }
        match references(raw).as_slice() {
            [var] if raw == format!("${{{var}}}") => Written::Var((*var).to_owned()),
            _ => Written::Mixed,
        }
    }
}

/// One seat to provision.
#[derive(Debug, Clone)]
pub struct SeatPlan {
    pub handle: String,
    pub role_name: String,
    /// Where the signing secret goes.
    pub signing_secret_var: String,
    /// Where the bot token goes.
    pub bot_token_var: String,
    /// Where the bot's user id goes, when the file asks for one.
    pub bot_user_id_var: Option<String>,
    pub manifest: Value,
}

/// What the company file says about one Slack seat.
#[derive(Debug, Clone)]
pub enum Planned {
    Provision(Box<SeatPlan>),
    /// Not for provisioning (an app managed by hand, ...): why.
    Skip {
        handle: String,
        reason: String,
    },
    /// Written in a way provisioning must not touch: why.
    Refuse {
        handle: String,
        reason: String,
    },
}

impl Planned {
    pub fn handle(&self) -> &str {
        match self {
            Planned::Provision(p) => &p.handle,
            Planned::Skip { handle, .. } | Planned::Refuse { handle, .. } => handle,
        }
    }
}

/// Every agent seat with `integrations.slack`, in seat order, limited to
/// `handles` when not empty. `Err` names handles that are no such seat.
pub fn plan(company: &Company, base_url: &str, handles: &[String]) -> Result<Vec<Planned>, String> {
    let org = company.organization();
    let slack_seats: Vec<_> = org
        .agents()
        .filter(|s| s.role.integrations.slack.is_some())
        .collect();
    let unknown: Vec<&str> = handles
        .iter()
        .map(String::as_str)
        .filter(|h| !slack_seats.iter().any(|s| s.handle == *h))
        .collect();
    if !unknown.is_empty() {
        let known: Vec<&str> = slack_seats.iter().map(|s| s.handle.as_str()).collect();
        return Err(format!(
            "no agent seat with integrations.slack named {}; the Slack seats are: {}",
            unknown.join(", "),
            if known.is_empty() {
                "(none)".to_owned()
            } else {
                known.join(", ")
            }
        ));
    }
    let mut out = Vec::new();
    for seat in slack_seats {
        if !handles.is_empty() && !handles.contains(&seat.handle) {
            continue;
        }
        let Some(slack) = seat.role.integrations.slack.as_ref() else {
            continue;
        };
        let handle = seat.handle.clone();
        let secret = Written::read(slack.signing_secret.as_deref());
        let token = Written::read(slack.bot_token.as_deref());
        let planned = match (secret, token) {
            (Written::Var(s), Written::Var(t)) => {
                let user_id = match Written::read(slack.bot_user_id.as_deref()) {
                    Written::Var(v) => Some(v),
                    _ => None,
                };
                Planned::Provision(Box::new(SeatPlan {
                    manifest: seat_manifest(&seat.name, &handle, base_url),
                    handle,
                    role_name: seat.name.clone(),
                    signing_secret_var: s,
                    bot_token_var: t,
                    bot_user_id_var: user_id,
                }))
            }
            (Written::Mixed, _) | (_, Written::Mixed) => Planned::Refuse {
                handle,
                reason: "signing_secret and bot_token must each be one whole ${VAR} (or both literal values for an app managed by hand)".into(),
            },
            (Written::Var(_), Written::Literal) | (Written::Literal, Written::Var(_)) => {
                Planned::Refuse {
                    handle,
                    reason: "one of signing_secret and bot_token is a ${VAR} and the other a literal value: make both ${VAR}s to provision the app, or both literal to manage it by hand".into(),
                }
            }
            (Written::Literal, Written::Literal)
            | (Written::Literal, Written::Missing)
            | (Written::Missing, Written::Literal) => Planned::Skip {
                handle,
                reason: "literal credentials: an app managed by hand, left as it is".into(),
            },
            (Written::Var(_), Written::Missing) | (Written::Missing, Written::Var(_)) => {
                Planned::Skip {
                    handle,
                    reason: "provisioning needs both signing_secret and bot_token as ${VAR}s"
                        .into(),
                }
            }
            (Written::Missing, Written::Missing) => Planned::Skip {
                handle,
                reason: "no signing_secret or bot_token".into(),
            },
        };
        out.push(planned);
    }
    Ok(out)
}

/// The code in what an operator pasted: the bare code, the whole redirect
/// URL from the address bar, or its `code=...` query.
pub fn install_code(pasted: &str) -> Result<String, String> {
    let text = pasted.trim().trim_matches(|c| c == '"' || c == '\'').trim();
    if text.is_empty() {
        return Err("nothing was pasted".into());
    }
    if !text.contains("code=") {
        return Ok(text.to_owned());
    }
    let url = if text.contains("://") {
        reqwest::Url::parse(text)
    } else {
        let query = text.trim_start_matches('?');
        reqwest::Url::parse(&format!("http://paste.invalid/?{query}"))
    }
    .map_err(|_| "the pasted text is not a URL with a code".to_owned())?;
    url.query_pairs()
        .find(|(k, v)| k == "code" && !v.is_empty())
        .map(|(_, v)| v.into_owned())
        .ok_or_else(|| "the pasted URL has no code= value".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn company(roles: &str) -> Company {
        let yaml = format!(
            "name: T\nproviders:\n  llm:\n    m: {{type: openai-compatible, model: m, base_url: \"http://127.0.0.1:9/v1\"}}\nroles:\n{roles}"
        );
        Company::from_yaml("t", &yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn seats_are_provisioned_skipped_or_refused_by_how_their_secrets_are_written() {
        let c = company(
            "  - name: Eng\n    handle: eng\n    integrations:\n      slack: {signing_secret: \"${S_ENG}\", bot_token: \"${T_ENG}\", bot_user_id: \"${U_ENG}\"}\n\
             \x20 - name: Ops\n    handle: ops\n    integrations:\n      slack: {signing_secret: abc, bot_token: xoxb-1}\n\
             \x20 - name: Mix\n    handle: mix\n    integrations:\n      slack: {signing_secret: \"${S_MIX}\", bot_token: xoxb-2}\n\
             \x20 - name: Plain\n    handle: plain\n",
        );
        let plans = plan(&c, "https://c.example", &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plans.len(), 3);
        match &plans[0] {
            Planned::Provision(p) => {
                assert_eq!(p.signing_secret_var, "S_ENG");
                assert_eq!(p.bot_token_var, "T_ENG");
                assert_eq!(p.bot_user_id_var.as_deref(), Some("U_ENG"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&plans[1], Planned::Skip { handle, .. } if handle == "ops"));
        assert!(matches!(&plans[2], Planned::Refuse { handle, .. } if handle == "mix"));
        let only = plan(&c, "https://c.example", &["ops".into()]).unwrap_or_default();
        assert_eq!(only.len(), 1);
        let err = plan(&c, "https://c.example", &["plain".into()]).err();
        assert!(err.is_some_and(|e| e.contains("plain")));
    }

    #[test]
    fn a_code_is_read_from_a_bare_code_a_url_or_a_query() {
        assert_eq!(install_code(" 123.abc \n").as_deref(), Ok("123.abc"));
        assert_eq!(
            install_code("https://c.example/webhooks/slack-oauth?code=9.x%2Fy&state=eng")
                .as_deref(),
            Ok("9.x/y")
        );
        assert_eq!(install_code("code=77&state=eng").as_deref(), Ok("77"));
        assert!(install_code("   ").is_err());
        assert!(install_code("https://c.example/?code=").is_err());
    }
}
