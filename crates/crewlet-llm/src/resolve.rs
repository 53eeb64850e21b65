//! Which provider entries serve a seat in a phase.
//!
//! Resolution for phase P: the role's choice for P (`llm: {P: ..}` or
//! `llm_<P>`, e.g. `llm_auxiliary`) -> the role's `llm` (string, list, or the
//! `default` key of its phase map) -> the entry named `default` -> the first
//! entry of `providers.llm`. A list is a fallback chain.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;

pub use crewlet_core::Phase;

use crate::{LlmError, LlmProvider, ProviderConfig, build_provider, http_client};

/// A role's model choice: one chain for every phase and/or one per phase.
/// Each chain names `providers.llm` entries, first choice first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleLlm {
    pub general: Vec<String>,
    pub per_phase: BTreeMap<Phase, Vec<String>>,
}

impl RoleLlm {
    /// `llm: name` or `llm: [a, b]`.
    pub fn chain<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            general: names.into_iter().map(Into::into).collect(),
            per_phase: BTreeMap::new(),
        }
    }

    /// `llm: {plan: .., execute: ..}` or `llm_<phase>: ..`.
    pub fn with_phase<I, S>(mut self, phase: Phase, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.per_phase
            .insert(phase, names.into_iter().map(Into::into).collect());
        self
    }

    /// The chain of entry names for `phase`, given the entries of
    /// `providers.llm` in file order.
    pub fn resolve<'a>(&'a self, phase: Phase, entries: &'a [String]) -> Vec<&'a str> {
        if let Some(chain) = self.per_phase.get(&phase).filter(|c| !c.is_empty()) {
            return chain.iter().map(String::as_str).collect();
        }
        if !self.general.is_empty() {
            return self.general.iter().map(String::as_str).collect();
        }
        if let Some(default) = entries.iter().find(|e| *e == "default") {
            return vec![default.as_str()];
        }
        entries
            .first()
            .map(|e| vec![e.as_str()])
            .unwrap_or_default()
    }
}

/// Providers in fallback order: a phase restarts on the next one when the
/// current one fails.
#[derive(Clone)]
pub struct ProviderChain {
    providers: Vec<Arc<dyn LlmProvider>>,
}

impl ProviderChain {
    pub fn new(providers: Vec<Arc<dyn LlmProvider>>) -> Self {
        Self { providers }
    }

    pub fn single(provider: Arc<dyn LlmProvider>) -> Self {
        Self {
            providers: vec![provider],
        }
    }

    pub fn providers(&self) -> &[Arc<dyn LlmProvider>] {
        &self.providers
    }

    pub fn len(&self) -> usize {
        self.providers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.providers.is_empty()
    }

    /// Entry names, first choice first.
    pub fn names(&self) -> Vec<String> {
        self.providers.iter().map(|p| p.name().to_owned()).collect()
    }
}

impl fmt::Debug for ProviderChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ProviderChain").field(&self.names()).finish()
    }
}

/// The built providers of `providers.llm`, by entry name, in file order.
#[derive(Clone, Default)]
pub struct LlmRegistry {
    entries: IndexMap<String, Arc<dyn LlmProvider>>,
    names: Vec<String>,
}

impl LlmRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds every entry, sharing one HTTP client.
    pub fn from_configs<I>(configs: I) -> Result<Self, LlmError>
    where
        I: IntoIterator<Item = ProviderConfig>,
    {
        let client = http_client()?;
        let mut registry = Self::new();
        for config in configs {
            let provider = build_provider(&config, &client)?;
            registry.insert(provider);
        }
        Ok(registry)
    }

    /// Adds (or replaces) the provider under its own name.
    pub fn insert(&mut self, provider: Arc<dyn LlmProvider>) {
        let name = provider.name().to_owned();
        if self.entries.insert(name.clone(), provider).is_none() {
            self.names.push(name);
        }
    }

    /// Every provider replaced by `f` of it, under the same name (e.g.
    /// each wrapped in a [`crate::GuardedProvider`]).
    pub fn map(self, mut f: impl FnMut(Arc<dyn LlmProvider>) -> Arc<dyn LlmProvider>) -> Self {
        let mut out = Self::new();
        for (_, provider) in self.entries {
            out.insert(f(provider));
        }
        out
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn LlmProvider>> {
        self.entries.get(name).cloned()
    }

    /// Entry names in file order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The fallback chain serving `role` in `phase`.
    pub fn resolve(&self, role: &RoleLlm, phase: Phase) -> Result<ProviderChain, LlmError> {
        if self.entries.is_empty() {
            return Err(LlmError::NoProviders);
        }
        let providers = role
            .resolve(phase, &self.names)
            .into_iter()
            .map(|name| {
                self.get(name).ok_or_else(|| LlmError::UnknownProvider {
                    name: name.to_owned(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ProviderChain::new(providers))
    }
}

impl fmt::Debug for LlmRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LlmRegistry").field(&self.names).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn phase_choice_wins_over_the_role_llm() {
        let role = RoleLlm::chain(["fast"]).with_phase(Phase::Plan, ["smart", "fast"]);
        let e = entries(&["fast", "smart", "default"]);
        assert_eq!(role.resolve(Phase::Plan, &e), ["smart", "fast"]);
        assert_eq!(role.resolve(Phase::Execute, &e), ["fast"]);
        assert_eq!(role.resolve(Phase::Review, &e), ["fast"]);
    }

    #[test]
    fn without_a_role_choice_default_then_first_entry() {
        let none = RoleLlm::default();
        assert_eq!(
            none.resolve(Phase::Review, &entries(&["a", "default"])),
            ["default"]
        );
        assert_eq!(none.resolve(Phase::Review, &entries(&["a", "b"])), ["a"]);
        assert!(none.resolve(Phase::Plan, &[]).is_empty());
        // an auxiliary-only choice leaves the other phases to the fallbacks
        let aux = RoleLlm::default().with_phase(Phase::Auxiliary, ["cheap"]);
        let e = entries(&["big", "cheap"]);
        assert_eq!(aux.resolve(Phase::Auxiliary, &e), ["cheap"]);
        assert_eq!(aux.resolve(Phase::Execute, &e), ["big"]);
    }

    #[test]
    fn an_empty_phase_chain_falls_through() {
        let role = RoleLlm::chain(["x"]).with_phase(Phase::Plan, Vec::<String>::new());
        assert_eq!(role.resolve(Phase::Plan, &entries(&["x"])), ["x"]);
    }
}
