//! What the dashboard shows live, derived from events alone (so the
//! standalone API, which sees the engine only through the queue, shows the
//! same as the embedded one): each seat's state and running turn, the
//! attention queue, and today's throughput and spend.

use std::collections::{BTreeMap, HashSet, VecDeque};

use chrono::{DateTime, Utc};
use crewlet_config::{Organization, SeatKind};
use crewlet_core::payload::{
    AgentPhaseStarted, AgentTurnCompleted, AgentTurnProgress, EventPayload, ProviderFallback,
    TaskFailed, TaskStarted, ToolExecution,
};
use crewlet_core::{Event, EventType};
use serde::Serialize;

use super::budget::{self, BudgetLive, Budgets};

/// Most attention items kept (newest first).
pub const ATTENTION_CAP: usize = 50;

/// The running turn of a seat.
#[derive(Clone, Debug, Serialize)]
pub struct LiveTurn {
    pub turn_id: String,
    pub phase: Option<String>,
    pub iteration: u32,
    pub model: Option<String>,
    /// What the phase has produced so far (`agent_turn_progress`).
    pub response: String,
    pub tool_executions: Vec<ToolExecution>,
    pub updated_at: DateTime<Utc>,
}

impl LiveTurn {
    /// A turn that has started and produced nothing yet.
    fn new(turn_id: uuid::Uuid, at: DateTime<Utc>) -> Self {
        Self {
            turn_id: turn_id.to_string(),
            phase: None,
            iteration: 0,
            model: None,
            response: String::new(),
            tool_executions: Vec::new(),
            updated_at: at,
        }
    }
}

/// The task a seat is working on.
#[derive(Clone, Debug, Serialize)]
pub struct LiveTask {
    pub task_id: String,
    pub summary: String,
    pub trace_id: Option<String>,
    pub started_at: DateTime<Utc>,
}

/// A coding agent a seat started in a sandbox (`run_sandbox`), until its
/// run ends or its answer resumes the turn.
#[derive(Clone, Debug, Serialize)]
pub struct LiveSandbox {
    pub run_id: String,
    pub task_id: String,
    pub coding_agent: String,
    pub backend: String,
    /// `running`, or `awaiting_answer` (parked on a person's answer; the
    /// seat takes other work meanwhile).
    pub status: &'static str,
    pub question: Option<String>,
    pub started_at: DateTime<Utc>,
}

/// Why a seat stopped.
#[derive(Clone, Debug, Serialize)]
pub struct LastError {
    pub reason: String,
    pub detail: String,
    pub at: DateTime<Utc>,
    pub event_id: String,
}

/// What the events say of one seat.
#[derive(Clone, Debug, Default)]
struct Overlay {
    state: Option<&'static str>,
    task: Option<LiveTask>,
    turn: Option<LiveTurn>,
    last_error: Option<LastError>,
    sandbox: Option<LiveSandbox>,
    tokens_today: u64,
    /// The newest event that moved the state. On Pulsar each event type is
    /// a topic of its own, so events of one seat may arrive out of order;
    /// an older one (by its time-ordered id) no longer moves the state.
    moved_by: Option<uuid::Uuid>,
}

/// One seat as the dashboard shows it: the company's seat with its overlay.
#[derive(Clone, Debug, Serialize)]
pub struct SeatLive {
    pub handle: String,
    pub id: String,
    pub name: String,
    pub kind: &'static str,
    pub unit_path: Vec<String>,
    pub manager: Option<String>,
    pub reports: Vec<String>,
    /// `idle`, `working`, `awaiting_sandbox` (its turn waits for a coding
    /// agent), `failed`, `afk` or `offline`.
    pub state: &'static str,
    pub task: Option<LiveTask>,
    pub turn: Option<LiveTurn>,
    pub last_error: Option<LastError>,
    /// Its coding agent's run, running or parked on a question.
    pub sandbox: Option<LiveSandbox>,
    pub budget: Option<SeatBudget>,
    pub tokens_today: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SeatBudget {
    pub used: u64,
    pub max: u64,
}

/// Something a founder should look at.
#[derive(Clone, Debug, Serialize)]
pub struct Attention {
    pub kind: &'static str,
    pub handle: Option<String>,
    pub summary: String,
    pub at: DateTime<Utc>,
    /// The event that raised it (`null` for `budget_near`, which the
    /// ledger raises).
    pub event_id: Option<String>,
    pub trace_id: Option<String>,
}

/// Today's figures (since midnight UTC).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Today {
    pub since: Option<DateTime<Utc>>,
    pub turns: u64,
    pub tasks_completed: u64,
    pub tasks_failed: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
}

/// Whether an event reports work that did not succeed.
pub fn is_failure(event: &Event) -> bool {
    match &event.event_type {
        EventType::TaskFailed
        | EventType::LlmUnavailable
        | EventType::BudgetExhausted
        | EventType::TurnGuardBreach
        | EventType::McpServerFailed => true,
        EventType::AgentPhaseCompleted => {
            event.payload.get("outcome").and_then(|v| v.as_str()) == Some("failed")
        }
        _ => false,
    }
}

/// The projection.
#[derive(Default)]
pub struct Projection {
    seats: BTreeMap<String, Overlay>,
    attention: VecDeque<Attention>,
    today: Today,
    budgets: Budgets,
    /// Scopes already reported as `budget_near`.
    near: HashSet<String>,
}

fn midnight(at: DateTime<Utc>) -> DateTime<Utc> {
    at.date_naive()
        .and_hms_opt(0, 0, 0)
        .map(|d| d.and_utc())
        .unwrap_or(at)
}

impl Projection {
    /// Applies one event; the handle of the seat whose state changed.
    pub fn apply(&mut self, event: &Event) -> Option<String> {
        self.roll_day(event.timestamp);
        let handle = event.agent_handle().map(str::to_owned);
        if is_failure(event) && event.event_type != EventType::AgentPhaseCompleted {
            self.attend(event, handle.clone());
        }
        let handle = handle?;
        let seat = self.seats.entry(handle.clone()).or_default();
        let stale = seat.moved_by.is_some_and(|newest| event.id < newest);
        match &event.event_type {
            EventType::AgentTurnCompleted => {}
            EventType::TaskCompleted | EventType::TaskFailed if stale => {
                match event.event_type {
                    EventType::TaskCompleted => self.today.tasks_completed += 1,
                    _ => self.today.tasks_failed += 1,
                }
                return None;
            }
            EventType::TaskStarted
            | EventType::AgentPhaseStarted
            | EventType::ProviderFallback
            | EventType::AgentTurnProgress
            | EventType::TaskCompleted
            | EventType::TaskFailed
            | EventType::BudgetExhausted
            | EventType::LlmUnavailable
            | EventType::SandboxRunStarted
            | EventType::SandboxClarificationRequested
            | EventType::SandboxRunCompleted => {
                if stale {
                    return None;
                }
                seat.moved_by = Some(event.id);
            }
            _ => return None,
        }
        // A parked run's task that starts or ends again: its answer came.
        if matches!(
            event.event_type,
            EventType::TaskStarted | EventType::TaskCompleted | EventType::TaskFailed
        ) && seat
            .sandbox
            .as_ref()
            .is_some_and(|b| Some(&b.task_id) == event.task_id.as_ref())
        {
            seat.sandbox = None;
        }
        match &event.event_type {
            EventType::TaskStarted => {
                let started = TaskStarted::from_event(event).ok();
                seat.state = Some("working");
                seat.last_error = None;
                seat.task = Some(LiveTask {
                    task_id: event.task_id.clone().unwrap_or_default(),
                    summary: started
                        .as_ref()
                        .map(|s| s.trigger.summary.clone())
                        .unwrap_or_else(|| event.summary.clone()),
                    trace_id: event.trace_id.map(|t| t.to_string()),
                    started_at: event.timestamp,
                });
                seat.turn = started.map(|s| LiveTurn::new(s.turn_id, event.timestamp));
            }
            EventType::AgentPhaseStarted => {
                let p = AgentPhaseStarted::from_event(event).ok()?;
                seat.state = Some("working");
                let turn = seat
                    .turn
                    .get_or_insert_with(|| LiveTurn::new(p.turn_id, event.timestamp));
                turn.phase = Some(p.phase);
                turn.iteration = p.iteration;
                turn.model = Some(p.model);
                turn.response.clear();
                turn.tool_executions.clear();
                turn.updated_at = event.timestamp;
            }
            // The phase restarted on the next provider: its model shows.
            EventType::ProviderFallback => {
                let p = ProviderFallback::from_event(event).ok()?;
                let turn = seat.turn.as_mut()?;
                if turn.turn_id != p.turn_id.to_string() {
                    return None;
                }
                if let Some(model) = p.to_model {
                    turn.model = Some(model);
                }
                turn.response.clear();
                turn.updated_at = event.timestamp;
            }
            EventType::AgentTurnProgress => {
                let p = AgentTurnProgress::from_event(event).ok()?;
                let turn = seat.turn.as_mut()?;
                if turn.turn_id != p.turn_id.to_string() {
                    return None;
                }
                turn.phase = Some(p.phase);
                turn.iteration = p.iteration;
                turn.response = p.response;
                turn.tool_executions = p.tool_executions;
                turn.updated_at = event.timestamp;
            }
            EventType::AgentTurnCompleted => {
                let t = AgentTurnCompleted::from_event(event).ok()?;
                seat.tokens_today += t.total_tokens;
                self.today.turns += 1;
                self.today.input_tokens += t.input_tokens;
                self.today.output_tokens += t.output_tokens;
                self.today.total_tokens += t.total_tokens;
                return None;
            }
            EventType::TaskCompleted => {
                self.today.tasks_completed += 1;
                seat.state = Some("idle");
                seat.task = None;
                seat.turn = None;
            }
            EventType::TaskFailed => {
                let f = TaskFailed::from_event(event).ok();
                self.today.tasks_failed += 1;
                let reason = f.as_ref().map(|f| f.reason.clone()).unwrap_or_default();
                seat.state = Some(match reason.as_str() {
                    "budget_exhausted" | "llm_unavailable" => "afk",
                    _ => "failed",
                });
                seat.last_error = Some(LastError {
                    reason,
                    detail: f.map(|f| f.detail).unwrap_or_default(),
                    at: event.timestamp,
                    event_id: event.id.to_string(),
                });
                seat.task = None;
                seat.turn = None;
            }
            EventType::BudgetExhausted | EventType::LlmUnavailable => {
                seat.state = Some("afk");
            }
            EventType::SandboxRunStarted => {
                let p = &event.payload;
                let text = |k: &str| p[k].as_str().unwrap_or_default().to_owned();
                seat.state = Some("awaiting_sandbox");
                seat.sandbox = Some(LiveSandbox {
                    run_id: text("run_id"),
                    task_id: event.task_id.clone().unwrap_or_default(),
                    coding_agent: text("coding_agent"),
                    backend: text("backend"),
                    status: "running",
                    question: None,
                    started_at: event.timestamp,
                });
            }
            EventType::SandboxClarificationRequested => {
                // Parked: the seat is free until the answer comes.
                seat.state = Some("idle");
                seat.task = None;
                seat.turn = None;
                if let Some(b) = seat.sandbox.as_mut() {
                    b.status = "awaiting_answer";
                    b.question = event.payload["question"].as_str().map(str::to_owned);
                }
            }
            EventType::SandboxRunCompleted => {
                // The turn goes on with the run's report.
                seat.state = Some("working");
                seat.sandbox = None;
            }
            _ => return None,
        }
        Some(handle)
    }

    fn roll_day(&mut self, at: DateTime<Utc>) {
        let day = midnight(at);
        match self.today.since {
            Some(since) if since >= day => {}
            _ => {
                self.today = Today {
                    since: Some(day),
                    ..Today::default()
                };
                for s in self.seats.values_mut() {
                    s.tokens_today = 0;
                }
            }
        }
    }

    fn attend(&mut self, event: &Event, handle: Option<String>) {
        let kind = match &event.event_type {
            EventType::TaskFailed => "task_failed",
            EventType::TurnGuardBreach => "guard_breach",
            EventType::BudgetExhausted => "budget_exhausted",
            EventType::LlmUnavailable => "llm_unavailable",
            EventType::McpServerFailed => "mcp_server_failed",
            _ => return,
        };
        self.attention.push_front(Attention {
            kind,
            handle,
            summary: event.summary.clone(),
            at: event.timestamp,
            event_id: Some(event.id.to_string()),
            trace_id: event.trace_id.map(|t| t.to_string()),
        });
        self.attention.truncate(ATTENTION_CAP);
    }

    /// Takes a new reading of the ledger: what changed, with a
    /// `budget_near` attention item for each cap that crossed 80%.
    pub fn set_budgets(&mut self, new: Budgets, at: DateTime<Utc>) -> budget::Change {
        let change = budget::diff(&self.budgets, &new, &mut self.near);
        for scope in &change.near {
            let (handle, b, whose) = match new.seats.get(scope) {
                Some(b) if scope != crewlet_store::ORG_SCOPE => {
                    (Some(scope.clone()), b, format!("{scope} has"))
                }
                _ => (None, &new.org, "the company has".to_owned()),
            };
            let pct = b.used.saturating_mul(100) / b.max.max(1);
            self.attention.push_front(Attention {
                kind: "budget_near",
                handle,
                summary: format!(
                    "{whose} used {pct}% of its token budget ({} of {})",
                    b.used, b.max
                ),
                at,
                event_id: None,
                trace_id: None,
            });
        }
        self.attention.truncate(ATTENTION_CAP);
        self.budgets = new;
        change
    }

    /// The company's budget as last read.
    pub fn org_budget(&self) -> &BudgetLive {
        &self.budgets.org
    }

    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    /// Every seat of `org` with its overlay (seats the events name but the
    /// company no longer has are left out).
    pub fn seats(&self, org: Option<&Organization>) -> Vec<SeatLive> {
        let Some(org) = org else {
            return Vec::new();
        };
        org.seats().iter().map(|s| self.seat_live(s)).collect()
    }

    fn seat_live(&self, s: &crewlet_config::Seat) -> SeatLive {
        let overlay = self.seats.get(&s.handle).cloned().unwrap_or_default();
        let human = s.kind == SeatKind::Human;
        SeatLive {
            handle: s.handle.clone(),
            id: s.agent_id.to_string(),
            name: s.name.clone(),
            kind: if human { "human" } else { "agent" },
            unit_path: s.unit_path.clone(),
            manager: s.manager.clone(),
            reports: s.reports.clone(),
            state: if human {
                "offline"
            } else {
                overlay.state.unwrap_or("idle")
            },
            task: overlay.task,
            turn: overlay.turn,
            last_error: overlay.last_error,
            sandbox: overlay.sandbox,
            budget: (s.role.token_budget > 0).then(|| SeatBudget {
                used: self.budgets.seats.get(&s.handle).map_or(0, |b| b.used),
                max: s.role.token_budget,
            }),
            tokens_today: overlay.tokens_today,
        }
    }

    /// One seat of `org`, live.
    pub fn seat(&self, org: &Organization, handle: &str) -> Option<SeatLive> {
        org.seat(handle).map(|s| self.seat_live(s))
    }

    pub fn attention(&self) -> Vec<Attention> {
        self.attention.iter().cloned().collect()
    }

    pub fn today(&self) -> Today {
        self.today.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewlet_core::payload::TriggerSummary;

    fn ev(kind: EventType, payload: serde_json::Value) -> Event {
        let mut e = Event::new(kind, "test").with_agent_handle("eng");
        e.payload = payload;
        e
    }

    fn started(turn: uuid::Uuid) -> Event {
        let p = TaskStarted {
            turn_id: turn,
            trigger: TriggerSummary {
                source: "api".into(),
                sender: None,
                channel: None,
                task_id: "t".into(),
                delegation_depth: 0,
                summary: "work".into(),
            },
        };
        ev(EventType::TaskStarted, p.to_payload())
    }

    fn phase(turn: uuid::Uuid, phase: &str) -> Event {
        let p = AgentPhaseStarted {
            phase: phase.into(),
            turn_id: turn,
            iteration: 1,
            provider: "main".into(),
            model: "m".into(),
        };
        ev(EventType::AgentPhaseStarted, p.to_payload())
    }

    fn state(p: &Projection) -> Option<&'static str> {
        p.seats.get("eng").and_then(|s| s.state)
    }

    #[test]
    fn a_fallback_shows_the_model_the_phase_now_runs_on() {
        let turn = uuid::Uuid::now_v7();
        let fallback = ProviderFallback {
            phase: "plan".into(),
            from: "main".into(),
            to: "local".into(),
            to_model: Some("smollm2-135m-instruct".into()),
            error: "no key".into(),
            error_class: "auth".into(),
            turn_id: turn,
            iteration: 1,
        };
        let mut p = Projection::default();
        for e in [
            started(turn),
            phase(turn, "plan"),
            ev(EventType::ProviderFallback, fallback.to_payload()),
        ] {
            p.apply(&e);
        }
        let model = p
            .seats
            .get("eng")
            .and_then(|s| s.turn.as_ref())
            .and_then(|t| t.model.clone());
        assert_eq!(model.as_deref(), Some("smollm2-135m-instruct"));
    }

    #[test]
    fn a_late_phase_of_a_finished_turn_does_not_set_the_seat_working() {
        // Made in this order (ids ascend), applied out of it, as separate
        // Pulsar topics may deliver them.
        let turn = uuid::Uuid::now_v7();
        let (s, p, done) = (
            started(turn),
            phase(turn, "review"),
            ev(EventType::TaskCompleted, serde_json::json!({})),
        );
        let mut proj = Projection::default();
        proj.apply(&s);
        proj.apply(&done);
        assert_eq!(state(&proj), Some("idle"));
        assert_eq!(proj.apply(&p), None, "stale: no seat change");
        assert_eq!(state(&proj), Some("idle"));
        assert!(proj.seats["eng"].turn.is_none());
    }

    #[test]
    fn a_late_completion_of_an_earlier_task_counts_but_keeps_the_new_turn() {
        let done = ev(EventType::TaskCompleted, serde_json::json!({}));
        let next = started(uuid::Uuid::now_v7());
        let mut proj = Projection::default();
        proj.apply(&next);
        proj.apply(&done);
        assert_eq!(state(&proj), Some("working"));
        assert_eq!(proj.today().tasks_completed, 1);
    }

    #[test]
    fn a_coding_agent_run_shows_while_it_works_and_while_it_waits_for_an_answer() {
        let task = |mut e: Event| {
            e.task_id = Some("code-task".into());
            e
        };
        let mut proj = Projection::default();
        proj.apply(&task(started(uuid::Uuid::now_v7())));
        proj.apply(&task(ev(
            EventType::SandboxRunStarted,
            serde_json::json!({"run_id": "r1", "coding_agent": "claude-code", "backend": "local"}),
        )));
        assert_eq!(state(&proj), Some("awaiting_sandbox"));
        let b = proj.seats["eng"].sandbox.clone();
        assert_eq!(
            b.as_ref().map(|b| (b.status, b.coding_agent.as_str())),
            Some(("running", "claude-code"))
        );

        // Parked on a person's answer: the seat is free, the run still shown.
        proj.apply(&task(ev(
            EventType::SandboxClarificationRequested,
            serde_json::json!({"run_id": "r1", "question": "Which greeting?"}),
        )));
        assert_eq!(state(&proj), Some("idle"));
        let b = proj.seats["eng"].sandbox.clone();
        assert_eq!(
            b.as_ref().map(|b| (b.status, b.question.as_deref())),
            Some(("awaiting_answer", Some("Which greeting?")))
        );
        // Another task meanwhile leaves it shown.
        let mut other = started(uuid::Uuid::now_v7());
        other.task_id = Some("other".into());
        proj.apply(&other);
        assert_eq!(state(&proj), Some("working"));
        assert!(proj.seats["eng"].sandbox.is_some());

        // The answer resumes the code task; its next run ends and the turn goes on.
        proj.apply(&task(ev(
            EventType::SandboxRunStarted,
            serde_json::json!({"run_id": "r2"}),
        )));
        proj.apply(&task(ev(
            EventType::SandboxRunCompleted,
            serde_json::json!({"run_id": "r2"}),
        )));
        assert_eq!(state(&proj), Some("working"));
        assert!(proj.seats["eng"].sandbox.is_none());
    }
}
