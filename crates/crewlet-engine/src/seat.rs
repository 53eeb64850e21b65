//! One agent seat at run time: its state (Created -> Idle -> Working ->
//! Idle | Terminated), its current task, and the handler of its inbox.
//!
//! Each seat has exactly one member in its inbox group `agent-{handle}`, and
//! a member hands messages to its handler one at a time: so a seat runs one
//! turn at a time and later work waits in the durable inbox. A global
//! semaphore (`turn_engine.max_concurrent_turns`) caps turns across seats.

use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use chrono::Utc;
use crewlet_api::{AgentState, CurrentTask};
use crewlet_config::Seat;
use crewlet_core::EventType;
use crewlet_learning::Learning;
use crewlet_queue::{Delivery, EventHandler, HandlerError};
use crewlet_store::{Patience, Stores, retry_transient};
use crewlet_turn::{SeatProfile, TurnEngine};
use tokio::sync::{Notify, Semaphore};
use tracing::{Instrument, debug, warn};
use uuid::Uuid;

use crate::recent::RecentIds;
use crate::task::TaskRequest;

/// How often a paused seat asks the ledger whether its budget was lifted.
const PAUSE_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// Inbox event ids a seat remembers having handled.
const REMEMBERED_TASKS: usize = 4096;

/// Where a seat's runtime is in its life: Created -> Idle -> Working ->
/// Idle, until Terminated (final: nothing moves a terminated seat). The
/// engine owns this state; the API shows it as `AgentState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SeatState {
    /// Built, its inbox not consumed yet.
    Created,
    /// Waiting for work.
    Idle,
    /// Running a turn.
    Working,
    /// Waiting for a spent budget to be raised, reset or to start a new
    /// period; its tasks wait in the inbox.
    Paused,
    /// Its turn waits for a coding agent in a sandbox; its tasks wait in
    /// the inbox.
    AwaitingSandbox,
    /// Stopped with the engine or removed from the company.
    Terminated,
}

impl From<SeatState> for AgentState {
    fn from(state: SeatState) -> Self {
        match state {
            SeatState::Created => AgentState::Created,
            SeatState::Idle => AgentState::Idle,
            SeatState::Working => AgentState::Working,
            SeatState::Paused => AgentState::Paused,
            SeatState::AwaitingSandbox => AgentState::AwaitingSandbox,
            SeatState::Terminated => AgentState::Terminated,
        }
    }
}

/// Live state of one seat.
pub(crate) struct SeatRuntime {
    /// The organization's own seat, shared.
    pub seat: Arc<Seat>,
    pub profile: SeatProfile,
    status: Mutex<Status>,
    handled: RecentIds<Uuid>,
    /// The budget refusal that paused the seat, until it is lifted.
    paused: Mutex<Option<crewlet_store::BudgetRefusal>>,
    /// Told by a `resume` on the seat's control topic: check the pause now.
    resume: Notify,
}

struct Status {
    state: SeatState,
    current: Option<CurrentTask>,
}

impl SeatRuntime {
    pub fn new(seat: Arc<Seat>, profile: SeatProfile) -> Self {
        Self {
            seat,
            profile,
            status: Mutex::new(Status {
                state: SeatState::Created,
                current: None,
            }),
            handled: RecentIds::new(REMEMBERED_TASKS),
            paused: Mutex::new(None),
            resume: Notify::new(),
        }
    }

    /// A `resume` came on the seat's control topic (a budget was reset or
    /// raised): a paused seat checks its budget at once.
    pub fn wake_paused(&self) {
        self.resume.notify_waiters();
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Status> {
        self.status.lock()
    }

    pub fn state(&self) -> SeatState {
        self.lock().state
    }

    pub fn current_task(&self) -> Option<CurrentTask> {
        self.lock().current.clone()
    }

    pub fn set_state(&self, state: SeatState) {
        let mut s = self.lock();
        if s.state == SeatState::Terminated {
            return;
        }
        s.state = state;
        if state != SeatState::Working {
            s.current = None;
        }
    }

    fn start_work(&self, task: CurrentTask) {
        let mut s = self.lock();
        s.state = SeatState::Working;
        s.current = Some(task);
    }

    /// Records the phase the running turn is in (from its events).
    pub fn set_phase(&self, phase: &str) {
        if let Some(current) = self.lock().current.as_mut() {
            current.phase = Some(phase.to_owned());
        }
    }
}

/// What every seat's handler shares: the turn engine, the concurrency cap
/// and the drain switch.
pub(crate) struct TurnRuntime {
    pub turns: Arc<TurnEngine>,
    /// Checked before a turn starts: no model call is paid for work whose
    /// charges and events cannot be recorded.
    stores: Stores,
    permits: Arc<Semaphore>,
    draining: AtomicBool,
    drain_started: Notify,
    running: AtomicUsize,
    pub(crate) turn_ended: Notify,
    /// Reflects on each finished turn, when learning is on.
    learning: Option<Arc<Learning>>,
    /// Chat backends that show a seat at work while its turn runs.
    statuses: Vec<Arc<dyn crate::working::WorkingStatus>>,
    /// Colleague asks: an answering turn's result goes back to the asker.
    asks: Option<Arc<crate::colleagues::Asks>>,
    /// The node the turns run on (its seat host, when in a fleet).
    node: crate::fleet::work::TurnNode,
    /// The code sandbox: a turn suspended by `run_sandbox` waits for it.
    pub(crate) sandbox: Option<Arc<crate::sandbox::SandboxService>>,
}

impl TurnRuntime {
    pub fn new(
        turns: Arc<TurnEngine>,
        stores: Stores,
        max_concurrent_turns: usize,
        learning: Option<Arc<Learning>>,
    ) -> Self {
        Self {
            turns,
            stores,
            learning,
            permits: Arc::new(Semaphore::new(max_concurrent_turns.max(1))),
            draining: AtomicBool::new(false),
            drain_started: Notify::new(),
            running: AtomicUsize::new(0),
            turn_ended: Notify::new(),
            statuses: Vec::new(),
            asks: None,
            sandbox: None,
            node: crate::fleet::work::TurnNode {
                host: None,
                incarnation: format!("local:{}", std::process::id()),
            },
        }
    }

    /// Runs turns as a node of a fleet: a turn starts only on a seat the
    /// host holds, and journals under its fence.
    pub fn with_fleet(mut self, host: Option<Arc<crate::fleet::SeatHost>>) -> Self {
        if let Some(h) = &host {
            self.node.incarnation = h.identity().incarnation.clone();
        }
        self.node.host = host;
        self
    }

    /// Lets turns suspend on `run_sandbox` and go on when its run ends.
    pub fn with_sandbox(mut self, sandbox: Option<Arc<crate::sandbox::SandboxService>>) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Sends the results of colleague tasks back to their askers.
    pub fn with_asks(mut self, asks: Arc<crate::colleagues::Asks>) -> Self {
        self.asks = Some(asks);
        self
    }

    /// Shows each turn's working status on these chat backends.
    pub fn with_statuses(mut self, statuses: Vec<Arc<dyn crate::working::WorkingStatus>>) -> Self {
        self.statuses = statuses;
        self
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Stops starting turns: work not started yet goes back to the inboxes.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Release);
        self.drain_started.notify_waiters();
    }

    pub fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Waits until no turn runs, or `timeout` passes; returns the turns
    /// still running.
    pub async fn wait_idle(&self, timeout: std::time::Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let ended = self.turn_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let n = self.running();
            if n == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, ended).await.is_err() {
                return self.running();
            }
        }
    }
}

/// A turn in progress: when it ends (or unwinds), the seat is idle again
/// and the drain is told.
struct RunningTurn<'a> {
    seat: &'a SeatRuntime,
    runtime: &'a TurnRuntime,
}

impl Drop for RunningTurn<'_> {
    fn drop(&mut self) {
        self.seat.set_state(SeatState::Idle);
        self.runtime.running.fetch_sub(1, Ordering::AcqRel);
        self.runtime.turn_ended.notify_waiters();
    }
}

/// The inbox handler of one seat.
pub(crate) struct InboxHandler {
    pub seat: Arc<SeatRuntime>,
    pub runtime: Arc<TurnRuntime>,
    /// Where `notifications_coalesced` goes.
    pub queue: Arc<dyn crewlet_queue::EventQueue>,
}

fn stopping() -> HandlerError {
    HandlerError::new("the engine is stopping; the task stays in the inbox")
}

#[async_trait]
impl EventHandler for InboxHandler {
    /// Tasks of one conversation that waited together: repeats dropped,
    /// two or more merged into one digest task (one turn), else one by one.
    async fn handle_batch(&self, batch: Vec<Delivery>) -> Result<(), HandlerError> {
        let handle = self.seat.seat.handle.as_str();
        let mut seen = std::collections::HashSet::new();
        let mut fresh: Vec<Delivery> = batch
            .into_iter()
            .filter(|d| seen.insert(d.event.id) && !self.seat.handled.contains(&d.event.id))
            .collect();
        // Triggers this seat already worked (on any node) are not run again.
        let ids: Vec<Uuid> = fresh
            .iter()
            .filter(|d| d.event.event_type == EventType::TaskCreated)
            .map(|d| d.event.id)
            .collect();
        if !ids.is_empty() {
            let done = crate::fleet::work::completed(&self.runtime.stores, handle, &ids).await;
            for d in fresh.iter().filter(|d| done.contains(&d.event.id)) {
                crate::fleet::work::announce_skipped(self.queue.as_ref(), &d.event, handle).await;
                self.seat.handled.insert(d.event.id);
            }
            fresh.retain(|d| !done.contains(&d.event.id));
        }
        if fresh.len() > 1
            && let Some(merged) = crate::coalesce::merge(handle, &fresh)
        {
            debug!(
                agent = handle,
                count = fresh.len(),
                "inbox tasks of one conversation merged into one turn"
            );
            let ids: Vec<Uuid> = fresh.iter().map(|d| d.event.id).collect();
            // Published before the turn: a crash after it leaves the whole
            // part unacknowledged, so it is merged again, never lost.
            let _ = self
                .queue
                .publish(
                    &crewlet_queue::topics::events(&EventType::NotificationsCoalesced),
                    &merged.event,
                )
                .await;
            let latest_task = merged.delivery.event.task_id.clone();
            let outcome = self.run_task(merged.delivery, ids.clone()).await?;
            for id in ids {
                self.seat.handled.insert(id);
            }
            // Each earlier message's own trace ends too: its task is done
            // (or failed) with the merged one.
            if let Some(outcome) = outcome {
                for d in &fresh {
                    if d.event.task_id != latest_task {
                        let ended = crate::coalesce::constituent_ended(&d.event, &outcome);
                        let _ = self
                            .queue
                            .publish(&crewlet_queue::topics::events(&ended.event_type), &ended)
                            .await;
                    }
                }
            }
            return Ok(());
        }
        for delivery in fresh {
            self.handle(delivery).await?;
        }
        Ok(())
    }

    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        let id = delivery.event.id;
        self.run_task(delivery, vec![id]).await.map(|_| ())
    }
}

impl InboxHandler {
    /// Holds the next task while the seat is paused by a spent budget,
    /// checking the ledger every few seconds; the engine stopping puts the
    /// task back in the inbox.
    async fn wait_while_paused(&self) -> Result<(), HandlerError> {
        let Some(refusal) = self.seat.paused.lock().clone() else {
            return Ok(());
        };
        let scope = refusal.scope(&self.seat.seat.agent_id);
        let period = self.runtime.turns.company().budget_period;
        let mut logged = false;
        loop {
            // Armed before the ledger is read: a resume sent meanwhile counts.
            let resumed = self.seat.resume.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            let lifted = match self
                .runtime
                .stores
                .ledger
                .scope_rows(std::slice::from_ref(&scope))
                .await
            {
                // A reset clears the refusal; a new period starts over.
                Ok(rows) => rows.first().is_none_or(|row| {
                    row.refused_at.is_none()
                        || crewlet_store::new_period(row.period_start, period.window(Utc::now()))
                }),
                Err(e) => {
                    debug!(agent = %self.seat.seat.handle, error = %e, "cannot read the budget ledger; the seat stays paused");
                    false
                }
            };
            if lifted {
                *self.seat.paused.lock() = None;
                self.seat.set_state(SeatState::Idle);
                tracing::info!(agent = %self.seat.seat.handle, scope, "budget lifted; the seat takes work again");
                return Ok(());
            }
            if !logged {
                self.seat.set_state(SeatState::Paused);
                logged = true;
            }
            let drain = self.runtime.drain_started.notified();
            tokio::pin!(drain);
            drain.as_mut().enable();
            if self.runtime.is_draining() {
                return Err(stopping());
            }
            tokio::select! {
                () = tokio::time::sleep(PAUSE_POLL) => {}
                () = resumed => {}
                () = &mut drain => return Err(stopping()),
            }
        }
    }

    /// One run of the task's turn: the seat's fence taken (in a fleet), the
    /// journal read, a turn slot taken, the turn run.
    async fn run_once(
        &self,
        event: &crewlet_core::Event,
        request: &TaskRequest,
        trigger: &crewlet_turn::Trigger,
    ) -> Result<
        (
            crewlet_turn::TurnOutcome,
            (crewlet_turn::TurnJournal, Option<crewlet_store::Fence>),
        ),
        HandlerError,
    > {
        let handle = self.seat.seat.handle.as_str();
        // In a fleet, a turn starts only under a freshly renewed seat lease;
        // its journal (what an interrupted run of it already did) is read.
        let node = &self.runtime.node;
        let fence = match &node.host {
            Some(host) => match host.admit(handle).await {
                Some(fence) => Some(fence),
                None => {
                    return Err(HandlerError::new(
                        "the seat is not held by this node; the task stays in the inbox",
                    ));
                }
            },
            None => None,
        };
        let journal = match crate::fleet::work::open_journal(
            &self.runtime.stores,
            event,
            &trigger.task_id,
            handle,
            &node.incarnation,
            fence.clone(),
        )
        .await
        {
            Ok(j) => j,
            Err(e) => {
                return Err(HandlerError::new(format!(
                    "cannot read the turn journal; the task stays in the inbox: {e}"
                )));
            }
        };
        if journal.recorded_entries() > 0 {
            crate::fleet::work::announce_resumed(self.queue.as_ref(), event, handle, &journal)
                .await;
        }

        // The global cap: wait for a slot, unless the engine starts stopping.
        let permit = {
            let drain = self.runtime.drain_started.notified();
            tokio::pin!(drain);
            drain.as_mut().enable();
            if self.runtime.is_draining() {
                return Err(stopping());
            }
            tokio::select! {
                p = self.runtime.permits.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => return Err(stopping()),
                },
                () = &mut drain => return Err(stopping()),
            }
        };
        if self.runtime.is_draining() {
            return Err(stopping());
        }

        self.runtime.running.fetch_add(1, Ordering::AcqRel);
        let running = RunningTurn {
            seat: &self.seat,
            runtime: &self.runtime,
        };
        self.seat.start_work(CurrentTask {
            task_id: trigger.task_id.clone(),
            summary: event.summary.clone(),
            started_at: Utc::now(),
            phase: None,
            trace_id: event.trace_id.map(|t| t.to_string()),
        });
        // The inbox message's span: the turn engine's own `turn` span (with
        // the token and duration fields) nests under it, continuing the trace.
        let span = crewlet_telemetry::span_from_event("inbox", event);
        let working: Vec<_> = self
            .runtime
            .statuses
            .iter()
            .filter_map(|s| s.begin(&self.seat, request))
            .collect();
        let outcome = self
            .runtime
            .turns
            .run_turn_journaled(&self.seat.profile, trigger, Some(&journal))
            .instrument(span);
        // A subscription CLI provider runs each call in this seat's own home.
        let outcome = crewlet_llm::with_seat(handle, outcome).await;
        drop(working);
        drop(permit);
        drop(running);
        Ok((outcome, (journal, fence)))
    }

    /// Runs the task an inbox message carries: its outcome, or `None`
    /// when no turn ran (a repeat, not a task, unreadable).
    async fn run_task(
        &self,
        delivery: Delivery,
        mut constituents: Vec<Uuid>,
    ) -> Result<Option<crewlet_turn::TurnOutcome>, HandlerError> {
        let event = &delivery.event;
        let handle = self.seat.seat.handle.as_str();
        if self.runtime.is_draining() {
            return Err(stopping());
        }
        if self.seat.handled.contains(&event.id) {
            debug!(agent = handle, event_id = %event.id, "inbox message already handled; acknowledging the repeat");
            return Ok(None);
        }
        if event.event_type != EventType::TaskCreated {
            debug!(agent = handle, event_type = %event.event_type, "inbox message is not a task; ignored");
            return Ok(None);
        }
        let request = match TaskRequest::from_event(event) {
            Ok(r) => r,
            Err(e) => {
                warn!(agent = handle, event_id = %event.id, error = %e, "inbox task has an unreadable payload; dropped");
                return Ok(None);
            }
        };
        let trigger = crate::task::trigger(&request, event);

        // Hold the task (unacknowledged, in order) while the database is
        // down: the turn would pay for completions it cannot charge.
        let draining = || self.runtime.is_draining();
        if let Err(e) = retry_transient("starting a turn", Patience::UNTIL_BACK, &draining, || {
            self.runtime.stores.check_available()
        })
        .await
        {
            return Err(HandlerError::new(format!(
                "the database is unavailable; the task stays in the inbox: {e}"
            )));
        }

        // A spent budget pauses the seat: its tasks wait until the budget
        // is reset, raised (a new revision) or starts a new period.
        self.wait_while_paused().await?;

        let node = &self.runtime.node;
        // A message in a conversation where this seat's coding agent waits
        // for an answer is that answer: the parked turn goes on with it.
        let resumed = match &self.runtime.sandbox {
            Some(sandbox) => sandbox.claim_answer(handle, &request).await,
            None => None,
        }
        .and_then(|original| {
            let request = TaskRequest::from_event(&original).ok()?;
            Some((original, request))
        });
        let (event, request, trigger) = match &resumed {
            Some((original, request)) => {
                constituents.push(original.id);
                let trigger = crate::task::trigger(request, original);
                (original, request.clone(), trigger)
            }
            None => (&**event, request, trigger),
        };
        if let Some(sandbox) = &self.runtime.sandbox {
            sandbox.set_trigger(handle, event);
        }
        // A turn suspended by `run_sandbox` waits for its run, then runs
        // again from its journal, where the call now answers.
        let (outcome, journal) = loop {
            let (outcome, journal) = self.run_once(event, &request, &trigger).await?;
            let suspended = matches!(
                outcome.failure.as_ref().map(|f| &f.reason),
                Some(crewlet_turn::FailureReason::Suspended { .. })
            );
            let Some(sandbox) = self.runtime.sandbox.as_ref().filter(|_| suspended) else {
                break (outcome, journal);
            };
            self.seat.set_state(SeatState::AwaitingSandbox);
            tracing::info!(agent = handle, task_id = %outcome.task_id, "the turn waits for its coding agent in the sandbox");
            let draining = || self.runtime.is_draining();
            match sandbox.wait(handle, outcome.turn_id, &draining).await {
                Ok(crate::sandbox::Waited::Done) => {}
                Ok(crate::sandbox::Waited::Parked) => {
                    // The turn ends unfinished (its journal kept) until the
                    // answer comes; the seat takes other work meanwhile.
                    self.seat.set_state(SeatState::Idle);
                    self.seat.handled.insert(event.id);
                    self.seat.handled.insert(delivery.event.id);
                    tracing::info!(agent = handle, task_id = %outcome.task_id, "the turn is parked until its coding agent's question is answered");
                    return Ok(None);
                }
                Err(()) => {
                    return Err(HandlerError::new(
                        "the engine stops while a coding agent works; the task stays in the inbox and its turn goes on after the restart",
                    ));
                }
            }
        };
        if let Some(sandbox) = &self.runtime.sandbox {
            sandbox.finish_turn(handle, outcome.turn_id).await;
        }
        if outcome
            .failure
            .as_ref()
            .is_some_and(|f| f.reason == crewlet_turn::FailureReason::Fenced)
        {
            return Err(HandlerError::new(
                "the seat moved to another node mid-turn; its new holder resumes the turn",
            ));
        }
        if outcome.should_retry() {
            warn!(agent = handle, task_id = %outcome.task_id, attempt = delivery.attempt,
                  "turn could not be recorded (database unavailable); the task goes back to the inbox");
            return Err(HandlerError::new(
                "the database became unavailable during the turn; the task will run again",
            ));
        }
        let fence = journal.1;
        let journal = journal.0;
        crate::fleet::work::record(
            &self.runtime.stores,
            handle,
            constituents,
            &outcome,
            &node.incarnation,
            fence.as_ref(),
            journal.task_key(),
        )
        .await;
        if let Some(crewlet_turn::TurnFailure {
            reason: crewlet_turn::FailureReason::BudgetExhausted(refusal),
            ..
        }) = &outcome.failure
        {
            warn!(
                agent = handle,
                budget = refusal.budget_type.as_str(),
                used = refusal.used_tokens,
                max = refusal.max_tokens,
                "token budget spent; the seat pauses until it is raised or reset"
            );
            *self.seat.paused.lock() = Some(refusal.clone());
        }
        if let (Some(asks), Some(ask)) = (&self.runtime.asks, &request.ask) {
            asks.answered(handle, ask, &outcome).await;
        }
        // Learning from the turn before the seat takes its next task, so
        // that task already sees what this one taught (the global turn
        // slot is free again; only this seat waits).
        if let Some(learning) = &self.runtime.learning {
            let reflection = learning
                .reflect(&self.seat.profile, &trigger, &outcome)
                .instrument(crewlet_telemetry::span_from_event("reflect", event))
                .await;
            debug!(agent = handle, task_id = %outcome.task_id, skipped = reflection.skipped.unwrap_or("-"),
                   episode = reflection.episode_recorded, "reflection done");
        }
        self.seat.handled.insert(event.id);
        self.seat.handled.insert(delivery.event.id);
        debug!(agent = handle, task_id = %outcome.task_id, decision = outcome.decision.as_str(), "turn ended");
        Ok(Some(outcome))
    }
}

/// The handler of a seat's control topic (`crewlet.agent.{handle}.control`):
/// `seat_control` commands for the seat wherever it runs (the member is
/// attached and detached with its inbox's). `resume` makes a seat paused
/// by a spent budget check it at once; other commands are logged and
/// dropped.
pub(crate) struct ControlHandler {
    pub seat: Arc<SeatRuntime>,
}

#[async_trait]
impl EventHandler for ControlHandler {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        let event = &delivery.event;
        if event.event_type != EventType::SeatControl {
            return Ok(());
        }
        match event.payload["command"].as_str() {
            Some("resume") => {
                debug!(agent = %self.seat.seat.handle, "resume on the control topic");
                self.seat.wake_paused();
            }
            other => {
                debug!(agent = %self.seat.seat.handle, command = ?other, "unknown seat control command; dropped");
            }
        }
        Ok(())
    }
}
