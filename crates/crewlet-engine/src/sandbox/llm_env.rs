//! The coding agent's model credentials, derived from the seat's own
//! provider: `role.llm_sandbox`, else the first of its Execute chain. Claude
//! Code speaks the Anthropic API only; OpenCode and custom commands take
//! either form. Only the seat's own key enters the box.

use std::collections::BTreeMap;

use crewlet_config::later::CodingAgent;
use crewlet_config::{Company, LlmChoice, LlmKind, Phase, Role};

use crate::engine::EnvLookup;

/// The variables for `agent`, or why the agent cannot run for this seat.
pub(crate) fn derive(
    company: &Company,
    role: &Role,
    agent: CodingAgent,
    role_env: &BTreeMap<String, String>,
    env: &EnvLookup,
) -> Result<BTreeMap<String, String>, String> {
    let name = match &role.llm_sandbox {
        Some(LlmChoice::One(n)) => Some(n.clone()),
        Some(LlmChoice::Chain(names)) => names.first().cloned(),
        None => company.llm_chain(role, Phase::Execute).into_iter().next(),
    };
    let providers = company.llm_providers();
    let entry = name.as_deref().and_then(|n| providers.get(n));
    let mut out = BTreeMap::new();
    if let Some(p) = entry {
        let raw = p
            .api_keys
            .first()
            .cloned()
            .or_else(|| p.kind.conventional_key_var().map(|v| format!("${{{v}}}")));
        // An unset variable is no key: the check below says what to do.
        let key = raw
            .and_then(|r| crewlet_config::interpolate(&r, |n| env(n)).ok())
            .filter(|k| !k.is_empty());
        let (key_var, url_var) = match p.kind {
            LlmKind::Anthropic => ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
            LlmKind::Openai | LlmKind::OpenaiCompatible => ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
            LlmKind::CliAgent => ("", ""),
        };
        if !key_var.is_empty() {
            if let Some(k) = key {
                out.insert(key_var.to_owned(), k);
            }
            if let Some(url) = &p.base_url {
                out.insert(url_var.to_owned(), url.clone());
            }
        }
    }
    let has = |k: &str| out.contains_key(k) || role_env.contains_key(k);
    if agent == CodingAgent::ClaudeCode
        && !has("ANTHROPIC_API_KEY")
        && !has("CLAUDE_CODE_OAUTH_TOKEN")
    {
        return Err(format!(
            "claude-code speaks the Anthropic API only, and this seat's sandbox model ({}) is not an \
             anthropic provider with a key: point `role.llm_sandbox` at an `anthropic` entry of \
             `providers.llm`, put ANTHROPIC_API_KEY in `role.sandbox.env`, or use `coding_agent: opencode`",
            name.as_deref().unwrap_or("none")
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn company(yaml: &str) -> Company {
        Company::from_yaml("t", yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_seats_own_provider_becomes_the_agents_credentials() {
        let c = company(
            "name: C\nproviders:\n  llm:\n    default: {type: openai-compatible, model: m, base_url: \"http://gw:4000/v1\", api_keys: [\"${GW_KEY}\"]}\n    claude: {type: anthropic, model: s}\nroles:\n  - {name: A, handle: a}\n  - {name: B, handle: b, llm_sandbox: claude}\n",
        );
        let env: EnvLookup = Arc::new(|n: &str| match n {
            "GW_KEY" => Some("gw-secret".into()),
            "ANTHROPIC_API_KEY" => Some("ant-secret".into()),
            _ => None,
        });
        let org = c.organization();
        let role = |h: &str| {
            org.seat(h)
                .map(|s| s.role.clone())
                .unwrap_or_else(|| panic!("{h}"))
        };
        let none = BTreeMap::new();
        let oc = derive(&c, &role("a"), CodingAgent::Opencode, &none, &env).unwrap_or_default();
        assert_eq!(
            oc.get("OPENAI_API_KEY").map(String::as_str),
            Some("gw-secret")
        );
        assert_eq!(
            oc.get("OPENAI_BASE_URL").map(String::as_str),
            Some("http://gw:4000/v1")
        );
        // Claude Code cannot use an OpenAI-style provider: a clear refusal.
        let refused = derive(&c, &role("a"), CodingAgent::ClaudeCode, &none, &env);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("role.llm_sandbox")),
            "{refused:?}"
        );
        // ...unless the seat brings its own key.
        let own: BTreeMap<String, String> =
            [("ANTHROPIC_API_KEY".to_owned(), "x".to_owned())].into();
        assert!(derive(&c, &role("a"), CodingAgent::ClaudeCode, &own, &env).is_ok());
        let cc = derive(&c, &role("b"), CodingAgent::ClaudeCode, &none, &env).unwrap_or_default();
        assert_eq!(
            cc.get("ANTHROPIC_API_KEY").map(String::as_str),
            Some("ant-secret")
        );
        assert!(!cc.contains_key("OPENAI_API_KEY"));
    }
}
