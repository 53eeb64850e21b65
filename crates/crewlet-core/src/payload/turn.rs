//! The payloads of the events a turn emits (`crewlet-turn` writes them).
//!
//! Field order is the stored key order. `Option` fields are written as
//! `null` when unset, as the events always were. [`AgentPhaseCompleted`] is
//! also read from foreign producers (the token breakdown), so its fields
//! read leniently (see [`super::lenient`]); the others are read strictly.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{EventPayload, lenient};
use crate::EventType;

/// One tool call as it ran (in `agent_phase_completed` and
/// `agent_turn_progress`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolExecution {
    pub name: String,
    pub ok: bool,
    pub duration_ms: u64,
}

/// What woke the seat, as `task_started` and `agent_turn_completed` carry
/// it: the trigger without its full content (`summary` is at most 200
/// characters, then `...`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerSummary {
    pub source: String,
    pub sender: Option<String>,
    pub channel: Option<String>,
    pub task_id: String,
    pub delegation_depth: u32,
    pub summary: String,
}

/// `task_started`: a turn began.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStarted {
    pub turn_id: Uuid,
    pub trigger: TriggerSummary,
}

/// `agent_phase_started`: a phase began on the first provider of its chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentPhaseStarted {
    /// `plan`, `execute` or `review`.
    pub phase: String,
    pub turn_id: Uuid,
    pub iteration: u32,
    pub provider: String,
    pub model: String,
}

/// `agent_phase_completed`: a phase ended (completed or failed), with what
/// it cost. Read by the token breakdown from any producer: counts may be
/// numbers, floats or digit strings (anything else is 0), text may be a
/// string or a number (anything else is empty), `calls` is `None` when
/// absent or unusable, and `auxiliary` names the learning worker of an
/// auxiliary call (not written by turns).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentPhaseCompleted {
    #[serde(default, deserialize_with = "lenient::text")]
    pub phase: String,
    /// The model that answered last (the provider's configured model if
    /// none did).
    #[serde(default, deserialize_with = "lenient::text")]
    pub model: String,
    #[serde(default, deserialize_with = "lenient::text")]
    pub provider: String,
    #[serde(default, deserialize_with = "lenient::count")]
    pub input_tokens: u64,
    #[serde(default, deserialize_with = "lenient::count")]
    pub output_tokens: u64,
    #[serde(default, deserialize_with = "lenient::count")]
    pub cache_read_tokens: u64,
    /// Completions of the phase, at most [`lenient::MAX_PHASE_CALLS`].
    #[serde(default, deserialize_with = "lenient::calls")]
    pub calls: Option<u64>,
    #[serde(default, deserialize_with = "lenient::count")]
    pub duration_ms: u64,
    #[serde(default, deserialize_with = "lenient::or_default")]
    pub tool_executions: Vec<ToolExecution>,
    /// The turn's id (a UUID when a turn wrote it).
    #[serde(default, deserialize_with = "lenient::text")]
    pub turn_id: String,
    #[serde(default, deserialize_with = "lenient::count_u32")]
    pub iteration: u32,
    /// `ok` or `failed`.
    #[serde(default, deserialize_with = "lenient::text")]
    pub outcome: String,
    #[serde(
        default,
        deserialize_with = "lenient::opt_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub auxiliary: Option<String>,
    /// What the phase asked the model (system prompt and messages, secrets
    /// redacted, at most 32 KiB): the dashboard's LLM inspect.
    #[serde(
        default,
        deserialize_with = "lenient::opt_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub prompt: Option<String>,
    /// What the model answered last (text and tool calls, redacted, at
    /// most 32 KiB).
    #[serde(
        default,
        deserialize_with = "lenient::opt_text",
        skip_serializing_if = "Option::is_none"
    )]
    pub response: Option<String>,
}

/// `agent_turn_completed`: a turn ended, however it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentTurnCompleted {
    pub turn_id: Uuid,
    /// `done`, `direct`, `skip` or `failed`.
    pub decision: String,
    pub iterations: u32,
    /// Models that answered, first use first.
    pub models: Vec<String>,
    pub trigger: TriggerSummary,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub total_tokens: u64,
    pub duration_ms: u64,
}

/// `task_completed`: the turn succeeded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskCompleted {
    pub turn_id: Uuid,
    pub decision: String,
    pub final_artifact: String,
}

/// `task_failed`: the turn failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskFailed {
    pub turn_id: Uuid,
    /// `budget_exhausted`, `llm_unavailable`, `store_unavailable` or a
    /// guard's kind.
    pub reason: String,
    pub detail: String,
    /// The task will run again later (`store_unavailable`).
    pub will_retry: bool,
}

/// `turn.guard_breach`: a guard stopped the turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnGuardBreach {
    /// `max_iter`, `stall`, `depth_cap`, `timeout` or `unhandled`.
    pub kind: String,
    pub detail: String,
    pub turn_id: Uuid,
    pub iteration: u32,
}

/// `provider_fallback`: a provider failed and the phase restarts on the
/// next one of the chain.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderFallback {
    pub phase: String,
    pub from: String,
    pub to: String,
    /// The model of `to`, which the phase now runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_model: Option<String>,
    pub error: String,
    pub error_class: String,
    pub turn_id: Uuid,
    pub iteration: u32,
}

/// `budget_exhausted`: a token budget refused a charge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetExhausted {
    /// `org` or `agent`.
    pub budget_type: String,
    pub used_tokens: u64,
    pub max_tokens: u64,
}

/// `budget_warning`: a token budget reached its warning threshold
/// (`budget_policy.warn_at` of its cap), once per budget period.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BudgetWarning {
    /// `org`, `unit` or `agent`.
    pub budget_type: String,
    /// The ledger scope: `org`, `unit:{name}` or `agent:{agent id}`.
    pub scope: String,
    pub used_tokens: u64,
    pub max_tokens: u64,
    /// The fraction of the cap that warns.
    pub warn_at: f64,
}

/// `llm_unavailable`: no provider of the chain could serve the phase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmUnavailable {
    pub phase: String,
    /// The chain tried, first choice first (empty when none resolved).
    pub providers: Vec<String>,
    pub error: String,
    pub error_class: String,
    pub turn_id: Uuid,
    pub iteration: u32,
}

/// `agent_turn_progress` (stream-only): what a phase has produced so far.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentTurnProgress {
    pub turn_id: Uuid,
    pub phase: String,
    pub iteration: u32,
    pub role: String,
    pub response: String,
    pub tool_executions: Vec<ToolExecution>,
}

/// `phase.tool_skill_blocked`: a call was held back until the required
/// tool skills covering its tool are loaded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSkillBlocked {
    pub turn_id: Uuid,
    pub phase: String,
    pub iteration: u32,
    pub tool: String,
    /// Keys of the skills to load.
    pub skills: Vec<String>,
}

/// `phase.tool_activated`: a phase made a tool of the seat's catalogue
/// callable with `activate_tool` (in Execute: the plan missed it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolActivated {
    pub turn_id: Uuid,
    pub phase: String,
    pub iteration: u32,
    pub tool: String,
}

/// `execute.missing_tool`: Execute called a tool the seat does not have at
/// all (a misspelt or invented name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecuteMissingTool {
    pub turn_id: Uuid,
    pub iteration: u32,
    pub tool: String,
}

macro_rules! bind {
    ($($payload:ident => $event:ident),* $(,)?) => {
        $(impl EventPayload for $payload {
            const EVENT_TYPE: EventType = EventType::$event;
        })*
    };
}

/// `effect_uncertain`: a resumed turn met a tool call that had started
/// before the interruption and has no recorded result. The tool is not
/// idempotent, so it was not run again; the model was told its effect is
/// unknown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectUncertain {
    pub turn_id: Uuid,
    pub phase: String,
    pub iteration: u32,
    pub tool: String,
    /// The call's step in the turn's journal.
    pub step: i32,
}

bind! {
    EffectUncertain => EffectUncertain,
    TaskStarted => TaskStarted,
    AgentPhaseStarted => AgentPhaseStarted,
    AgentPhaseCompleted => AgentPhaseCompleted,
    AgentTurnCompleted => AgentTurnCompleted,
    TaskCompleted => TaskCompleted,
    TaskFailed => TaskFailed,
    TurnGuardBreach => TurnGuardBreach,
    ProviderFallback => ProviderFallback,
    BudgetExhausted => BudgetExhausted,
    BudgetWarning => BudgetWarning,
    LlmUnavailable => LlmUnavailable,
    AgentTurnProgress => AgentTurnProgress,
    ToolSkillBlocked => ToolSkillBlocked,
    ToolActivated => ToolActivated,
    ExecuteMissingTool => ExecuteMissingTool,
}

#[cfg(test)]
mod tests {
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    use super::*;
    use crate::Event;

    const TURN: &str = "01890a5d-ac96-774b-bcce-b302099a8057";

    /// `sample` (as the turn engine writes it) reads as `T` and writes back
    /// as the same JSON, key order included; the event it builds has `T`'s
    /// type and reads back.
    fn round_trip<T: EventPayload + std::fmt::Debug + PartialEq>(sample: Value) -> T {
        let typed: T = serde_json::from_value(sample.clone())
            .unwrap_or_else(|e| panic!("{}: {e}", T::EVENT_TYPE));
        assert_eq!(typed.to_payload(), sample, "{}", T::EVENT_TYPE);
        assert_eq!(
            serde_json::to_string(&typed.to_payload()).ok(),
            serde_json::to_string(&sample).ok(),
            "{}: key order",
            T::EVENT_TYPE
        );
        let event = typed.to_event("turn");
        assert_eq!(event.event_type, T::EVENT_TYPE);
        assert_eq!(T::read(&event).as_ref(), Some(&typed));
        typed
    }

    fn trigger() -> Value {
        json!({"source": "slack", "sender": null, "channel": "C1", "task_id": "t-1",
               "delegation_depth": 0, "summary": "write the report..."})
    }

    fn strict<T: DeserializeOwned>(v: Value) -> Option<T> {
        serde_json::from_value(v).ok()
    }

    #[test]
    fn task_started() {
        let t: TaskStarted = round_trip(json!({"turn_id": TURN, "trigger": trigger()}));
        assert_eq!(t.trigger.sender, None);
        assert_eq!(t.trigger.channel.as_deref(), Some("C1"));
    }

    #[test]
    fn agent_phase_started() {
        let p: AgentPhaseStarted = round_trip(json!({"phase": "plan", "turn_id": TURN,
            "iteration": 1, "provider": "main", "model": "gpt-4o"}));
        assert_eq!(p.phase, "plan");
    }

    #[test]
    fn agent_phase_completed() {
        let p: AgentPhaseCompleted = round_trip(json!({
            "phase": "execute",
            "model": "gpt-4o-2024",
            "provider": "main",
            "input_tokens": 1200,
            "output_tokens": 80,
            "cache_read_tokens": 1000,
            "calls": 3,
            "duration_ms": 5400,
            "tool_executions": [{"name": "search", "ok": true, "duration_ms": 12},
                                {"name": "write", "ok": false, "duration_ms": 0}],
            "turn_id": TURN,
            "iteration": 2,
            "outcome": "ok",
        }));
        assert_eq!((p.calls, p.auxiliary), (Some(3), None));
        assert_eq!(p.tool_executions.len(), 2);
        // an auxiliary worker's event keeps its extra field
        let aux: AgentPhaseCompleted = round_trip(json!({
            "phase": "auxiliary", "model": "m", "provider": "p", "input_tokens": 1,
            "output_tokens": 1, "cache_read_tokens": 0, "calls": 1, "duration_ms": 1,
            "tool_executions": [], "turn_id": "", "iteration": 0, "outcome": "ok",
            "auxiliary": "reflection",
        }));
        assert_eq!(aux.auxiliary.as_deref(), Some("reflection"));
    }

    #[test]
    fn agent_phase_completed_reads_foreign_payloads() {
        let e = Event::new(EventType::AgentPhaseCompleted, "learning").with_payload(json!({
            "phase": 3, "input_tokens": "40", "output_tokens": 2.9, "calls": "x",
            "tool_executions": "none", "iteration": -1, "extra": true,
        }));
        let p = AgentPhaseCompleted::from_event(&e).unwrap_or_default();
        assert_eq!(p.phase, "3");
        assert_eq!((p.input_tokens, p.output_tokens, p.calls), (40, 2, None));
        assert!(p.tool_executions.is_empty() && p.model.is_empty());
        assert_eq!(p.iteration, 0);
    }

    #[test]
    fn agent_turn_completed() {
        let t: AgentTurnCompleted = round_trip(json!({
            "turn_id": TURN,
            "decision": "done",
            "iterations": 1,
            "models": ["gpt-4o-2024"],
            "trigger": trigger(),
            "input_tokens": 3000,
            "output_tokens": 200,
            "cache_read_tokens": 1000,
            "total_tokens": 3200,
            "duration_ms": 9000,
        }));
        assert_eq!(t.decision, "done");
    }

    #[test]
    fn task_completed_and_failed() {
        round_trip::<TaskCompleted>(
            json!({"turn_id": TURN, "decision": "direct", "final_artifact": "the report"}),
        );
        let f: TaskFailed = round_trip(json!({"turn_id": TURN, "reason": "store_unavailable",
            "detail": "database down", "will_retry": true}));
        assert!(f.will_retry);
    }

    #[test]
    fn turn_guard_breach() {
        round_trip::<TurnGuardBreach>(json!({"kind": "stall", "detail": "same artifact",
            "turn_id": TURN, "iteration": 2}));
    }

    #[test]
    fn provider_fallback_and_llm_unavailable() {
        round_trip::<ProviderFallback>(json!({"phase": "review", "from": "a", "to": "b",
            "error": "rate limited", "error_class": "rate_limit", "turn_id": TURN,
            "iteration": 1}));
        let u: LlmUnavailable = round_trip(json!({"phase": "plan", "providers": [],
            "error": "no llm providers are configured", "error_class": "config",
            "turn_id": TURN, "iteration": 1}));
        assert!(u.providers.is_empty());
    }

    #[test]
    fn budget_exhausted() {
        round_trip::<BudgetExhausted>(
            json!({"budget_type": "org", "used_tokens": 1000, "max_tokens": 900}),
        );
    }

    #[test]
    fn agent_turn_progress() {
        round_trip::<AgentTurnProgress>(json!({"turn_id": TURN, "phase": "execute",
            "iteration": 1, "role": "Writer", "response": "drafting",
            "tool_executions": [{"name": "search", "ok": true, "duration_ms": 3}]}));
    }

    #[test]
    fn strict_payloads_refuse_other_shapes() {
        assert!(strict::<TaskStarted>(json!({"turn_id": "nope", "trigger": trigger()})).is_none());
        assert!(strict::<BudgetExhausted>(json!({"budget_type": "org"})).is_none());
        let wrong = Event::new(EventType::TaskStarted, "turn");
        assert!(matches!(
            AgentPhaseStarted::from_event(&wrong),
            Err(crate::PayloadError::WrongType { .. })
        ));
    }
}
