//! How a seat's coding agent reaches its model, from the seat's own
//! provider (`role.llm_sandbox`, else the first of its Execute chain) and
//! its `model_key` setting:
//!
//! - `proxy` (the default): through the engine's model proxy, where the box
//!   can reach it (a local box on the host network); the run gets the
//!   proxy's URL and a token of its own, never the key. Where the box
//!   cannot reach it (E2B, `network: none`), nothing.
//! - `raw`: the seat's real key and base URL, in the box's environment.
//! - `none`: nothing.
//!
//! A key or base URL of the provider's vendor that `role.sandbox.env` sets
//! (or Claude Code's `CLAUDE_CODE_OAUTH_TOKEN`) is the operator's own
//! choice: the engine then adds nothing for that vendor. Claude Code speaks
//! the Anthropic API only; OpenCode and custom commands take either form.

use std::collections::BTreeMap;
use std::sync::Arc;

use crewlet_config::later::{CodingAgent, ModelKey, ModelKeyChoice, RoleSandbox};
use crewlet_config::{Company, LlmChoice, LlmKind, Phase, Role};

use super::model_proxy::{Upstream, Vendor};
use crate::engine::EnvLookup;

/// What the model gives the seat's boxes.
#[derive(Debug, Clone)]
pub(crate) enum ModelAccess {
    /// Each run gets the proxy's URL and its own token for this upstream.
    Proxy(Arc<Upstream>),
    /// These variables (the real key and base URL) are in the box.
    Raw(BTreeMap<String, String>),
    /// No model variables from the engine.
    Nothing,
}

/// The seat's `model_key`, the provider's default filled in.
pub(crate) fn mode(role: &RoleSandbox, default: ModelKey) -> ModelKey {
    match role.model_key {
        ModelKeyChoice::Default => default,
        ModelKeyChoice::Proxy => ModelKey::Proxy,
        ModelKeyChoice::Raw => ModelKey::Raw,
        ModelKeyChoice::None => ModelKey::None,
    }
}

/// What `agent` of `role` gets, or why it cannot run for this seat.
/// `reachable`: the seat's boxes can reach the engine's loopback.
pub(crate) fn derive(
    company: &Company,
    role: &Role,
    agent: CodingAgent,
    mode: ModelKey,
    reachable: bool,
    role_env: &BTreeMap<String, String>,
    env: &EnvLookup,
) -> Result<ModelAccess, String> {
    let name = match &role.llm_sandbox {
        Some(LlmChoice::One(n)) => Some(n.clone()),
        Some(LlmChoice::Chain(names)) => names.first().cloned(),
        None => company.llm_chain(role, Phase::Execute).into_iter().next(),
    };
    let providers = company.llm_providers();
    let entry = name.as_deref().and_then(|n| providers.get(n));
    let vendor = entry.and_then(|p| match p.kind {
        LlmKind::Anthropic => Some(Vendor::Anthropic),
        LlmKind::Openai | LlmKind::OpenaiCompatible => Some(Vendor::OpenAi),
        LlmKind::CliAgent | LlmKind::Local => None,
    });
    let own = |v: Vendor| {
        let (key_var, url_var) = v.vars();
        role_env.contains_key(key_var)
            || role_env.contains_key(url_var)
            || (v == Vendor::Anthropic && role_env.contains_key("CLAUDE_CODE_OAUTH_TOKEN"))
    };
    let access = match (entry, vendor) {
        (Some(p), Some(v)) if !own(v) => {
            let raw = p
                .api_keys
                .first()
                .cloned()
                .or_else(|| p.kind.conventional_key_var().map(|v| format!("${{{v}}}")));
            // An unset variable is no key: the check below says what to do.
            let key = raw
                .and_then(|r| crewlet_config::interpolate(&r, |n| env(n)).ok())
                .filter(|k| !k.is_empty());
            if let Some(k) = &key {
                crewlet_telemetry::register_secret(k.clone());
            }
            let base = p
                .base_url
                .as_deref()
                .and_then(|u| crewlet_config::interpolate(u, |n| env(n)).ok())
                .filter(|u| !u.trim().is_empty());
            match mode {
                ModelKey::Proxy if reachable => {
                    let base = base.or_else(|| match p.kind {
                        LlmKind::Anthropic => Some(crewlet_llm::ANTHROPIC_BASE_URL.to_owned()),
                        LlmKind::Openai => Some(crewlet_llm::OPENAI_BASE_URL.to_owned()),
                        _ => None,
                    });
                    match base {
                        Some(base) => ModelAccess::Proxy(Arc::new(Upstream {
                            vendor: v,
                            base,
                            key,
                        })),
                        None => ModelAccess::Nothing,
                    }
                }
                ModelKey::Raw => {
                    let (key_var, url_var) = v.vars();
                    let mut vars = BTreeMap::new();
                    if let Some(k) = key {
                        vars.insert(key_var.to_owned(), k);
                    }
                    if let Some(url) = base {
                        vars.insert(url_var.to_owned(), url);
                    }
                    ModelAccess::Raw(vars)
                }
                ModelKey::Proxy | ModelKey::None => ModelAccess::Nothing,
            }
        }
        _ => ModelAccess::Nothing,
    };
    let anthropic = match &access {
        ModelAccess::Proxy(up) => up.vendor == Vendor::Anthropic,
        ModelAccess::Raw(vars) => vars.contains_key("ANTHROPIC_API_KEY"),
        ModelAccess::Nothing => false,
    } || role_env.contains_key("ANTHROPIC_API_KEY")
        || role_env.contains_key("CLAUDE_CODE_OAUTH_TOKEN");
    if agent == CodingAgent::ClaudeCode && !anthropic {
        let why = match (mode, reachable, vendor) {
            (ModelKey::Proxy, false, Some(Vendor::Anthropic)) => format!(
                "this seat's boxes cannot reach the engine's model proxy (E2B boxes run remotely; \
                 `network: none` boxes reach nothing), so no model key enters them: set \
                 `role.sandbox.model_key: raw` to put the seat's real key ({}) in its boxes, or put \
                 ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN in `role.sandbox.env`",
                name.as_deref().unwrap_or("none")
            ),
            (ModelKey::None, _, _) => "`role.sandbox.model_key: none` gives the box no model key: \
                 put ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN in `role.sandbox.env`"
                .to_owned(),
            _ => format!(
                "this seat's sandbox model ({}) is not an anthropic provider with a key: point \
                 `role.llm_sandbox` at an `anthropic` entry of `providers.llm`, put \
                 ANTHROPIC_API_KEY in `role.sandbox.env`, or use `coding_agent: opencode`",
                name.as_deref().unwrap_or("none")
            ),
        };
        return Err(format!(
            "claude-code speaks the Anthropic API only, and {why}"
        ));
    }
    Ok(access)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn company(yaml: &str) -> Company {
        Company::from_yaml("t", yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    const YAML: &str = "name: C\nproviders:\n  llm:\n    default: {type: openai-compatible, model: m, base_url: \"http://gw:4000/v1\", api_keys: [\"${GW_KEY}\"]}\n    claude: {type: anthropic, model: s}\nroles:\n  - {name: A, handle: a}\n  - {name: B, handle: b, llm_sandbox: claude}\n";

    fn env() -> EnvLookup {
        Arc::new(|n: &str| match n {
            "GW_KEY" => Some("gw-secret".into()),
            "ANTHROPIC_API_KEY" => Some("ant-secret".into()),
            _ => None,
        })
    }

    fn role(c: &Company, h: &str) -> Role {
        c.organization()
            .seat(h)
            .map(|s| s.role.clone())
            .unwrap_or_else(|| panic!("{h}"))
    }

    #[test]
    fn through_the_proxy_the_seats_provider_is_the_upstream_and_no_key_is_a_variable() {
        let c = company(YAML);
        let none = BTreeMap::new();
        let oc = derive(
            &c,
            &role(&c, "a"),
            CodingAgent::Opencode,
            ModelKey::Proxy,
            true,
            &none,
            &env(),
        );
        match oc {
            Ok(ModelAccess::Proxy(up)) => {
                assert_eq!(up.vendor, Vendor::OpenAi);
                assert_eq!(up.base, "http://gw:4000/v1");
                assert_eq!(up.key.as_deref(), Some("gw-secret"));
            }
            other => panic!("{other:?}"),
        }
        // The vendor's default base URL when the provider names none.
        let cc = derive(
            &c,
            &role(&c, "b"),
            CodingAgent::ClaudeCode,
            ModelKey::Proxy,
            true,
            &none,
            &env(),
        );
        match cc {
            Ok(ModelAccess::Proxy(up)) => {
                assert_eq!(up.vendor, Vendor::Anthropic);
                assert_eq!(up.base, crewlet_llm::ANTHROPIC_BASE_URL);
                assert_eq!(up.key.as_deref(), Some("ant-secret"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_raw_key_enters_the_box_only_when_the_operator_opts_in() {
        let c = company(YAML);
        let none = BTreeMap::new();
        let a = role(&c, "a");
        let raw = derive(
            &c,
            &a,
            CodingAgent::Opencode,
            ModelKey::Raw,
            false,
            &none,
            &env(),
        );
        match raw {
            Ok(ModelAccess::Raw(vars)) => {
                assert_eq!(
                    vars.get("OPENAI_API_KEY").map(String::as_str),
                    Some("gw-secret")
                );
                assert_eq!(
                    vars.get("OPENAI_BASE_URL").map(String::as_str),
                    Some("http://gw:4000/v1")
                );
            }
            other => panic!("{other:?}"),
        }
        // A box that cannot reach the proxy, or `none`: nothing.
        for (mode, reachable) in [(ModelKey::Proxy, false), (ModelKey::None, true)] {
            let got = derive(
                &c,
                &a,
                CodingAgent::Opencode,
                mode,
                reachable,
                &none,
                &env(),
            );
            assert!(matches!(got, Ok(ModelAccess::Nothing)), "{mode:?}: {got:?}");
        }
        // Claude Code with nothing: a refusal that says how to opt in.
        let refused = derive(
            &c,
            &role(&c, "b"),
            CodingAgent::ClaudeCode,
            ModelKey::Proxy,
            false,
            &none,
            &env(),
        );
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("model_key: raw") && e.contains("cannot reach")),
            "{refused:?}"
        );
    }

    #[test]
    fn credentials_the_operator_put_in_the_seats_env_win() {
        let c = company(YAML);
        let none = BTreeMap::new();
        // Claude Code cannot use an OpenAI-style provider: a clear refusal.
        let refused = derive(
            &c,
            &role(&c, "a"),
            CodingAgent::ClaudeCode,
            ModelKey::Proxy,
            true,
            &none,
            &env(),
        );
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("role.llm_sandbox")),
            "{refused:?}"
        );
        // ...unless the seat brings its own key.
        let own: BTreeMap<String, String> =
            [("ANTHROPIC_API_KEY".to_owned(), "x".to_owned())].into();
        assert!(
            derive(
                &c,
                &role(&c, "a"),
                CodingAgent::ClaudeCode,
                ModelKey::Proxy,
                true,
                &own,
                &env()
            )
            .is_ok()
        );
        // A subscription token: the engine adds nothing for Anthropic.
        let oauth: BTreeMap<String, String> =
            [("CLAUDE_CODE_OAUTH_TOKEN".to_owned(), "o".to_owned())].into();
        for mode in [ModelKey::Proxy, ModelKey::Raw] {
            let got = derive(
                &c,
                &role(&c, "b"),
                CodingAgent::ClaudeCode,
                mode,
                true,
                &oauth,
                &env(),
            );
            assert!(matches!(got, Ok(ModelAccess::Nothing)), "{got:?}");
        }
    }
}
