//! Model providers from the company's `providers.llm`, built when the engine
//! boots: this is where `${VAR}` references are expanded from the process
//! environment (never during validation).
//!
//! An entry that cannot be built (a key variable that is not set, a bad
//! URL) does not stop the engine: it is replaced by a provider that fails
//! every call with the reason, so turns that need it end with
//! `llm_unavailable` (or fall back along their chain) and everything else
//! keeps running.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewlet_config::{
    Company, LlmKind, LlmProvider as LlmEntry, Phase as ConfigPhase, Role, interpolate,
};
use crewlet_llm::{
    Completion, CompletionRequest, LlmError, LlmProvider, LlmRegistry, Phase, ProviderConfig,
    ProviderKind, RoleLlm, build_provider, http_client,
};
use tracing::warn;

/// Builds every `providers.llm` entry. `env` looks variables up (the process
/// environment in production). Returns the registry and, per entry that
/// could not be built, why.
pub fn build_registry(
    company: &Company,
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> (LlmRegistry, BTreeMap<String, String>) {
    let mut registry = LlmRegistry::new();
    let mut problems = BTreeMap::new();
    let client = match http_client() {
        Ok(c) => Some(c),
        Err(e) => {
            warn!(error = %e, "cannot build the http client for llm providers");
            None
        }
    };
    for (name, entry) in company.llm_providers().iter() {
        let built = provider_config(name, entry, env).and_then(|config| match &client {
            Some(client) => build_provider(&config, client).map_err(|e| e.to_string()),
            None => Err("the http client could not be built".to_owned()),
        });
        match built {
            Ok(provider) => registry.insert(provider),
            Err(reason) => {
                warn!(provider = %name, %reason, "llm provider unavailable; turns that use it fail with llm_unavailable");
                problems.insert(name.clone(), reason.clone());
                registry.insert(Arc::new(UnavailableProvider {
                    name: name.clone(),
                    model: entry.model.clone(),
                    reason,
                }));
            }
        }
    }
    (registry, problems)
}

/// The crate-neutral description of one entry, with `${VAR}` expanded.
fn provider_config(
    name: &str,
    entry: &LlmEntry,
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> Result<ProviderConfig, String> {
    let expand = |what: &str, raw: &str| {
        interpolate(raw, |var| env(var)).map_err(|e| format!("{what}: {e}"))
    };
    let kind = match entry.kind {
        LlmKind::Openai => ProviderKind::OpenAi,
        LlmKind::Anthropic => ProviderKind::Anthropic,
        LlmKind::OpenaiCompatible => ProviderKind::OpenAiCompatible,
        LlmKind::CliAgent => {
            return Err(format!(
                "provider `{name}` is a cli-agent (subscription) backend, which Crewlet does not have yet"
            ));
        }
    };
    let mut keys = Vec::new();
    for (i, raw) in entry.api_keys.iter().enumerate() {
        let key = expand(&format!("api_keys[{i}]"), raw)?;
        if !key.trim().is_empty() {
            // Never in a log line or an exported span.
            crewlet_telemetry::register_secret(key.clone());
            keys.push(key);
        }
    }
    // No keys configured: the type's conventional variable, as the original
    // engine reads it (through the same lookup, so `security.company_env`
    // still decides whether the company may read it).
    if entry.api_keys.is_empty()
        && let Some(var) = entry.kind.conventional_key_var()
        && let Some(key) = env(var).filter(|k| !k.trim().is_empty())
    {
        crewlet_telemetry::register_secret(key.clone());
        keys.push(key);
    }
    if keys.is_empty() && kind != ProviderKind::OpenAiCompatible {
        let fallback = match entry.kind.conventional_key_var() {
            Some(var) if entry.api_keys.is_empty() => format!(" and `{var}` is not set"),
            _ => String::new(),
        };
        return Err(format!(
            "no api key: `api_keys` of {kind} provider `{name}` is empty or its variables are empty{fallback}"
        ));
    }
    let mut config = ProviderConfig::new(name, kind, entry.model.clone())
        .with_keys(keys)
        .with_timeout(Duration::from_secs_f64(
            entry.timeout_seconds.clamp(0.001, 86_400.0),
        ));
    if let Some(url) = &entry.base_url {
        config = config.with_base_url(expand("base_url", url)?);
    }
    if let Some(t) = entry.temperature {
        #[allow(clippy::cast_possible_truncation)]
        let t = t as f32;
        config = config.with_temperature(t);
    }
    if let Some(n) = entry.max_tokens {
        config = config.with_max_tokens(n);
    }
    Ok(config)
}

/// The seat's model choice per phase, resolved by the company's rules
/// (`llm_<phase>` -> `llm` -> `default` -> first entry).
pub fn role_llm(company: &Company, role: &Role) -> RoleLlm {
    let mut out = RoleLlm::default();
    for (phase, config_phase) in [
        (Phase::Plan, ConfigPhase::Plan),
        (Phase::Execute, ConfigPhase::Execute),
        (Phase::Review, ConfigPhase::Review),
        (Phase::Auxiliary, ConfigPhase::Auxiliary),
    ] {
        let chain = company.llm_chain(role, config_phase);
        if !chain.is_empty() {
            out = out.with_phase(phase, chain);
        }
    }
    out
}

/// Stands in for an entry that could not be built: every call fails with why.
struct UnavailableProvider {
    name: String,
    model: String,
    reason: String,
}

#[async_trait]
impl LlmProvider for UnavailableProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn model(&self) -> &str {
        &self.model
    }

    async fn complete(&self, _request: &CompletionRequest) -> Result<Completion, LlmError> {
        Err(LlmError::Config {
            provider: self.name.clone(),
            message: self.reason.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn company(yaml: &str) -> Company {
        Company::from_yaml("t", yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    const YAML: &str = r#"
name: T
providers:
  llm:
    main:
      type: openai
      model: m1
      api_keys: ["${T_KEY_SET}"]
    missing:
      type: openai
      model: m2
      api_keys: ["${T_KEY_UNSET}"]
    local:
      type: openai-compatible
      model: m3
      base_url: http://127.0.0.1:9/v1
roles:
  - name: A
    handle: a
    llm: [missing, main]
    llm_review: local
"#;

    #[test]
    fn missing_variables_make_an_unavailable_provider_not_an_error() {
        let c = company(YAML);
        let env = |name: &str| (name == "T_KEY_SET").then(|| "sk-test".to_owned());
        let (registry, problems) = build_registry(&c, &env);
        assert_eq!(registry.names(), ["main", "missing", "local"]);
        assert_eq!(problems.len(), 1);
        let why = problems.get("missing").cloned().unwrap_or_default();
        assert!(why.contains("T_KEY_UNSET"), "{why}");
        assert!(!why.contains("sk-test"));
    }

    #[test]
    fn keys_come_only_from_the_variables_tier_a_allows() {
        let yaml = YAML.replace("${T_KEY_SET}", "${CREWLET_CO_MAIN_KEY}");
        let c = company(&yaml.replace("${T_KEY_UNSET}", "${ACME_OPS_API_TOKEN}"));
        // Every variable is set in this environment, the engine's own secrets too.
        let everything: crewlet_config::Lookup =
            Arc::new(|name: &str| Some(format!("secret-{name}")));
        let env = crewlet_config::Security::default().company_lookup(everything);
        let (_, problems) = build_registry(&c, &*env);
        assert_eq!(problems.len(), 1, "{problems:?}");
        let why = problems.get("missing").cloned().unwrap_or_default();
        assert!(
            why.contains("ACME_OPS_API_TOKEN") && !why.contains("secret-"),
            "{why}"
        );
    }

    #[test]
    fn phases_resolve_by_the_company_rules() {
        let c = company(YAML);
        let role = &c.roles[0];
        let r = role_llm(&c, role);
        let entries: Vec<String> = c.providers.llm.keys().cloned().collect();
        assert_eq!(r.resolve(Phase::Plan, &entries), ["missing", "main"]);
        assert_eq!(r.resolve(Phase::Review, &entries), ["local"]);
    }
}
