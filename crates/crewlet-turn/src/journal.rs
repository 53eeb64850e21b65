//! The effect journal of one turn ([`TurnJournal`]): every model answer
//! and every tool call (started, then its result) is appended to the
//! [`EffectJournal`] before the turn moves on, under the seat's fence.
//!
//! Steps are numbered densely in the order the turn meets them: a model
//! answer is one step, each tool call that runs is one step (numbered in
//! the order of the answer's calls, also when they run side by side). A
//! call that fails is not a step, so a retried call takes the same number.
//!
//! When the turn starts over (its node died, or the task came back), the
//! journal is read first and the turn walks it:
//! - a recorded model answer is used as it is: no call, no budget charge;
//! - a recorded tool result is used as it is: the tool does not run;
//! - a tool call started but never finished runs again only when the tool
//!   says it is idempotent (or read-only); otherwise the turn is told that
//!   its effect is unknown (`effect_uncertain`) and goes on with that;
//! - where the turn asks for something other than what the journal holds
//!   (a tool that is gone now), the rest of the journal is dropped and the
//!   turn goes on live.
//!
//! [`JournalMode::Replay`] walks a finished journal without writing to it:
//! `crewlet replay` shows each step, and from a chosen step on runs the
//! rest live (tools dry unless asked).

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

use crewlet_llm::Completion;
use crewlet_store::{Appended, EffectJournal, Fence, JournalEntry, NewJournalEntry};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::TurnError;

/// Entry kinds.
pub const MODEL: &str = "model";
pub const TOOL_STARTED: &str = "tool_started";
pub const TOOL_RESULT: &str = "tool_result";

/// A tool call as journaled when it starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolStarted {
    pub call_id: String,
    pub name: String,
    pub arguments: Value,
    /// The tool said it changes nothing (a replay offers it where the
    /// turn offered read-only tools).
    #[serde(default)]
    pub read_only: bool,
}

/// A tool call's result as journaled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResultRecord {
    pub call_id: String,
    pub name: String,
    pub content: String,
    pub is_error: bool,
    #[serde(default)]
    pub terminate: bool,
    #[serde(default)]
    pub duration_ms: u64,
    /// The result says the effect is unknown (the call started before a
    /// crash and was not run again).
    #[serde(default)]
    pub uncertain: bool,
}

/// What a turn does with its journal.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum JournalMode {
    /// Use what is recorded, record what is new (a running turn).
    #[default]
    Record,
    /// Walk a recorded turn without writing. Steps from `live_from` on (if
    /// set) ignore the journal: the model is asked, and tools run only when
    /// `live_tools` (else they answer as a dry run).
    Replay {
        live_from: Option<i32>,
        live_tools: bool,
    },
}

/// Where a step's answer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepSource {
    /// Read back from the journal.
    Journal,
    /// Asked or run now.
    Live,
    /// A tool not run (replay without `--live-tools`).
    DryRun,
    /// A started call whose effect is unknown; not run again.
    Uncertain,
}

/// One step as the turn met it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepView {
    pub step: i32,
    /// `model` or `tool`.
    pub kind: &'static str,
    pub source: StepSource,
    /// For a model step: its text and tool calls; for a tool: its result.
    pub text: String,
    /// The tool's name, for a tool step; the model, for a model step.
    pub name: String,
    pub arguments: Option<Value>,
    pub is_error: bool,
}

/// Told each step a journaled turn takes (`crewlet replay` prints them).
pub trait StepObserver: Send + Sync {
    fn step(&self, step: &StepView);
}

/// What one turn's journal did, for its outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Model answers read back instead of asked.
    pub models_reused: u32,
    /// Tool results read back instead of run.
    pub tools_reused: u32,
    /// Started calls whose effect is unknown.
    pub uncertain: u32,
    /// Started idempotent calls run again.
    pub rerun: u32,
    /// The step the journal stopped matching at, if it did.
    pub diverged_at: Option<i32>,
}

#[derive(Default)]
struct Step {
    model: Option<Completion>,
    started: Option<ToolStarted>,
    result: Option<ToolResultRecord>,
}

struct State {
    next: i32,
    /// The turn id entries carry.
    turn: Option<Uuid>,
    /// Past this step the journal is not read (it stopped matching).
    stop_reading: Option<i32>,
    steps: BTreeMap<i32, Step>,
    stats: JournalStats,
}

/// How a tool call goes, as the journal decides.
pub(crate) enum ToolPlan {
    /// Use this recorded result.
    Recorded(ToolResultRecord),
    /// Started before and not idempotent: its effect is unknown.
    Uncertain(i32),
    /// Not a tool run: answer as a dry run (replay).
    DryRun(i32),
    /// Run it (and record it at this step).
    Run(i32),
}

/// One turn's view of the effect journal; see the module doc.
pub struct TurnJournal {
    store: Arc<dyn EffectJournal>,
    task_key: String,
    task_id: String,
    seat: String,
    node: String,
    fence: Option<Fence>,
    mode: JournalMode,
    recorded_turn: Option<Uuid>,
    recorded_steps: usize,
    observer: Option<Arc<dyn StepObserver>>,
    state: Mutex<State>,
}

impl std::fmt::Debug for TurnJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnJournal")
            .field("task_key", &self.task_key)
            .field("seat", &self.seat)
            .field("mode", &self.mode)
            .field("recorded_steps", &self.recorded_steps)
            .finish_non_exhaustive()
    }
}

fn decode_entries(entries: Vec<JournalEntry>) -> (BTreeMap<i32, Step>, Option<Uuid>) {
    let mut steps: BTreeMap<i32, Step> = BTreeMap::new();
    let turn = entries.first().map(|e| e.turn_id);
    for e in entries {
        let step = steps.entry(e.step).or_default();
        match e.kind.as_str() {
            MODEL => step.model = serde_json::from_value(e.payload).ok(),
            TOOL_STARTED => step.started = serde_json::from_value(e.payload).ok(),
            TOOL_RESULT => step.result = serde_json::from_value(e.payload).ok(),
            _ => {}
        }
    }
    (steps, turn)
}

impl TurnJournal {
    /// Reads the journal `task_key` (the trigger's inbox event id) of task
    /// `task_id` for a turn of `seat` run by `node` (an incarnation) under
    /// `fence`.
    pub async fn open(
        store: Arc<dyn EffectJournal>,
        task_key: impl Into<String>,
        task_id: impl Into<String>,
        seat: impl Into<String>,
        node: impl Into<String>,
        fence: Option<Fence>,
        mode: JournalMode,
    ) -> Result<Self, crewlet_store::StoreError> {
        let task_key = task_key.into();
        let entries = store.load(&task_key).await?;
        let recorded_steps = entries.len();
        let (steps, recorded_turn) = decode_entries(entries);
        let stop_reading = match &mode {
            JournalMode::Replay { live_from, .. } => *live_from,
            JournalMode::Record => None,
        };
        Ok(Self {
            store,
            task_key,
            task_id: task_id.into(),
            seat: seat.into(),
            node: node.into(),
            fence,
            mode,
            recorded_turn,
            recorded_steps,
            observer: None,
            state: Mutex::new(State {
                next: 0,
                turn: recorded_turn,
                stop_reading,
                steps,
                stats: JournalStats::default(),
            }),
        })
    }

    /// Tells `observer` every step.
    pub fn with_observer(mut self, observer: Arc<dyn StepObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The turn id the journal was first written by (a resumed turn keeps
    /// it); `None` for a fresh journal.
    pub fn recorded_turn(&self) -> Option<Uuid> {
        self.recorded_turn
    }

    /// Entries read when the journal was opened.
    pub fn recorded_entries(&self) -> usize {
        self.recorded_steps
    }

    pub fn task_key(&self) -> &str {
        &self.task_key
    }

    pub fn is_replay(&self) -> bool {
        matches!(self.mode, JournalMode::Replay { .. })
    }

    pub fn stats(&self) -> JournalStats {
        self.state.lock().stats.clone()
    }

    fn readable(state: &State, step: i32) -> bool {
        state.stop_reading.is_none_or(|stop| step < stop)
    }

    fn notify(&self, view: StepView) {
        if let Some(o) = &self.observer {
            o.step(&view);
        }
    }

    /// The recorded answer of the next model step, which it then takes.
    /// `Err` in a replay whose journal ends before the turn does.
    pub(crate) fn recorded_model(&self) -> Result<Option<Completion>, TurnError> {
        let mut state = self.state.lock();
        let step = state.next;
        if Self::readable(&state, step) {
            let found = state.steps.get(&step).map(|s| s.model.clone());
            match found {
                Some(Some(c)) => {
                    state.next += 1;
                    state.stats.models_reused += 1;
                    drop(state);
                    self.notify(model_view(step, StepSource::Journal, &c));
                    return Ok(Some(c));
                }
                // The journal has a tool here: the turn took another path.
                Some(None) => Self::diverge(&mut state, step),
                None => {
                    if self.is_replay() {
                        return Err(TurnError::JournalEnded { step });
                    }
                }
            }
        }
        Ok(None)
    }

    fn diverge(state: &mut State, step: i32) {
        if state.stop_reading.is_none_or(|s| s > step) {
            state.stop_reading = Some(step);
            state.stats.diverged_at.get_or_insert(step);
        }
    }

    /// Records a live model answer as the next step.
    pub(crate) async fn record_model(&self, completion: &Completion) -> Result<(), TurnError> {
        let (step, cut) = {
            let mut state = self.state.lock();
            let step = state.next;
            state.next += 1;
            let cut = state.stats.diverged_at == Some(step);
            (step, cut)
        };
        self.notify(model_view(step, StepSource::Live, completion));
        if self.is_replay() {
            return Ok(());
        }
        if cut {
            self.truncate(step).await?;
        }
        let payload = serde_json::to_value(completion).unwrap_or(Value::Null);
        self.append(step, MODEL, payload).await
    }

    /// Decides how the next tool call goes (and numbers it).
    pub(crate) fn plan_tool(&self, name: &str, arguments: &Value, idempotent: bool) -> ToolPlan {
        let mut state = self.state.lock();
        let step = state.next;
        state.next += 1;
        let live_tools = match &self.mode {
            JournalMode::Record => true,
            JournalMode::Replay { live_tools, .. } => *live_tools,
        };
        if Self::readable(&state, step) {
            let (started, result) = match state.steps.get(&step) {
                Some(s) => (s.started.clone(), s.result.clone()),
                None => (None, None),
            };
            let same = started
                .as_ref()
                .is_some_and(|s| s.name == name && &s.arguments == arguments);
            match (started, result) {
                (Some(_), Some(r)) if same => {
                    state.stats.tools_reused += 1;
                    drop(state);
                    self.notify(tool_view(step, StepSource::Journal, &r, arguments));
                    return ToolPlan::Recorded(r);
                }
                (Some(_), None) if same => {
                    if idempotent && live_tools {
                        state.stats.rerun += 1;
                        return ToolPlan::Run(step);
                    }
                    if !self.is_replay() {
                        state.stats.uncertain += 1;
                        return ToolPlan::Uncertain(step);
                    }
                }
                (None, None) if self.is_replay() && !state.steps.contains_key(&step) => {
                    // A replay past the end of its journal.
                    return ToolPlan::DryRun(step);
                }
                (None, None) if !state.steps.contains_key(&step) => {}
                _ => Self::diverge(&mut state, step),
            }
        }
        if live_tools {
            ToolPlan::Run(step)
        } else {
            ToolPlan::DryRun(step)
        }
    }

    /// Records that the call at `step` starts (before it runs).
    pub(crate) async fn tool_started(
        &self,
        step: i32,
        started: &ToolStarted,
    ) -> Result<(), TurnError> {
        if self.is_replay() {
            return Ok(());
        }
        let cut = self.state.lock().stats.diverged_at == Some(step);
        if cut {
            self.truncate(step).await?;
        }
        let payload = serde_json::to_value(started).unwrap_or(Value::Null);
        self.append(step, TOOL_STARTED, payload).await
    }

    /// Records the call's result (after it ran), and tells the observer.
    pub(crate) async fn tool_result(
        &self,
        step: i32,
        result: &ToolResultRecord,
        arguments: &Value,
        source: StepSource,
    ) -> Result<(), TurnError> {
        self.notify(tool_view(step, source, result, arguments));
        if self.is_replay() {
            return Ok(());
        }
        let payload = serde_json::to_value(result).unwrap_or(Value::Null);
        self.append(step, TOOL_RESULT, payload).await
    }

    async fn truncate(&self, step: i32) -> Result<(), TurnError> {
        tracing::warn!(task_id = %self.task_key, agent = %self.seat, step,
            "the turn took another path than its journal; the journal's rest is dropped");
        match self
            .store
            .truncate(&self.task_key, step, self.fence.as_ref())
            .await?
        {
            Some(_) => Ok(()),
            None => Err(TurnError::Fenced),
        }
    }

    async fn append(&self, step: i32, kind: &str, payload: Value) -> Result<(), TurnError> {
        let entry = NewJournalEntry {
            task_key: self.task_key.clone(),
            task_id: self.task_id.clone(),
            step,
            kind: kind.to_owned(),
            seat: self.seat.clone(),
            turn_id: self.state.lock().turn.unwrap_or_default(),
            node: self.node.clone(),
            payload,
        };
        match self.store.append(&entry, self.fence.as_ref()).await? {
            Appended::Written | Appended::Exists => Ok(()),
            Appended::Fenced => Err(TurnError::Fenced),
        }
    }

    /// Sets the turn id new entries carry, unless the journal already has
    /// one (a resumed turn keeps its first id).
    pub(crate) fn bind_turn(&self, turn_id: Uuid) {
        self.state.lock().turn.get_or_insert(turn_id);
    }
}

/// The tool result a started call whose effect is unknown gets instead of
/// running again.
pub(crate) fn uncertain_result(call_id: &str, name: &str) -> ToolResultRecord {
    ToolResultRecord {
        call_id: call_id.to_owned(),
        name: name.to_owned(),
        content: format!(
            "error: effect uncertain: this call of `{name}` was started before the turn was \
             interrupted, and it is not known whether it took effect. It was not run again. \
             Check whether its effect is there before you repeat it."
        ),
        is_error: true,
        terminate: false,
        duration_ms: 0,
        uncertain: true,
    }
}

/// The result a tool call gets in a replay that does not run tools.
pub(crate) fn dry_run_result(call_id: &str, name: &str) -> ToolResultRecord {
    ToolResultRecord {
        call_id: call_id.to_owned(),
        name: name.to_owned(),
        content: format!("[dry run] `{name}` was not run"),
        is_error: false,
        terminate: false,
        duration_ms: 0,
        uncertain: false,
    }
}

fn model_view(step: i32, source: StepSource, c: &Completion) -> StepView {
    let mut text = c.content.clone();
    for call in &c.tool_calls {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!("-> {}({})", call.name, call.arguments));
    }
    StepView {
        step,
        kind: "model",
        source,
        text,
        name: c.model.clone(),
        arguments: None,
        is_error: false,
    }
}

fn tool_view(step: i32, source: StepSource, r: &ToolResultRecord, arguments: &Value) -> StepView {
    StepView {
        step,
        kind: "tool",
        source,
        text: r.content.clone(),
        name: r.name.clone(),
        arguments: Some(arguments.clone()),
        is_error: r.is_error,
    }
}
