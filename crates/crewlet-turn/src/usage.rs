//! Tokens used, per agent and for the whole engine, readable at run time.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

use crewlet_core::AgentId;
use crewlet_llm::Usage;
use serde::Serialize;

/// Token totals of one agent or of the engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `input_tokens + output_tokens`.
    pub total_tokens: u64,
    /// Part of `input_tokens` read from a provider's prompt cache.
    pub cache_read_tokens: u64,
    /// Completions counted.
    pub call_count: u64,
}

impl TokenUsage {
    pub fn add(&mut self, usage: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(usage.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(usage.output_tokens);
        self.total_tokens = self.total_tokens.saturating_add(usage.total());
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(usage.cache_read_tokens);
        self.call_count += 1;
    }
}

/// One agent's line of the summary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AgentTokenUsage {
    pub handle: String,
    pub tokens: TokenUsage,
}

/// `summary.agents["<agent id>"].tokens`, `summary.engine`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UsageSummary {
    pub agents: BTreeMap<String, AgentTokenUsage>,
    pub engine: TokenUsage,
}

#[derive(Debug, Default)]
struct State {
    agents: HashMap<AgentId, AgentTokenUsage>,
    engine: TokenUsage,
}

/// Counts every completion, whether or not its budget charge passed: these
/// are tokens the provider billed.
#[derive(Debug, Default)]
pub struct UsageTracker {
    state: Mutex<State>,
}

impl UsageTracker {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    pub fn record(&self, agent_id: AgentId, handle: &str, usage: &Usage) {
        let mut state = self.lock();
        state.engine.add(usage);
        state
            .agents
            .entry(agent_id)
            .or_insert_with(|| AgentTokenUsage {
                handle: handle.to_owned(),
                tokens: TokenUsage::default(),
            })
            .tokens
            .add(usage);
    }

    pub fn agent(&self, agent_id: &AgentId) -> TokenUsage {
        self.lock()
            .agents
            .get(agent_id)
            .map(|a| a.tokens)
            .unwrap_or_default()
    }

    pub fn engine(&self) -> TokenUsage {
        self.lock().engine
    }

    pub fn summary(&self) -> UsageSummary {
        let state = self.lock();
        UsageSummary {
            agents: state
                .agents
                .iter()
                .map(|(id, a)| (id.to_string(), a.clone()))
                .collect(),
            engine: state.engine,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_agent_and_engine_totals() {
        let t = UsageTracker::new();
        let a = AgentId::for_seat("Acme", "a");
        let b = AgentId::for_seat("Acme", "b");
        let u = |i, o| Usage {
            input_tokens: i,
            output_tokens: o,
            cache_read_tokens: 1,
        };
        t.record(a, "a", &u(10, 5));
        t.record(a, "a", &u(20, 1));
        t.record(b, "b", &u(7, 3));
        assert_eq!(
            t.agent(&a),
            TokenUsage {
                input_tokens: 30,
                output_tokens: 6,
                total_tokens: 36,
                cache_read_tokens: 2,
                call_count: 2
            }
        );
        let s = t.summary();
        assert_eq!(s.engine.total_tokens, 46);
        assert_eq!(s.engine.call_count, 3);
        assert_eq!(s.agents[&b.to_string()].handle, "b");
        let json = serde_json::to_value(&s).unwrap_or_default();
        assert_eq!(json["agents"][a.to_string()]["tokens"]["input_tokens"], 30);
        assert_eq!(json["engine"]["total_tokens"], 46);
    }
}
