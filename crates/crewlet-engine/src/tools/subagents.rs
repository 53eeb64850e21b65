//! The sub-agent tools (`spawn_subagent`, `spawn_subagent_batch`) and what
//! they run with: the `turn_engine.subagent_*` knobs and each seat's
//! sub-agent model chain.

use std::time::Duration;

use crewlet_config::{Company, LlmSpec, Role};
use crewlet_turn::{SubagentSettings, Visibility};

use super::ToolCatalog;

/// Offers both spawn tools to every seat (Execute offers them when the
/// plan names them, or once activated).
pub(crate) fn add_spawn_tools(catalog: &ToolCatalog) {
    for tool in crewlet_turn::subagent::spawn_tools() {
        catalog.add_builtin(tool, Visibility::All);
    }
}

fn seconds(value: Option<f64>, default: Duration) -> Duration {
    value
        .filter(|s| s.is_finite() && *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .unwrap_or(default)
}

/// The company's `turn_engine.subagent_*` settings, defaults filled in and
/// out-of-range values held to their range.
pub(crate) fn subagent_settings(company: &Company) -> SubagentSettings {
    let te = &company.turn_engine;
    let d = SubagentSettings::default();
    SubagentSettings {
        max_turns: te.subagent_max_turns.unwrap_or(d.max_turns).max(1),
        timeout: seconds(te.subagent_timeout_seconds, d.timeout),
        budget_fraction: te
            .subagent_budget_fraction
            .filter(|f| f.is_finite())
            .map_or(d.budget_fraction, |f| f.clamp(0.0, 1.0)),
        max_parallel: te.subagent_max_parallel.map_or(d.max_parallel, |n| {
            usize::try_from(n.clamp(1, 10)).unwrap_or(1)
        }),
        batch_timeout: seconds(te.subagent_batch_timeout_seconds, d.batch_timeout),
        min_per_child_tokens: te
            .subagent_min_per_child_tokens
            .map_or(d.min_per_child_tokens, u64::from),
    }
}

/// A seat's sub-agent models: `llm_subagent`, else the `subagent` key of
/// its `llm` map, else its `llm` (a map's `default`), else the company
/// default; names not in `providers.llm` are left out.
pub(crate) fn subagent_chain(company: &Company, role: &Role) -> Vec<String> {
    let map = match &role.llm {
        Some(LlmSpec::Phases(phases)) => Some(phases.as_ref()),
        _ => None,
    };
    let own: Vec<&str> = role
        .llm_subagent
        .as_ref()
        .or_else(|| map.and_then(|m| m.subagent.as_ref()))
        .map(|c| c.names())
        .or_else(|| match &role.llm {
            Some(LlmSpec::One(name)) => Some(vec![name.as_str()]),
            Some(LlmSpec::Chain(names)) => Some(names.iter().map(String::as_str).collect()),
            Some(LlmSpec::Phases(p)) => p.default.as_ref().map(|c| c.names()),
            None => None,
        })
        .unwrap_or_default();
    let providers = company.llm_providers();
    let mut chain: Vec<String> = Vec::new();
    for name in own {
        if providers.contains_key(name) && !chain.iter().any(|c| c == name) {
            chain.push(name.to_owned());
        }
    }
    if chain.is_empty() {
        if providers.contains_key(crewlet_config::DEFAULT_PROVIDER) {
            chain.push(crewlet_config::DEFAULT_PROVIDER.to_owned());
        } else if let Some(first) = providers.keys().next() {
            chain.push(first.clone());
        }
    }
    chain
}

#[cfg(test)]
mod tests {
    use super::*;

    fn company(yaml: &str) -> Result<Company, Box<dyn std::error::Error>> {
        Ok(Company::from_yaml("t", yaml)?)
    }

    const PROVIDERS: &str = "
name: Acme
providers:
  llm:
    big: {type: openai, model: gpt-big, api_keys: [k]}
    small: {type: openai, model: gpt-small, api_keys: [k]}
";

    #[test]
    fn the_subagent_model_falls_back_like_the_original() -> Result<(), Box<dyn std::error::Error>> {
        let c = company(&format!(
            "{PROVIDERS}roles:
  - {{name: A, handle: a, llm: big, llm_subagent: small}}
  - {{name: B, handle: b, llm: {{default: big, subagent: small}}}}
  - {{name: C, handle: c, llm: {{default: small, execute: big}}}}
  - {{name: D, handle: d, llm: [small, big]}}
  - {{name: E, handle: e}}
  - {{name: F, handle: f, llm_subagent: nowhere}}
"
        ))?;
        let chains: Vec<Vec<String>> = c.roles.iter().map(|r| subagent_chain(&c, r)).collect();
        assert_eq!(
            chains,
            [
                vec!["small"],
                vec!["small"],
                vec!["small"],
                vec!["small", "big"],
                vec!["big"],
                vec!["big"]
            ]
        );
        Ok(())
    }

    #[test]
    fn settings_default_and_clamp() -> Result<(), Box<dyn std::error::Error>> {
        let c = company(PROVIDERS)?;
        assert_eq!(subagent_settings(&c), SubagentSettings::default());
        let c = company(&format!(
            "{PROVIDERS}turn_engine:
  subagent_max_turns: 5
  subagent_timeout_seconds: 0.5
  subagent_budget_fraction: 0.5
  subagent_max_parallel: 7
  subagent_batch_timeout_seconds: 30
  subagent_min_per_child_tokens: 64
"
        ))?;
        let s = subagent_settings(&c);
        assert_eq!(s.max_turns, 5);
        assert_eq!(s.timeout, Duration::from_millis(500));
        assert!((s.budget_fraction - 0.5).abs() < f64::EPSILON);
        assert_eq!(s.max_parallel, 7);
        assert_eq!(s.batch_timeout, Duration::from_secs(30));
        assert_eq!(s.min_per_child_tokens, 64);

        // The loader refuses out-of-range values; built in code, they are held.
        let mut c = c;
        let te = &mut c.turn_engine;
        te.subagent_max_turns = Some(0);
        te.subagent_budget_fraction = Some(3.0);
        te.subagent_max_parallel = Some(40);
        te.subagent_batch_timeout_seconds = Some(-1.0);
        let s = subagent_settings(&c);
        assert_eq!(s.max_turns, 1);
        assert!((s.budget_fraction - 1.0).abs() < f64::EPSILON);
        assert_eq!(s.max_parallel, 10);
        assert_eq!(s.batch_timeout, Duration::from_secs(120));
        Ok(())
    }
}
