//! The token rollup over `agent_phase_completed` events.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use crewlet_core::{Event, EventType};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Longest window of a breakdown, in days.
pub const MAX_BREAKDOWN_DAYS: u32 = 30;
/// `by_turn` keeps the most expensive turns only.
pub const MAX_TURNS_IN_BREAKDOWN: usize = 50;

/// Input, output and total tokens over `calls` LLM calls (completions, as
/// the phase events report them; a phase event without `calls` counts as one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenTotals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    pub calls: u64,
}

impl TokenTotals {
    pub(crate) fn add(&mut self, input: u64, output: u64, calls: u64) {
        self.input_tokens = self.input_tokens.saturating_add(input);
        self.output_tokens = self.output_tokens.saturating_add(output);
        self.total_tokens = self
            .total_tokens
            .saturating_add(input.saturating_add(output));
        self.calls = self.calls.saturating_add(calls);
    }
}

/// One group of a breakdown: `key` is the phase, model, worker, agent id or
/// turn id; `label` adds the provider (models) or the agent role (agents, turns).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenGroup {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(flatten)]
    pub tokens: TokenTotals,
}

/// `GET /tokens/breakdown?since_days=N`: where the tokens went. Each list is
/// sorted by total tokens, largest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenBreakdown {
    pub since_days: u32,
    pub since: DateTime<Utc>,
    pub total: TokenTotals,
    pub by_phase: Vec<TokenGroup>,
    pub by_model: Vec<TokenGroup>,
    /// Auxiliary (learning, filtering) workers only.
    pub by_auxiliary: Vec<TokenGroup>,
    pub by_agent: Vec<TokenGroup>,
    /// The [`MAX_TURNS_IN_BREAKDOWN`] most expensive turns.
    pub by_turn: Vec<TokenGroup>,
}

/// Key of a group whose field is missing from the payload.
pub const UNKNOWN: &str = "unknown";

/// The rollup fields of one `agent_phase_completed` event, read from its
/// payload (`phase`, `model`, `provider`, `auxiliary`, `turn_id`,
/// `input_tokens`, `output_tokens`, `calls`). Stored as columns so the
/// breakdown never parses JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhaseTokens {
    pub phase: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub auxiliary: Option<String>,
    pub turn_id: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// LLM completions of the phase (payload `calls`, at most
    /// [`MAX_PHASE_CALLS`]); `None` when the payload has no usable count
    /// (older or foreign producers), which the breakdown counts as one.
    pub calls: Option<u64>,
}

/// Largest `calls` of one phase event kept (the column is an `integer`).
pub const MAX_PHASE_CALLS: u64 = i32::MAX as u64;

fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Token counts are non-negative integers; anything else counts as 0, and
/// counts are capped so they always fit a BIGINT.
fn count(v: Option<&Value>) -> u64 {
    let n = match v {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .unwrap_or(0),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
        _ => 0,
    };
    n.min(i64::MAX as u64)
}

/// A completion count: a non-negative integer (a number, or a string of
/// digits; fractions are cut), capped at [`MAX_PHASE_CALLS`]. Anything else
/// (absent, null, negative, not a number) is `None`.
fn calls(v: Option<&Value>) -> Option<u64> {
    let n = match v? {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))?,
        Value::String(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    Some(n.min(MAX_PHASE_CALLS))
}

impl PhaseTokens {
    /// `None` unless the event is an `agent_phase_completed`.
    pub fn from_event(event: &Event) -> Option<Self> {
        if event.event_type != EventType::AgentPhaseCompleted {
            return None;
        }
        let p = &event.payload;
        Some(Self {
            phase: text(p.get("phase")),
            model: text(p.get("model")),
            provider: text(p.get("provider")),
            auxiliary: text(p.get("auxiliary")),
            turn_id: text(p.get("turn_id")),
            input_tokens: count(p.get("input_tokens")),
            output_tokens: count(p.get("output_tokens")),
            calls: calls(p.get("calls")),
        })
    }

    /// The LLM calls this event counts for in a breakdown: the payload's
    /// `calls`, else one.
    pub fn llm_calls(&self) -> u64 {
        self.calls.unwrap_or(1)
    }
}

/// Sorts groups largest first (ties by key) and keeps at most `cap`.
pub(crate) fn finish(mut groups: Vec<TokenGroup>, cap: usize) -> Vec<TokenGroup> {
    groups.sort_by(|a, b| {
        b.tokens
            .total_tokens
            .cmp(&a.tokens.total_tokens)
            .then_with(|| a.key.cmp(&b.key))
    });
    groups.truncate(cap);
    groups
}

/// The breakdown computed in process, from events already filtered to the window.
pub(crate) fn rollup<'a>(
    events: impl Iterator<Item = &'a Event>,
    since_days: u32,
    since: DateTime<Utc>,
) -> TokenBreakdown {
    type Groups = HashMap<String, (Option<String>, TokenTotals)>;
    fn bump(groups: &mut Groups, key: String, label: Option<&String>, n: (u64, u64, u64)) {
        let entry = groups.entry(key).or_default();
        if entry.0.is_none() {
            entry.0 = label.cloned();
        }
        entry.1.add(n.0, n.1, n.2);
    }
    fn into_groups(groups: Groups, cap: usize) -> Vec<TokenGroup> {
        finish(
            groups
                .into_iter()
                .map(|(key, (label, tokens))| TokenGroup { key, label, tokens })
                .collect(),
            cap,
        )
    }
    let mut total = TokenTotals::default();
    let (mut phase, mut model, mut aux, mut agent, mut turn) = (
        Groups::new(),
        Groups::new(),
        Groups::new(),
        Groups::new(),
        Groups::new(),
    );
    for e in events {
        let Some(t) = PhaseTokens::from_event(e) else {
            continue;
        };
        let n = (t.input_tokens, t.output_tokens, t.llm_calls());
        total.add(n.0, n.1, n.2);
        let unknown = || UNKNOWN.to_owned();
        bump(&mut phase, t.phase.unwrap_or_else(unknown), None, n);
        bump(
            &mut model,
            t.model.unwrap_or_else(unknown),
            t.provider.as_ref(),
            n,
        );
        if let Some(worker) = t.auxiliary {
            bump(&mut aux, worker, None, n);
        }
        let agent_key = e
            .agent_id
            .clone()
            .or_else(|| e.agent_role.clone())
            .unwrap_or_else(unknown);
        bump(&mut agent, agent_key, e.agent_role.as_ref(), n);
        if let Some(turn_id) = t.turn_id {
            bump(&mut turn, turn_id, e.agent_role.as_ref(), n);
        }
    }
    TokenBreakdown {
        since_days,
        since,
        total,
        by_phase: into_groups(phase, usize::MAX),
        by_model: into_groups(model, usize::MAX),
        by_auxiliary: into_groups(aux, usize::MAX),
        by_agent: into_groups(agent, usize::MAX),
        by_turn: into_groups(turn, MAX_TURNS_IN_BREAKDOWN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn payload_fields_are_read_leniently() {
        let e = Event::new(EventType::AgentPhaseCompleted, "turn").with_payload(json!({
            "phase": "plan", "model": "gpt-x", "provider": "openai",
            "input_tokens": 120, "output_tokens": "30", "turn_id": 7, "calls": 4,
        }));
        let t = PhaseTokens::from_event(&e);
        assert_eq!(
            t,
            Some(PhaseTokens {
                phase: Some("plan".into()),
                model: Some("gpt-x".into()),
                provider: Some("openai".into()),
                auxiliary: None,
                turn_id: Some("7".into()),
                input_tokens: 120,
                output_tokens: 30,
                calls: Some(4),
            })
        );
        let bad = Event::new(EventType::AgentPhaseCompleted, "turn")
            .with_payload(json!({"input_tokens": -5, "output_tokens": 1e300}));
        let t = PhaseTokens::from_event(&bad).unwrap_or_default();
        assert_eq!(t.input_tokens, 0);
        assert_eq!(t.output_tokens, i64::MAX as u64);
        assert_eq!(t.calls, None);
        assert_eq!(t.llm_calls(), 1);
        assert!(PhaseTokens::from_event(&Event::new(EventType::TaskStarted, "x")).is_none());
    }

    #[test]
    fn calls_come_from_the_payload_and_default_to_one() {
        let calls_of = |calls: Value| {
            let e = Event::new(EventType::AgentPhaseCompleted, "turn")
                .with_payload(json!({"input_tokens": 1, "calls": calls}));
            PhaseTokens::from_event(&e).map(|t| (t.calls, t.llm_calls()))
        };
        assert_eq!(calls_of(json!(3)), Some((Some(3), 3)));
        assert_eq!(calls_of(json!(0)), Some((Some(0), 0)));
        assert_eq!(calls_of(json!(2.0)), Some((Some(2), 2)));
        assert_eq!(calls_of(json!(" 5 ")), Some((Some(5), 5)));
        assert_eq!(
            calls_of(json!(u64::MAX)),
            Some((Some(MAX_PHASE_CALLS), MAX_PHASE_CALLS))
        );
        for unusable in [json!(null), json!(-1), json!("many"), json!([2]), json!({})] {
            assert_eq!(calls_of(unusable.clone()), Some((None, 1)), "{unusable}");
        }
        let absent = Event::new(EventType::AgentPhaseCompleted, "turn")
            .with_payload(json!({"input_tokens": 1}));
        assert_eq!(
            PhaseTokens::from_event(&absent).map(|t| t.llm_calls()),
            Some(1)
        );
    }
}
