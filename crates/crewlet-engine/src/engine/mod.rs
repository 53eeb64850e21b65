//! The [`Engine`]: one company running on a queue and stores.
//!
//! Boot ([`EngineBuilder::start`]): resolve the organization, build the
//! model providers (expanding `${VAR}`), register the builtin tools, start
//! the MCP servers and register their tools, create one runtime per agent
//! seat, publish `org_started`, subscribe each seat to its inbox
//! (`crewlet.agent.{handle}.inbox`, group `agent-{handle}`) and publish
//! `agent_spawned`, then start the notification router, the scheduler and
//! the store maintenance task (partitions ahead, webhook claim GC:
//! [`crate::maintenance`]).
//!
//! Shutdown ([`Engine::shutdown`]): stop taking work (turns not started go
//! back to their inboxes), let running turns finish within the drain
//! timeout, detach, publish `agent_terminated` per seat and `org_stopped`,
//! stop the MCP servers.

mod builder;
mod handover;
mod hosting;
mod options;
mod profile;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use crewlet_api::{AgentView, EngineView, RunningCompany, ToolView};
use crewlet_backends::{ArchiveMembers, EventArchive};
use crewlet_config::{Company, Organization, SeatKind};
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_integrations::McpHub;
use crewlet_queue::{EventQueue, Subscription};
use crewlet_store::Stores;
use crewlet_turn::UsageSummary;
use serde_json::json;
use tokio::task::JoinHandle;
use tracing::{info, warn};

pub use builder::EngineBuilder;
pub(crate) use builder::{company_profile, turn_settings};
pub use options::{EngineOptions, EnvLookup, FleetHandles};
pub use profile::seat_profile;

use crate::error::EngineError;
use crate::hooks::{self, Hook, TASK_STATE_EVENTS};
use crate::inbox::Inbox;
use crate::router::NotificationRouter;
use crate::scheduler::{FiredTask, Scheduler};
use crate::seat::{SeatRuntime, SeatState, TurnRuntime};
use crate::sink::publish_event;
use crate::task::{TaskRequest, derived_task_id};
use crate::tools::ToolCatalog;

/// The `source` of the engine's own events.
const EVENT_SOURCE: &str = "engine";

struct Shared {
    company: Arc<Company>,
    org: Arc<Organization>,
    revision_id: Option<i64>,
    queue: Arc<dyn EventQueue>,
    stores: Stores,
    archive: Option<Arc<EventArchive>>,
    /// This engine's members of the `event-store` group.
    archive_members: tokio::sync::Mutex<Option<ArchiveMembers>>,
    seats: Arc<HashMap<String, Arc<SeatRuntime>>>,
    /// Agent seat handles in org order.
    order: Vec<String>,
    runtime: Arc<TurnRuntime>,
    catalog: Arc<ToolCatalog>,
    /// The learning loop, when learning is on.
    learning: Option<Arc<crewlet_learning::Learning>>,
    /// What the seats remember (also when learning is off, for reads).
    memory: Option<crewlet_memory::MemoryStores>,
    router: Mutex<Option<Arc<NotificationRouter>>>,
    /// The company's Mattermost, when it is on and a seat has a bot.
    mattermost: Option<Arc<crate::mattermost::Mattermost>>,
    /// The seats' Mattermost websockets, once started.
    fleet: tokio::sync::Mutex<Option<crate::mattermost::Fleet>>,
    scheduler: Mutex<Option<Arc<Scheduler>>>,
    subscriptions: Mutex<Vec<(String, Subscription)>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    mcp: tokio::sync::Mutex<Option<McpHub>>,
    ready: AtomicBool,
    stopped: AtomicBool,
    /// [`Engine::begin_retire`] ran (or runs).
    retire_begun: AtomicBool,
    /// True once the engine retires in favour of a successor: its seats
    /// may be taken over.
    retiring: tokio::sync::watch::Sender<bool>,
    /// Told each time a seat taken over from the predecessor is attached.
    taken_over: tokio::sync::Notify,
    /// Seats attached (or attaching) here.
    attached: Mutex<std::collections::HashSet<String>>,
    started_at: DateTime<Utc>,
    options: EngineOptions,
}

/// What [`Engine::shutdown`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownSummary {
    /// Turns still running when the drain timeout expired.
    pub abandoned_turns: usize,
    /// Event store writes that went through and that failed (a failed
    /// inline write goes to the outbox) over the node's life.
    pub events_written: u64,
    pub event_writes_failed: u64,
}

/// A running company. Cheap to clone; clones share the engine.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("company", &self.shared.company.name)
            .field("revision_id", &self.shared.revision_id)
            .field("agent_seats", &self.shared.order.len())
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// The memory stores of this engine's seats, when learning is on.
    pub fn memory(&self) -> Option<crewlet_memory::MemoryStores> {
        self.shared.memory.clone()
    }

    /// The learning loop, when learning is on.
    pub fn learning(&self) -> Option<Arc<crewlet_learning::Learning>> {
        self.shared.learning.clone()
    }
}

impl Engine {
    pub fn company(&self) -> &Arc<Company> {
        &self.shared.company
    }

    pub fn organization(&self) -> &Arc<Organization> {
        &self.shared.org
    }

    /// The stored company revision this engine runs, when it came from one.
    pub fn revision(&self) -> Option<i64> {
        self.shared.revision_id
    }

    pub fn queue(&self) -> &Arc<dyn EventQueue> {
        &self.shared.queue
    }

    pub fn stores(&self) -> &Stores {
        &self.shared.stores
    }

    pub fn started_at(&self) -> DateTime<Utc> {
        self.shared.started_at
    }

    fn seat(&self, handle: &str) -> Option<Arc<SeatRuntime>> {
        self.shared.seats.get(handle).cloned()
    }

    /// A seat's runtime state; `None` for human seats and unknown handles.
    pub fn agent_state(&self, handle: &str) -> Option<SeatState> {
        self.seat(handle).map(|s| s.state())
    }

    /// Turns running right now.
    /// The company's tool skills as the turns see them (loaded from the
    /// Tool Skills container, kept current by the re-walk).
    pub fn tool_skills(&self) -> Arc<crewlet_turn::ToolSkills> {
        self.shared.runtime.turns.skills().clone()
    }

    pub fn running_turns(&self) -> usize {
        self.shared.runtime.running()
    }

    /// Tokens used per agent and in total since this engine started
    /// (`summary.agents["<agent id>"].tokens`, `summary.engine`).
    pub fn usage_summary(&self) -> UsageSummary {
        self.shared.runtime.turns.summary()
    }

    /// Each Mattermost seat socket's status, by handle (empty when
    /// Mattermost is off).
    pub async fn mattermost_sockets(
        &self,
    ) -> std::collections::BTreeMap<String, Arc<crewlet_integrations::mattermost::SocketStatus>>
    {
        self.shared
            .fleet
            .lock()
            .await
            .as_ref()
            .map(|f| f.statuses().clone())
            .unwrap_or_default()
    }

    /// The notification router, when this engine runs one.
    pub fn router(&self) -> Option<Arc<NotificationRouter>> {
        self.shared.router.lock().clone()
    }

    /// Fires the schedules due in `(after, until]` now (the tick loop does
    /// this every `scheduling.tick_seconds`); claims keep it at most once.
    pub async fn fire_schedules(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Vec<FiredTask> {
        let scheduler = self.shared.scheduler.lock().clone();
        match scheduler {
            Some(s) => s.fire_due(after, until).await,
            None => Vec::new(),
        }
    }

    /// Puts a task in a seat's inbox, as the router and the scheduler do.
    /// Returns the task id.
    pub async fn assign(
        &self,
        handle: &str,
        source: &str,
        content: &str,
    ) -> Result<String, EngineError> {
        let seat = self
            .shared
            .org
            .seat(handle)
            .filter(|s| s.kind == SeatKind::Agent)
            .ok_or_else(|| EngineError::NotFound {
                what: "agent seat",
                key: handle.to_owned(),
            })?;
        let task_id = derived_task_id(&uuid::Uuid::now_v7().to_string());
        let request = TaskRequest::new(handle, source, content);
        Inbox::new(self.shared.queue.as_ref())
            .post(seat, &task_id, &request, EVENT_SOURCE, None)
            .await
            .map_err(|e| e.source)?;
        Ok(task_id)
    }

    /// Calls `callback` for every task state change (`task_created`,
    /// `task_started`, `task_completed`, `task_failed`, `task_delegated`)
    /// this engine publishes. Dropping the [`Hook`] turns it off.
    pub fn on_task_state_change(&self, callback: impl Fn(&Event) + Send + Sync + 'static) -> Hook {
        hooks::register(
            self.shared.queue.as_ref(),
            &TASK_STATE_EVENTS,
            Arc::new(callback),
        )
    }

    /// Calls `callback` for every `agent_spawned` this engine publishes
    /// (register on the [`EngineBuilder`] to see the seats spawned at boot).
    pub fn on_agent_spawn(&self, callback: impl Fn(&Event) + Send + Sync + 'static) -> Hook {
        hooks::register(
            self.shared.queue.as_ref(),
            &[EventType::AgentSpawned],
            Arc::new(callback),
        )
    }

    async fn publish(&self, event: Event) {
        publish_event(self.shared.queue.as_ref(), event).await;
    }

    pub fn is_ready(&self) -> bool {
        self.shared.ready.load(Ordering::Acquire) && !self.is_draining()
    }

    pub fn is_draining(&self) -> bool {
        self.shared.runtime.is_draining()
    }

    /// Stops the engine (see the module docs). Idempotent; the queue node is
    /// left running (its owner shuts it down after).
    pub async fn shutdown(&self) -> ShutdownSummary {
        let shared = &self.shared;
        if shared.stopped.swap(true, Ordering::AcqRel) {
            return ShutdownSummary::default();
        }
        let started = Instant::now();
        shared.ready.store(false, Ordering::Release);
        shared.runtime.start_draining();
        if let Some(router) = shared.router.lock().as_ref() {
            router.stop();
        }
        // No new posts are read; what the sockets missed is re-read by the
        // next engine's backfill.
        if let Some(fleet) = shared.fleet.lock().await.take() {
            fleet.stop().await;
        }
        // The scheduler and the store maintenance.
        for task in shared.tasks.lock().drain(..) {
            task.abort();
        }
        let running = shared.runtime.running();
        if running > 0 {
            info!(
                running,
                timeout_s = shared.options.drain_timeout.as_secs(),
                "waiting for running turns to finish"
            );
        }
        let abandoned = shared.runtime.wait_idle(shared.options.drain_timeout).await;
        if abandoned > 0 {
            warn!(
                abandoned,
                "turns still running after the drain timeout; their tasks will be redelivered"
            );
        }
        let subs: Vec<(String, Subscription)> = std::mem::take(&mut *shared.subscriptions.lock());
        let close_all = futures::future::join_all(subs.into_iter().map(|(_, s)| s.close()));
        if tokio::time::timeout(Duration::from_secs(10), close_all)
            .await
            .is_err()
        {
            warn!("some inbox members did not detach in time");
        }
        let trace = TraceContext::new_root();
        let usage = self.usage_summary();
        for handle in &shared.order {
            let Some(seat) = self.seat(handle) else {
                continue;
            };
            seat.set_state(SeatState::Terminated);
            let s = &seat.seat;
            let tokens = usage
                .agents
                .get(&s.agent_id.to_string())
                .map(|a| a.tokens)
                .unwrap_or_default();
            self.publish(
                Event::new(EventType::AgentTerminated, EVENT_SOURCE)
                    .with_summary(format!("{} terminated", s.handle))
                    .with_agent(s.agent_id, s.name.as_str())
                    .with_trace(trace.child())
                    .with_agent_handle(s.handle.as_str())
                    .with_payload(json!({"handle": s.handle, "tokens": tokens})),
            )
            .await;
        }
        self.publish(
            Event::new(EventType::OrgStopped, EVENT_SOURCE)
                .with_summary(format!("{} stopped", shared.company.name))
                .with_trace(trace)
                .with_payload(json!({
                    "company": shared.company.name,
                    "abandoned_turns": abandoned,
                    "tokens": usage.engine,
                    "drain_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                })),
        )
        .await;
        if let Some(hub) = shared.mcp.lock().await.take() {
            hub.shutdown().await;
        }
        if let Some(members) = shared.archive_members.lock().await.take() {
            members.close().await;
        }
        let (written, failed, stats) = shared
            .archive
            .as_ref()
            .map(|a| (a.writer().written(), a.writer().failed_writes(), a.stats()))
            .unwrap_or_default();
        info!(
            events_written = written,
            event_writes_failed = failed,
            events_outboxed = stats.outboxed,
            events_lost = stats.lost,
            total_tokens = usage.engine.total_tokens,
            "engine stopped (events not stored yet wait on the broker's outbox)"
        );
        ShutdownSummary {
            abandoned_turns: abandoned,
            events_written: written,
            event_writes_failed: failed,
        }
    }
}

impl EngineView for Engine {
    fn agents(&self) -> Vec<AgentView> {
        self.shared
            .org
            .seats()
            .iter()
            .map(|s| {
                let mut v = AgentView::from_seat(s);
                if let Some(rt) = self.seat(&s.handle) {
                    v.state = Some(rt.state().into());
                    v.current_task = rt.current_task();
                }
                v
            })
            .collect()
    }

    fn agent(&self, id_or_handle: &str) -> Option<AgentView> {
        let org = &self.shared.org;
        let seat = org.seat(id_or_handle).or_else(|| {
            org.seats()
                .iter()
                .find(|s| s.agent_id.to_string() == id_or_handle)
        })?;
        let mut v = AgentView::from_seat(seat);
        if let Some(rt) = self.seat(&seat.handle) {
            v.state = Some(rt.state().into());
            v.current_task = rt.current_task();
        }
        Some(v)
    }

    fn tools(&self, handle: Option<&str>) -> Vec<ToolView> {
        match handle {
            Some(h) if self.shared.seats.contains_key(h) => self.shared.catalog.views(&[h]),
            Some(_) => Vec::new(),
            None => {
                let all: Vec<&str> = self.shared.order.iter().map(String::as_str).collect();
                self.shared.catalog.views(&all)
            }
        }
    }

    fn is_ready(&self) -> bool {
        Engine::is_ready(self)
    }

    fn is_draining(&self) -> bool {
        Engine::is_draining(self)
    }

    fn organization(&self) -> Option<Arc<Organization>> {
        Some(self.shared.org.clone())
    }

    fn revision_id(&self) -> Option<i64> {
        self.shared.revision_id
    }

    fn running(&self) -> Option<RunningCompany> {
        Some(RunningCompany {
            revision_id: self.shared.revision_id?,
            company: self.shared.company.clone(),
            org: self.shared.org.clone(),
        })
    }
}
