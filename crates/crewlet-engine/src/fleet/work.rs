//! What a seat does around each turn so that no accepted work is lost or
//! done twice across nodes: the completion ledger before and after the
//! turn, and the effect journal the turn runs over.

use std::collections::HashSet;
use std::sync::Arc;

use crewlet_core::{Event, EventType};
use crewlet_queue::EventQueue;
use crewlet_store::{Fence, Stores, TurnCompletion};
use crewlet_turn::{JournalMode, TurnJournal, TurnOutcome};
use serde_json::json;
use tracing::{info, warn};
use uuid::Uuid;

/// The triggers among `ids` seat `handle` already worked. Fails open: a
/// ledger that cannot be read answers "none" (running again is what the
/// engine did before the ledger existed; refusing would park real work
/// during a database blip).
pub(crate) async fn completed(stores: &Stores, handle: &str, ids: &[Uuid]) -> HashSet<Uuid> {
    match stores.completions.completed(handle, ids).await {
        Ok(done) => done,
        Err(e) => {
            warn!(agent = handle, error = %e, "cannot read the completion ledger; the task runs");
            HashSet::new()
        }
    }
}

/// `turn_trigger_skipped`: a redelivered trigger the seat already worked
/// was acknowledged without a turn.
pub(crate) async fn announce_skipped(queue: &dyn EventQueue, event: &Event, handle: &str) {
    info!(agent = handle, event_id = %event.id, task_id = ?event.task_id,
        "trigger already worked (completion ledger); acknowledged without a turn");
    let mut skipped = Event::new(EventType::TurnTriggerSkipped, "engine")
        .with_summary(format!("{handle}: task already done, not run again"))
        .with_agent_handle(handle)
        .with_payload(json!({
            "trigger_id": event.id,
            "task_id": event.task_id,
            "reason": "already_completed",
        }));
    skipped.task_id = event.task_id.clone();
    if let Some(trace) = event.trace() {
        skipped = skipped.with_trace(trace.child());
    }
    crate::sink::publish_event(queue, skipped).await;
}

/// The journal a turn of `handle` for trigger `event` runs over.
pub(crate) async fn open_journal(
    stores: &Stores,
    event: &Event,
    task_id: &str,
    handle: &str,
    node: &str,
    fence: Option<Fence>,
) -> Result<TurnJournal, crewlet_store::StoreError> {
    TurnJournal::open(
        stores.journal.clone(),
        event.id.to_string(),
        task_id,
        handle,
        node,
        fence,
        JournalMode::Record,
    )
    .await
}

/// `turn_resumed`: the turn starts over from its journal (its node died,
/// or the task came back).
pub(crate) async fn announce_resumed(
    queue: &dyn EventQueue,
    event: &Event,
    handle: &str,
    journal: &TurnJournal,
) {
    let entries = journal.recorded_entries();
    info!(agent = handle, task_id = ?event.task_id, entries,
        "resuming a turn from its journal: recorded answers and tool results are not asked or run again");
    let mut resumed = Event::new(EventType::TurnResumed, "engine")
        .with_summary(format!(
            "{handle} resumes its turn from the journal ({entries} entries)"
        ))
        .with_agent_handle(handle)
        .with_payload(json!({
            "trigger_id": event.id,
            "task_id": event.task_id,
            "turn_id": journal.recorded_turn(),
            "journal_entries": entries,
        }));
    resumed.task_id = event.task_id.clone();
    if let Some(trace) = event.trace() {
        resumed = resumed.with_trace(trace.child());
    }
    crate::sink::publish_event(queue, resumed).await;
}

/// Records the finished turn in the ledger (failing open, with a warning:
/// the turn's effects already shipped). In memory (one process, nothing
/// survives it) the turn's journal is dropped now instead of kept for
/// replay, so a long-running embedded engine does not grow with it.
pub(crate) async fn record(
    stores: &Stores,
    handle: &str,
    ids: Vec<Uuid>,
    outcome: &TurnOutcome,
    node: &str,
    fence: Option<&Fence>,
    journal_key: &str,
) {
    if stores.database.is_none() {
        let _ = stores.journal.truncate(journal_key, 0, None).await;
    }
    let completion = TurnCompletion {
        seat: handle.to_owned(),
        trigger_ids: ids,
        task_id: outcome.task_id.clone(),
        turn_id: Some(outcome.turn_id),
        outcome: outcome.decision.as_str().to_owned(),
        node: node.to_owned(),
        epoch: fence.map_or(0, |f| f.epoch),
    };
    if let Err(e) = stores.completions.record(&completion).await {
        warn!(agent = handle, task_id = %outcome.task_id, error = %e,
            "cannot record the finished turn in the completion ledger; a redelivery would run it again");
    }
}

/// Where a seat's turns find their node: the host (admission, fence) and
/// the incarnation journal entries and ledger rows carry.
#[derive(Clone)]
pub(crate) struct TurnNode {
    pub host: Option<Arc<super::SeatHost>>,
    pub incarnation: String,
}
