//! The token rollup over `agent_phase_completed` events.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use crewlet_core::payload::AgentPhaseCompleted;
use crewlet_core::{Event, EventPayload, EventType};
use serde::{Deserialize, Serialize};

/// Longest window of a breakdown, in days.
pub const MAX_BREAKDOWN_DAYS: u32 = 30;
/// Longest `by_turn` a caller may ask for.
pub const MAX_TURNS_IN_BREAKDOWN: u32 = 500;

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

/// What `GET /tokens/breakdown` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakdownQuery {
    /// The window, 1..=[`MAX_BREAKDOWN_DAYS`] days.
    pub since_days: u32,
    /// Only the phase events of this agent role.
    pub agent_role: Option<String>,
    /// Longest `by_turn`, 1..=[`MAX_TURNS_IN_BREAKDOWN`].
    pub recent_turns: u32,
}

impl BreakdownQuery {
    pub fn days(since_days: u32) -> Self {
        Self {
            since_days,
            agent_role: None,
            recent_turns: DEFAULT_RECENT_TURNS,
        }
    }
}

/// `by_phase` row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseGroup {
    pub phase: String,
    #[serde(flatten)]
    pub tokens: TokenTotals,
}

/// `by_model` row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelGroup {
    pub model: String,
    /// The provider the model was called through (first seen), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(flatten)]
    pub tokens: TokenTotals,
}

/// `by_worker` row: an auxiliary (learning, filtering) worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerGroup {
    pub worker: String,
    #[serde(flatten)]
    pub tokens: TokenTotals,
}

/// `by_agent` row: one agent role, with its split by phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentGroup {
    /// The event's `agent_role`, `unknown` when absent.
    pub role: String,
    /// The seat's handle; the store leaves it empty, the API fills it in
    /// from the organization.
    pub handle: String,
    /// The latest agent id seen for the role (empty when none).
    pub agent_id: String,
    #[serde(flatten)]
    pub tokens: TokenTotals,
    pub by_phase: BTreeMap<String, TokenTotals>,
}

/// `by_turn` row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnGroup {
    pub turn_id: String,
    pub role: String,
    pub handle: String,
    pub agent_id: String,
    /// Earliest and latest phase event of the turn (RFC 3339).
    pub started_at: String,
    pub ended_at: String,
    #[serde(flatten)]
    pub tokens: TokenTotals,
    pub by_phase: BTreeMap<String, TokenTotals>,
}

/// `GET /tokens/breakdown`: where the tokens went. `by_phase`, `by_model`,
/// `by_worker` and `by_agent` are sorted by total tokens, largest first;
/// `by_turn` by `ended_at`, newest first, at most `recent_turns` long.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenBreakdown {
    pub since_days: u32,
    /// The role asked for, empty for every role.
    pub agent_role: String,
    /// Start of the window.
    pub since: DateTime<Utc>,
    pub totals: TokenTotals,
    pub by_phase: Vec<PhaseGroup>,
    pub by_model: Vec<ModelGroup>,
    pub by_worker: Vec<WorkerGroup>,
    pub by_agent: Vec<AgentGroup>,
    pub by_turn: Vec<TurnGroup>,
    /// Timestamp of the latest event aggregated (RFC 3339, microseconds,
    /// UTC); empty when none matched.
    pub aggregated_through: String,
}

/// The finest grain the breakdown is computed from: the sums of the phase
/// events sharing every field below. A store may hand one per event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhaseGrain {
    pub agent_role: Option<String>,
    pub agent_id: Option<String>,
    pub phase: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub auxiliary: Option<String>,
    pub turn_id: Option<String>,
    pub first_at: DateTime<Utc>,
    pub last_at: DateTime<Utc>,
    pub tokens: TokenTotals,
}

/// Default `recent_turns`.
pub const DEFAULT_RECENT_TURNS: u32 = 50;

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
pub const MAX_PHASE_CALLS: u64 = crewlet_core::payload::lenient::MAX_PHASE_CALLS;

fn non_empty(s: String) -> Option<String> {
    Some(s).filter(|s| !s.is_empty())
}

impl PhaseTokens {
    /// `None` unless the event is an `agent_phase_completed`.
    pub fn from_event(event: &Event) -> Option<Self> {
        if event.event_type != EventType::AgentPhaseCompleted {
            return None;
        }
        // The payload's fields read leniently (see `AgentPhaseCompleted`);
        // a payload that is not even an object reads as empty.
        let p = if event.payload.is_object() {
            AgentPhaseCompleted::deserialize_payload(event).unwrap_or_default()
        } else {
            AgentPhaseCompleted::default()
        };
        Some(Self {
            phase: non_empty(p.phase),
            model: non_empty(p.model),
            provider: non_empty(p.provider),
            auxiliary: p.auxiliary,
            turn_id: non_empty(p.turn_id),
            input_tokens: p.input_tokens,
            output_tokens: p.output_tokens,
            calls: p.calls,
        })
    }

    /// The LLM calls this event counts for in a breakdown: the payload's
    /// `calls`, else one.
    pub fn llm_calls(&self) -> u64 {
        self.calls.unwrap_or(1)
    }
}

/// RFC 3339 with microseconds, as the store keeps time.
fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Largest total first, ties by name.
fn by_tokens<T>(rows: &mut [T], key: impl Fn(&T) -> (&TokenTotals, &str)) {
    rows.sort_by(|a, b| {
        let (ta, ka) = key(a);
        let (tb, kb) = key(b);
        tb.total_tokens
            .cmp(&ta.total_tokens)
            .then_with(|| ka.cmp(kb))
    });
}

impl PhaseGrain {
    /// One event's grain; `None` unless it is an `agent_phase_completed`.
    pub fn from_event(event: &Event) -> Option<Self> {
        let t = PhaseTokens::from_event(event)?;
        let mut tokens = TokenTotals::default();
        tokens.add(t.input_tokens, t.output_tokens, t.llm_calls());
        Some(Self {
            agent_role: event.agent_role.clone(),
            agent_id: event.agent_id.clone(),
            phase: t.phase,
            model: t.model,
            provider: t.provider,
            auxiliary: t.auxiliary,
            turn_id: t.turn_id,
            first_at: event.timestamp,
            last_at: event.timestamp,
            tokens,
        })
    }
}

fn add_totals(to: &mut TokenTotals, t: &TokenTotals) {
    to.input_tokens = to.input_tokens.saturating_add(t.input_tokens);
    to.output_tokens = to.output_tokens.saturating_add(t.output_tokens);
    to.total_tokens = to.total_tokens.saturating_add(t.total_tokens);
    to.calls = to.calls.saturating_add(t.calls);
}

/// The breakdown of `grains` (already filtered to the window and role).
pub fn rollup(
    grains: impl IntoIterator<Item = PhaseGrain>,
    query: &BreakdownQuery,
    since: DateTime<Utc>,
) -> TokenBreakdown {
    rollup_parts(grains, std::iter::empty(), query, since)
}

/// [`rollup`] from two parts: `grains` make every grouping (and `by_turn`
/// for those that carry a turn id), `turn_grains` only `by_turn`. A store
/// that sums the window without the turn dimension hands the grains of its
/// most recent turns here, so it never groups every turn of 30 days.
pub fn rollup_parts(
    grains: impl IntoIterator<Item = PhaseGrain>,
    turn_grains: impl IntoIterator<Item = PhaseGrain>,
    query: &BreakdownQuery,
    since: DateTime<Utc>,
) -> TokenBreakdown {
    struct Agent {
        group: AgentGroup,
        id_at: Option<DateTime<Utc>>,
    }
    struct Turn {
        group: TurnGroup,
        first: DateTime<Utc>,
        last: DateTime<Utc>,
        /// When the turn's role and agent id were seen.
        seen_at: DateTime<Utc>,
    }
    fn add_turn(turns: &mut HashMap<String, Turn>, g: &PhaseGrain, role: String, phase: String) {
        if let Some(turn_id) = &g.turn_id {
            let turn = turns.entry(turn_id.clone()).or_insert_with(|| Turn {
                group: TurnGroup {
                    turn_id: turn_id.clone(),
                    role: role.clone(),
                    handle: String::new(),
                    agent_id: g.agent_id.clone().unwrap_or_default(),
                    started_at: String::new(),
                    ended_at: String::new(),
                    tokens: TokenTotals::default(),
                    by_phase: BTreeMap::new(),
                },
                first: g.first_at,
                last: g.last_at,
                seen_at: g.first_at,
            });
            // The turn's role and agent are those of its first event.
            if g.first_at < turn.seen_at {
                turn.group.role = role.clone();
                turn.group.agent_id = g.agent_id.clone().unwrap_or_default();
                turn.seen_at = g.first_at;
            }
            turn.first = turn.first.min(g.first_at);
            turn.last = turn.last.max(g.last_at);
            add_totals(&mut turn.group.tokens, &g.tokens);
            add_totals(turn.group.by_phase.entry(phase).or_default(), &g.tokens);
        }
    }
    let unknown = || UNKNOWN.to_owned();
    let mut totals = TokenTotals::default();
    let mut phases: HashMap<String, TokenTotals> = HashMap::new();
    let mut models: HashMap<String, (Option<String>, DateTime<Utc>, TokenTotals)> = HashMap::new();
    let mut workers: HashMap<String, TokenTotals> = HashMap::new();
    let mut agents: HashMap<String, Agent> = HashMap::new();
    let mut turns: HashMap<String, Turn> = HashMap::new();
    let mut through: Option<DateTime<Utc>> = None;
    for g in grains {
        let phase = g.phase.clone().unwrap_or_else(unknown);
        let role = g.agent_role.clone().unwrap_or_else(unknown);
        through = through.max(Some(g.last_at));
        add_totals(&mut totals, &g.tokens);
        add_totals(phases.entry(phase.clone()).or_default(), &g.tokens);
        let model = models
            .entry(g.model.clone().unwrap_or_else(unknown))
            .or_insert((None, g.first_at, TokenTotals::default()));
        if g.provider.is_some() && (model.0.is_none() || g.first_at < model.1) {
            model.0 = g.provider.clone();
            model.1 = g.first_at;
        }
        add_totals(&mut model.2, &g.tokens);
        if let Some(worker) = &g.auxiliary {
            add_totals(workers.entry(worker.clone()).or_default(), &g.tokens);
        }
        let agent = agents.entry(role.clone()).or_insert_with(|| Agent {
            group: AgentGroup {
                role: role.clone(),
                handle: String::new(),
                agent_id: String::new(),
                tokens: TokenTotals::default(),
                by_phase: BTreeMap::new(),
            },
            id_at: None,
        });
        let newer = agent.id_at.is_none_or(|at| g.last_at >= at);
        if let Some(id) = g.agent_id.as_ref().filter(|_| newer) {
            agent.group.agent_id = id.clone();
            agent.id_at = Some(g.last_at);
        }
        add_totals(&mut agent.group.tokens, &g.tokens);
        add_totals(
            agent.group.by_phase.entry(phase.clone()).or_default(),
            &g.tokens,
        );
        add_turn(&mut turns, &g, role, phase);
    }
    for g in turn_grains {
        let phase = g.phase.clone().unwrap_or_else(unknown);
        let role = g.agent_role.clone().unwrap_or_else(unknown);
        add_turn(&mut turns, &g, role, phase);
    }
    let mut by_phase: Vec<PhaseGroup> = phases
        .into_iter()
        .map(|(phase, tokens)| PhaseGroup { phase, tokens })
        .collect();
    by_tokens(&mut by_phase, |g| (&g.tokens, &g.phase));
    let mut by_model: Vec<ModelGroup> = models
        .into_iter()
        .map(|(model, (provider, _, tokens))| ModelGroup {
            model,
            provider,
            tokens,
        })
        .collect();
    by_tokens(&mut by_model, |g| (&g.tokens, &g.model));
    let mut by_worker: Vec<WorkerGroup> = workers
        .into_iter()
        .map(|(worker, tokens)| WorkerGroup { worker, tokens })
        .collect();
    by_tokens(&mut by_worker, |g| (&g.tokens, &g.worker));
    let mut by_agent: Vec<AgentGroup> = agents.into_values().map(|a| a.group).collect();
    by_tokens(&mut by_agent, |g| (&g.tokens, &g.role));
    let mut by_turn: Vec<(DateTime<Utc>, TurnGroup)> = turns
        .into_values()
        .map(|mut t| {
            t.group.started_at = stamp(t.first);
            t.group.ended_at = stamp(t.last);
            (t.last, t.group)
        })
        .collect();
    by_turn.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.turn_id.cmp(&b.1.turn_id)));
    by_turn.truncate(usize::try_from(query.recent_turns).unwrap_or(usize::MAX));
    TokenBreakdown {
        since_days: query.since_days,
        agent_role: query.agent_role.clone().unwrap_or_default(),
        since,
        totals,
        by_phase,
        by_model,
        by_worker,
        by_agent,
        by_turn: by_turn.into_iter().map(|(_, t)| t).collect(),
        aggregated_through: through.map(stamp).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

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
