//! `crewlet replay TASK_ID`: a recorded turn run again from its effect
//! journal. Every model answer and tool result is read back, so nothing
//! is asked or run and the turn takes exactly the steps it took; each step
//! is told to an observer as it is met. From `--from-step N` on the rest
//! runs live (against `--model`, one of `providers.llm`), with tools as a
//! dry run unless `--live-tools`. Nothing is charged to the company's
//! budgets and no event is published.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use crewlet_config::Company;
use crewlet_core::{Event, EventType};
use crewlet_store::{EventQuery, MemoryTokenLedger, Stores};
use crewlet_turn::journal::{TOOL_STARTED, ToolStarted};
use crewlet_turn::{
    JournalMode, MemoryEventSink, StepObserver, Tool, ToolAnnotations, ToolContext, ToolError,
    ToolOutput, ToolRegistry, Trigger, TurnEngine, TurnJournal, TurnOutcome, Visibility,
};
use serde_json::Value;

use crate::engine::EngineOptions;
use crate::error::EngineError;

/// What to replay and how.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    pub task_id: String,
    /// Which of the task's journals (its trigger's event id); default the
    /// latest.
    pub trigger: Option<String>,
    /// Run live from this step on.
    pub from_step: Option<i32>,
    /// The `providers.llm` entry the live steps ask.
    pub model: Option<String>,
    /// Run tools for real in the live steps (else a dry run).
    pub live_tools: bool,
}

/// What a replay found.
#[derive(Debug)]
pub struct ReplayReport {
    pub seat: String,
    pub trigger: String,
    pub journal_entries: usize,
    pub outcome: TurnOutcome,
    /// The decision the ledger recorded for the original turn, if it ended.
    pub recorded_outcome: Option<String>,
    /// Where the replay left the journal's path (`None`: it followed it).
    pub diverged_at: Option<i32>,
}

/// Stands in for a tool the recorded turn called: offered under its name
/// so the recorded call resolves; never run (the journal answers it).
struct RecordedTool {
    name: String,
    read_only: bool,
}

#[async_trait]
impl Tool for RecordedTool {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        "A tool of the recorded turn (answered from its journal)."
    }
    fn schema(&self) -> Value {
        serde_json::json!({"type": "object"})
    }
    fn annotations(&self) -> ToolAnnotations {
        if self.read_only {
            ToolAnnotations::read_only()
        } else {
            ToolAnnotations::default()
        }
    }
    async fn invoke(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        Err(ToolError::Failed(format!(
            "`{}` is not available in this replay",
            self.name
        )))
    }
}

/// The inbox event the journal was written for, else the task's first
/// `task_created`.
async fn trigger_event(stores: &Stores, key: &str, task_id: &str) -> Option<Event> {
    if let Ok(id) = key.parse()
        && let Ok(Some(e)) = stores.events.get(id).await
    {
        return Some(e);
    }
    let page = stores
        .events
        .recent(&EventQuery {
            event_type: Some(EventType::TaskCreated),
            task_id: Some(task_id.to_owned()),
            limit: Some(500),
            ..EventQuery::default()
        })
        .await
        .ok()?;
    page.events.into_iter().last()
}

/// Replays a recorded turn of `company` (see the module doc).
pub async fn replay(
    stores: &Stores,
    company: Company,
    env: &crate::EnvLookup,
    options: &ReplayOptions,
    observer: Arc<dyn StepObserver>,
) -> Result<ReplayReport, EngineError> {
    let keys = stores.journal.keys_for_task(&options.task_id).await?;
    let key = match &options.trigger {
        Some(t) if keys.contains(t) => t.clone(),
        Some(t) => {
            return Err(EngineError::NotFound {
                what: "journal of this task for trigger",
                key: t.clone(),
            });
        }
        None => keys.last().cloned().ok_or_else(|| EngineError::NotFound {
            what: "turn journal of task",
            key: options.task_id.clone(),
        })?,
    };
    let entries = stores.journal.load(&key).await?;
    let seat_handle = entries.first().map(|e| e.seat.clone()).unwrap_or_default();
    let org = company.organization();
    let seat = org
        .seat(&seat_handle)
        .ok_or_else(|| EngineError::NotFound {
            what: "seat of the recorded turn in the active company",
            key: seat_handle.clone(),
        })?;
    let mut profile = crate::engine::seat_profile(&company, &org, seat);
    if let Some(model) = &options.model {
        if !company.providers.llm.contains_key(model) {
            let names: Vec<&String> = company.providers.llm.keys().collect();
            return Err(EngineError::Other(format!(
                "--model `{model}` is not one of providers.llm ({names:?})"
            )));
        }
        let one = vec![model.clone()];
        for phase in [
            crewlet_llm::Phase::Plan,
            crewlet_llm::Phase::Execute,
            crewlet_llm::Phase::Review,
            crewlet_llm::Phase::Auxiliary,
        ] {
            profile.llm = profile.llm.clone().with_phase(phase, one.clone());
        }
    }

    // The tools: stand-ins for every tool the turn called, and the real
    // ones when the live steps may run them.
    let registry = Arc::new(ToolRegistry::new());
    let mut hub = None;
    if options.live_tools && options.from_step.is_some() {
        let org = Arc::new(org.clone());
        let engine_options = EngineOptions {
            env: env.clone(),
            ..EngineOptions::default()
        };
        let started =
            crate::tools::mcp::start(&company, &org, &registry, engine_options.env.as_ref()).await;
        hub = Some(started.hub);
    }
    let mut recorded: BTreeMap<String, bool> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.kind == TOOL_STARTED) {
        if let Ok(s) = serde_json::from_value::<ToolStarted>(e.payload.clone()) {
            recorded.insert(s.name, s.read_only);
        }
    }
    for (name, read_only) in recorded {
        if registry.get_for(&seat_handle, &name).is_none() {
            let _ = registry.register(Arc::new(RecordedTool { name, read_only }), Visibility::All);
        }
    }

    let (llm, _) = crate::llm::build_registry(&company, env.as_ref());
    let turns = TurnEngine::new(
        crate::engine::company_profile(&company),
        llm,
        Arc::new(MemoryTokenLedger::new()),
        Arc::new(MemoryEventSink::new()),
    )
    .with_tools(registry)
    .with_settings(crewlet_turn::TurnSettings {
        stream: false,
        ..crate::engine::turn_settings(&company, &EngineOptions::default())
    })
    .with_subagents(crate::tools::subagents::subagent_settings(&company));

    let trigger = match trigger_event(stores, &key, &options.task_id).await {
        Some(event) => match crewlet_core::payload::TaskRequest::from_event(&event) {
            Ok(request) => crate::task::trigger(&request, &event),
            Err(_) => Trigger::new(
                &options.task_id,
                "replay",
                "(the request could not be read)",
            ),
        },
        None => Trigger::new(
            &options.task_id,
            "replay",
            "(the original request is no longer stored)",
        ),
    };
    let journal = TurnJournal::open(
        stores.journal.clone(),
        key.clone(),
        options.task_id.clone(),
        seat_handle.clone(),
        "replay",
        None,
        JournalMode::Replay {
            live_from: options.from_step,
            live_tools: options.live_tools,
        },
    )
    .await?
    .with_observer(observer);
    let outcome = turns
        .run_turn_journaled(&profile, &trigger, Some(&journal))
        .await;
    if let Some(hub) = hub {
        hub.shutdown().await;
    }
    let recorded_outcome = stores
        .completions
        .for_task(&options.task_id)
        .await
        .ok()
        .and_then(|rows| {
            rows.into_iter()
                .find(|r| r.trigger_id.to_string() == key)
                .map(|r| r.outcome)
        });
    Ok(ReplayReport {
        seat: seat_handle,
        trigger: key,
        journal_entries: entries.len(),
        diverged_at: journal.stats().diverged_at,
        outcome,
        recorded_outcome,
    })
}
