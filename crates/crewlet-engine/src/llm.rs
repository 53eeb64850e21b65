//! Model providers from the company's `providers.llm`, built when the engine
//! boots: this is where `${VAR}` references are expanded from the process
//! environment (never during validation).
//!
//! An entry that cannot be built (a key variable that is not set, a bad
//! URL) does not stop the engine: it is replaced by a provider that fails
//! every call with the reason, so turns that need it end with
//! `llm_unavailable` (or fall back along their chain) and everything else
//! keeps running.
//!
//! Every provider then goes behind its guard ([`guard_registry`]): its
//! `rpm`/`tpm` scheduled in the engine's quota store (PostgreSQL when the
//! engine has a database, so every process shares one budget per provider;
//! this process's own otherwise), rate-limit answers waited out, and a
//! circuit breaker whose openings and closings are published as events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewlet_config::{
    Company, LlmKind, LlmProvider as LlmEntry, Phase as ConfigPhase, Role, interpolate,
};
use crewlet_core::EventPayload;
use crewlet_core::payload::{ProviderCircuitClosed, ProviderCircuitOpened};
use crewlet_core::quota::{ProviderQuotas, QuotaLimits};
use crewlet_llm::{
    BreakerObserver, Completion, CompletionRequest, GuardOptions, GuardedProvider, LlmError,
    LlmProvider, LlmRegistry, Phase, ProviderConfig, ProviderKind, RoleLlm, build_provider,
    http_client,
};
use crewlet_queue::EventQueue;
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
        if matches!(entry.kind, LlmKind::CliAgent | LlmKind::Local) {
            let built = if entry.kind == LlmKind::Local {
                crate::local_llm::local_provider(name, entry, env)
            } else {
                cli_agent_provider(name, entry, env)
            };
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
            continue;
        }
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

/// Every provider of `registry` behind its guard: the `rpm`/`tpm` of its
/// entry in `company` scheduled in `quotas` (under `{company}/{entry}`), its
/// `max_tokens` as the completion estimate, rate-limit waits and the
/// circuit breaker, reported to `observer`. A provider with no entry (a
/// registry built by hand) gets the breaker and the waits only.
pub fn guard_registry(
    registry: LlmRegistry,
    company: &Company,
    quotas: Arc<dyn ProviderQuotas>,
    observer: Option<Arc<dyn BreakerObserver>>,
) -> LlmRegistry {
    let entries = company.llm_providers();
    registry.map(|provider| {
        let mut options = GuardOptions::default();
        if let Some(entry) = entries.get(provider.name()) {
            let key = format!("{}/{}", company.name, provider.name());
            let limits = QuotaLimits::per_minute(entry.rpm, entry.tpm);
            options = options.quota(quotas.clone(), key, limits);
            if let Some(n) = entry.max_tokens {
                options = options.output_estimate(n);
            }
        }
        if let Some(o) = &observer {
            options = options.observer(o.clone());
        }
        Arc::new(GuardedProvider::new(provider, options))
    })
}

/// Publishes `provider_circuit_opened` / `provider_circuit_closed`.
pub(crate) struct CircuitEvents {
    queue: Arc<dyn EventQueue>,
    source: &'static str,
}

impl CircuitEvents {
    pub fn new(queue: Arc<dyn EventQueue>, source: &'static str) -> Self {
        Self { queue, source }
    }

    fn publish(&self, event: crewlet_core::Event, summary: String) {
        let event = event.with_summary(summary);
        let queue = self.queue.clone();
        tokio::spawn(async move { crate::sink::publish_event(queue.as_ref(), event).await });
    }
}

impl BreakerObserver for CircuitEvents {
    fn opened(&self, provider: &str, failures: u32, cool_down: Duration, error: &LlmError) {
        let payload = ProviderCircuitOpened {
            provider: provider.to_owned(),
            consecutive_failures: failures,
            cool_down_ms: u64::try_from(cool_down.as_millis()).unwrap_or(u64::MAX),
            error: error.to_string(),
            error_class: error.class().as_str().to_owned(),
        };
        let summary = format!(
            "llm provider {provider} circuit open for {} s",
            cool_down.as_secs()
        );
        self.publish(payload.to_event(self.source), summary);
    }

    fn closed(&self, provider: &str, open_for: Duration) {
        let payload = ProviderCircuitClosed {
            provider: provider.to_owned(),
            open_ms: u64::try_from(open_for.as_millis()).unwrap_or(u64::MAX),
        };
        let summary = format!("llm provider {provider} circuit closed");
        self.publish(payload.to_event(self.source), summary);
    }
}

/// A `cli-agent` entry: the coding CLI named by its `cli` block (with
/// `${VAR}` expanded), driven as a text model. Its token, if any, is a
/// secret from now on.
fn cli_agent_provider(
    name: &str,
    entry: &LlmEntry,
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> Result<Arc<dyn LlmProvider>, String> {
    let cli = entry
        .cli
        .as_ref()
        .ok_or_else(|| format!("provider `{name}`: a cli-agent entry needs a `cli` block"))?;
    let cli = crewlet_config::interpolate_all(cli, |v| env(v)).map_err(|e| e.to_string())?;
    let cli = serde_json::to_value(&cli).map_err(|e| e.to_string())?;
    let keys = expand_keys(entry, env)?;
    crewlet_llm::cli_agent::build(name, &entry.model, &cli, &keys, &|v| env(v))
        .map_err(|e| e.to_string())
}

/// An entry's `api_keys` with `${VAR}` expanded, empty ones dropped; each
/// is a secret from now on (never in a log line or an exported span).
fn expand_keys(
    entry: &LlmEntry,
    env: &(dyn Fn(&str) -> Option<String> + Send + Sync),
) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    for (i, raw) in entry.api_keys.iter().enumerate() {
        let key = interpolate(raw, |v| env(v)).map_err(|e| format!("api_keys[{i}]: {e}"))?;
        if !key.trim().is_empty() {
            crewlet_telemetry::register_secret(key.clone());
            keys.push(key);
        }
    }
    Ok(keys)
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
        LlmKind::CliAgent | LlmKind::Local => {
            return Err(format!(
                "provider `{name}` is a {} provider, built by its own module",
                entry.kind
            ));
        }
    };
    let mut keys = expand_keys(entry, env)?;
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

    /// A model that notes when each call arrived (virtual time) and fails
    /// the first `failures` calls with a 503.
    fn scripted(
        name: &str,
        failures: u64,
    ) -> (
        Arc<dyn LlmProvider>,
        Arc<parking_lot::Mutex<Vec<tokio::time::Instant>>>,
    ) {
        let arrivals = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = arrivals.clone();
        let n = std::sync::atomic::AtomicU64::new(0);
        let p = crewlet_llm::ScriptedProvider::new(name, "m", move |_| {
            seen.lock().push(tokio::time::Instant::now());
            if n.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < failures {
                return Err(LlmError::Http {
                    provider: "main".into(),
                    status: 503,
                    class: crewlet_llm::ErrorClass::Server,
                    message: "down".into(),
                    retry_after: None,
                });
            }
            Ok(Completion::default())
        });
        (Arc::new(p), arrivals)
    }

    #[tokio::test]
    async fn guarded_providers_reserve_from_the_shared_quota_of_their_entry() {
        use crewlet_core::quota::ProviderQuotas;

        let c = company(&YAML.replace("model: m1", "model: m1\n      rpm: 2"));
        let (main, _) = scripted("main", 0);
        let (local, _) = scripted("local", 0);
        let mut registry = LlmRegistry::new();
        registry.insert(main);
        registry.insert(local);
        let quotas = Arc::new(crewlet_store::MemoryProviderQuotas::new());
        let registry = guard_registry(registry, &c, quotas.clone(), None);
        for name in ["main", "local"] {
            let p = registry.get(name).unwrap_or_else(|| panic!("{name}"));
            assert!(p.complete(&CompletionRequest::default()).await.is_ok());
        }
        // `main` took the first slot of its 2 a minute: the next one is
        // 30.5 s away for every caller of the store.
        let limits = QuotaLimits::per_minute(Some(2), None);
        let next = quotas.reserve("T/main", &limits, 1).await;
        let wait = next.map(|s| s.wait.as_secs_f64()).unwrap_or_default();
        assert!(wait > 29.0 && wait <= 30.5, "{wait}");
        // `local` has no limits: it never reserved.
        let free = quotas.reserve("T/local", &limits, 1).await;
        assert_eq!(free.map(|s| s.wait), Ok(Duration::ZERO));
    }

    #[tokio::test]
    async fn a_provider_circuit_opening_and_closing_is_published() {
        use crewlet_core::EventType;
        use crewlet_queue::{MemoryBroker, topics};

        let broker = MemoryBroker::new();
        let queue: Arc<dyn EventQueue> = Arc::new(broker.client());
        let mut opened = match queue
            .subscribe_stream(&topics::events(&EventType::ProviderCircuitOpened))
            .await
        {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        let mut closed = match queue
            .subscribe_stream(&topics::events(&EventType::ProviderCircuitClosed))
            .await
        {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        };
        let observer = CircuitEvents::new(queue, "engine");
        let error = LlmError::Timeout {
            provider: "main".into(),
            timeout: Duration::from_secs(120),
        };
        observer.opened("main", 5, Duration::from_secs(30), &error);
        observer.closed("main", Duration::from_secs(31));
        let event = opened.recv().await.map(|e| e.event);
        let payload = event.as_deref().and_then(ProviderCircuitOpened::read);
        assert_eq!(
            payload.map(|p| (
                p.provider,
                p.consecutive_failures,
                p.cool_down_ms,
                p.error_class
            )),
            Some(("main".into(), 5, 30_000, "timeout".into()))
        );
        let event = closed.recv().await.map(|e| e.event);
        let payload = event.as_deref().and_then(ProviderCircuitClosed::read);
        assert_eq!(payload.map(|p| p.open_ms), Some(31_000));
    }

    #[tokio::test]
    async fn a_failing_provider_opens_its_circuit_and_calls_stop_reaching_it() {
        let c = company(YAML);
        let (main, arrivals) = scripted("main", 100);
        let mut registry = LlmRegistry::new();
        registry.insert(main);
        let quotas = Arc::new(crewlet_store::MemoryProviderQuotas::new());
        let registry = guard_registry(registry, &c, quotas, None);
        let p = registry.get("main").unwrap_or_else(|| panic!("main"));
        for _ in 0..8 {
            assert!(p.complete(&CompletionRequest::default()).await.is_err());
        }
        // Five failures open it; the next three never reach the model.
        assert_eq!(arrivals.lock().len(), 5);
        let err = p.complete(&CompletionRequest::default()).await.err();
        assert_eq!(
            err.map(|e| e.class()),
            Some(crewlet_llm::ErrorClass::CircuitOpen)
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
