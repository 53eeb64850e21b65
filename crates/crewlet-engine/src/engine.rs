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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use crewlet_api::{AgentView, EngineView, ToolView};
use crewlet_backends::{ArchiveMembers, EventArchive};
use crewlet_config::{Company, Organization, Seat, SeatKind};
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_integrations::McpHub;
use crewlet_llm::LlmRegistry;
use crewlet_queue::{EventQueue, SubscribeOptions, Subscription, topics};
use crewlet_store::Stores;
use crewlet_turn::{
    Colleague, CompanyProfile, SeatProfile, TurnEngine, TurnSettings, UsageSummary, Visibility,
};
use futures::StreamExt;
use serde_json::json;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::error::EngineError;
use crate::hooks::{self, Hook, TASK_STATE_EVENTS};
use crate::inbox::Inbox;
use crate::llm::{build_registry, role_llm};
use crate::maintenance::{MAINTENANCE_INTERVAL, Maintenance};
use crate::router::{NotificationRouter, RouterHandler};
use crate::scheduler::{FiredTask, Scheduler};
use crate::seat::{InboxHandler, SeatRuntime, SeatState, TurnRuntime};
use crate::sink::{QueueEventSink, publish_event};
use crate::task::{TaskRequest, derived_task_id};
use crate::tools::ToolCatalog;
use crate::tools::builtin::LookupColleague;
use crewlet_backends::Backends;

/// Looks up an environment variable.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The `source` of the engine's own events.
const EVENT_SOURCE: &str = "engine";
/// Seats subscribing to their inboxes at once during boot.
const SUBSCRIBE_CONCURRENCY: usize = 32;

/// How an engine behaves beyond what the company says.
#[derive(Clone)]
pub struct EngineOptions {
    /// How long shutdown waits for running turns.
    pub drain_timeout: Duration,
    /// Name of this process in schedule claims.
    pub node_name: String,
    /// Start the company's MCP servers.
    pub start_mcp: bool,
    /// Consume `crewlet.notifications.inbound`.
    pub run_router: bool,
    /// Fire schedules (also needs `scheduling.enabled` in the company).
    pub run_scheduler: bool,
    /// Stream completions so turns publish live `agent_turn_progress`.
    pub stream_progress: bool,
    /// Where `${VAR}` references of providers and MCP servers are looked up.
    /// Default: the process environment, only the names the default Tier A
    /// `security.company_env` allows (`crewlet run` uses the bootstrap's).
    pub env: EnvLookup,
    /// Store upkeep (partitions ahead, webhook claim GC) at boot and then
    /// this often; `None` turns it off. Default 24 h ([`MAINTENANCE_INTERVAL`]).
    pub maintenance_interval: Option<Duration>,
    /// Whether that upkeep deletes old webhook delivery claims. Turn it off
    /// when an API in the same process already does (`crewlet run` does so
    /// when it serves the embedded API).
    pub gc_webhook_deliveries: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            drain_timeout: Duration::from_secs(30),
            node_name: default_node_name(),
            start_mcp: true,
            run_router: true,
            run_scheduler: true,
            stream_progress: true,
            env: crewlet_config::Security::default().company_process_env(),
            maintenance_interval: Some(MAINTENANCE_INTERVAL),
            gc_webhook_deliveries: true,
        }
    }
}

impl std::fmt::Debug for EngineOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineOptions")
            .field("drain_timeout", &self.drain_timeout)
            .field("node_name", &self.node_name)
            .field("start_mcp", &self.start_mcp)
            .field("run_router", &self.run_router)
            .field("run_scheduler", &self.run_scheduler)
            .field("stream_progress", &self.stream_progress)
            .field("maintenance_interval", &self.maintenance_interval)
            .field("gc_webhook_deliveries", &self.gc_webhook_deliveries)
            .finish_non_exhaustive()
    }
}

fn default_node_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "engine".into());
    format!("{host}-{}", std::process::id())
}

/// Builds and starts an [`Engine`].
pub struct EngineBuilder {
    company: Company,
    revision_id: Option<i64>,
    queue: Arc<dyn EventQueue>,
    stores: Stores,
    archive: Option<Arc<EventArchive>>,
    options: EngineOptions,
    llm: Option<LlmRegistry>,
}

impl EngineBuilder {
    /// An engine for `company` on `backends` (whose queue node already has
    /// the event archive installed; the engine runs members of its group).
    pub fn new(company: Company, backends: &Backends) -> Self {
        Self {
            company,
            revision_id: None,
            queue: backends.queue.clone(),
            stores: backends.stores.clone(),
            archive: Some(backends.archive.clone()),
            options: EngineOptions::default(),
            llm: None,
        }
    }

    /// The stored revision `company` comes from.
    pub fn revision(mut self, revision_id: Option<i64>) -> Self {
        self.revision_id = revision_id;
        self
    }

    pub fn options(mut self, options: EngineOptions) -> Self {
        self.options = options;
        self
    }

    /// Uses these providers instead of building `providers.llm`.
    pub fn llm(mut self, registry: LlmRegistry) -> Self {
        self.llm = Some(registry);
        self
    }

    /// A callback for every task state change (see [`Engine::on_task_state_change`]);
    /// registered now, so it sees the first task.
    pub fn on_task_state_change(&self, callback: impl Fn(&Event) + Send + Sync + 'static) -> Hook {
        hooks::register(self.queue.as_ref(), &TASK_STATE_EVENTS, Arc::new(callback))
    }

    /// A callback for every `agent_spawned` (see [`Engine::on_agent_spawn`]);
    /// registered now, so it sees the seats spawned at boot.
    pub fn on_agent_spawn(&self, callback: impl Fn(&Event) + Send + Sync + 'static) -> Hook {
        hooks::register(
            self.queue.as_ref(),
            &[EventType::AgentSpawned],
            Arc::new(callback),
        )
    }

    /// Boots the company (see the module docs) and returns the running engine.
    pub async fn start(self) -> Result<Engine, EngineError> {
        let started = Instant::now();
        let company = Arc::new(self.company);
        let org = Arc::new(company.organization());
        // Keys that do nothing yet and references that resolve to nothing:
        // the file is valid, but the operator should know.
        for w in company.warnings() {
            warn!(path = %w.path, "company setting: {}", w.message);
        }
        let options = self.options;
        let queue = self.queue;
        let stores = self.stores;
        // Every credential of the company (model keys, webhook secrets, bot
        // and account tokens) is redacted from logs and spans from now on,
        // whether or not anything means to log it.
        crewlet_telemetry::register_secrets(crewlet_telemetry::secrets_in_company(
            &company,
            |name| (options.env)(name),
        ));

        let llm = match self.llm {
            Some(r) => r,
            None => build_registry(&company, options.env.as_ref()).0,
        };

        let catalog = Arc::new(ToolCatalog::new());
        catalog.add_builtin(Arc::new(LookupColleague::new(org.clone())), Visibility::All);
        let mut mcp_failures = Vec::new();
        let mut hub = None;
        if options.start_mcp && !company.mcp_servers.is_empty() {
            let started =
                crate::tools::mcp::start(&company, &org, &catalog.registry, options.env.as_ref())
                    .await;
            for (tool, server) in &started.tools {
                catalog.set_provider(tool, server);
            }
            mcp_failures = started.failures;
            hub = Some(started.hub);
        }

        let mut seats = HashMap::new();
        let mut order = Vec::new();
        for seat in org.agents() {
            let profile = seat_profile(&company, &org, seat);
            seats.insert(
                seat.handle.clone(),
                Arc::new(SeatRuntime::new(seat.clone(), profile)),
            );
            order.push(seat.handle.clone());
        }
        let seats = Arc::new(seats);
        let sink = Arc::new(QueueEventSink::new(
            queue.clone(),
            seats.clone(),
            self.archive.as_ref().map(|a| a.writer().clone()),
        ));
        let te = &company.turn_engine;
        let settings = TurnSettings {
            max_iterations: te.max_iterations,
            plan_round_cap: te.plan_max_tool_rounds,
            execute_round_cap: te.max_tool_rounds,
            rescue_rounds: te.plan_rescue_rounds,
            max_delegation_depth: te.delegation_depth_limit,
            turn_timeout: Duration::from_secs(te.turn_timeout_seconds.max(1)),
            stream: options.stream_progress,
            source: "engine.turn".into(),
            ..TurnSettings::default()
        };
        let profile = CompanyProfile {
            name: company.name.clone(),
            mission: company.mission.clone().unwrap_or_default(),
            vision: company.vision.clone().unwrap_or_default(),
            policies: company.policies.clone(),
            token_budget: company.token_budget,
        };
        let turns = Arc::new(
            TurnEngine::new(profile, llm, stores.ledger.clone(), sink)
                .with_tools(catalog.registry.clone())
                .with_settings(settings),
        );
        let max_turns = usize::try_from(te.max_concurrent_turns).unwrap_or(usize::MAX);
        let runtime = Arc::new(TurnRuntime::new(turns, stores.clone(), max_turns));

        let shared = Arc::new(Shared {
            company: company.clone(),
            org: org.clone(),
            revision_id: self.revision_id,
            queue: queue.clone(),
            stores: stores.clone(),
            archive: self.archive,
            archive_members: tokio::sync::Mutex::new(None),
            seats: seats.clone(),
            order,
            runtime,
            catalog,
            router: Mutex::new(None),
            scheduler: Mutex::new(None),
            subscriptions: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            mcp: tokio::sync::Mutex::new(hub),
            ready: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            started_at: Utc::now(),
            options: options.clone(),
        });
        let engine = Engine { shared };

        let boot = TraceContext::new_root();
        engine
            .publish(
                Event::new(EventType::OrgStarted, EVENT_SOURCE)
                    .with_summary(format!(
                        "{} started with {} agent seats",
                        company.name,
                        seats.len()
                    ))
                    .with_trace(boot)
                    .with_payload(json!({
                        "company": company.name,
                        "revision_id": engine.shared.revision_id,
                        "agent_seats": seats.len(),
                        "human_seats": org.seats().len() - seats.len(),
                        "node": options.node_name,
                    })),
            )
            .await;
        for failure in mcp_failures {
            engine.publish(failure.with_trace(boot.child())).await;
        }

        // Events the inline writes could not store, and the raw webhooks.
        if let Some(archive) = &engine.shared.archive {
            match archive.subscribe().await {
                Ok(members) => *engine.shared.archive_members.lock().await = Some(members),
                Err(e) => {
                    engine.shutdown().await;
                    return Err(e.into());
                }
            }
        }

        // Inboxes: one member per seat.
        let subscribed: Vec<Result<(String, Subscription), EngineError>> =
            futures::stream::iter(engine.shared.order.clone())
                .map(|handle| {
                    let engine = engine.clone();
                    async move {
                        let seat = engine.seat(&handle).ok_or_else(|| EngineError::NotFound {
                            what: "seat",
                            key: handle.clone(),
                        })?;
                        let route = topics::agent_inbox(&handle);
                        let handler = Arc::new(InboxHandler {
                            seat: seat.clone(),
                            runtime: engine.shared.runtime.clone(),
                        });
                        // Prefetch 1: a seat runs one turn at a time, so it
                        // must not hoard inbox mail another engine could start.
                        let sub = engine
                            .shared
                            .queue
                            .subscribe_with(
                                &route.topic,
                                &route.group,
                                handler,
                                SubscribeOptions::default().with_prefetch(1),
                            )
                            .await?;
                        seat.set_state(SeatState::Idle);
                        Ok((handle, sub))
                    }
                })
                .buffer_unordered(SUBSCRIBE_CONCURRENCY)
                .collect()
                .await;
        let mut failed = None;
        for r in subscribed {
            match r {
                Ok((handle, sub)) => lock(&engine.shared.subscriptions).push((handle, sub)),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        if let Some(e) = failed {
            engine.shutdown().await;
            return Err(e);
        }
        for handle in &engine.shared.order {
            let Some(seat) = engine.seat(handle) else {
                continue;
            };
            let s = &seat.seat;
            engine
                .publish(
                    Event::new(EventType::AgentSpawned, EVENT_SOURCE)
                        .with_summary(format!("{} ({}) spawned", s.handle, s.name))
                        .with_agent(s.agent_id, s.name.as_str())
                        .with_trace(boot.child())
                        .with_agent_handle(s.handle.as_str())
                        .with_payload(json!({
                            "handle": s.handle,
                            "name": s.name,
                            "unit": s.unit_path,
                            "manager": s.manager,
                            "inbox": topics::agent_inbox(&s.handle).topic,
                            "tools": engine.shared.catalog.registry.tools_for(&s.handle).len(),
                        })),
                )
                .await;
        }

        if options.run_router {
            let router = Arc::new(NotificationRouter::new(
                &company,
                org.clone(),
                queue.clone(),
                stores.follows.clone(),
                stores.webhooks.clone(),
            ));
            match queue
                .subscribe(
                    topics::NOTIFICATIONS_INBOUND,
                    topics::NOTIFICATIONS_INBOUND_GROUP,
                    Arc::new(RouterHandler(router.clone())),
                )
                .await
            {
                Ok(sub) => lock(&engine.shared.subscriptions).push(("router".into(), sub)),
                Err(e) => {
                    engine.shutdown().await;
                    return Err(e.into());
                }
            }
            *lock(&engine.shared.router) = Some(router);
        }

        let (scheduler, problems) = Scheduler::new(
            &company,
            org.clone(),
            queue.clone(),
            stores.schedules.clone(),
            options.node_name.clone(),
        );
        for p in &problems {
            warn!(problem = %p, "schedule left out");
        }
        let scheduler = Arc::new(scheduler);
        if options.run_scheduler && company.scheduling.enabled && !scheduler.entries().is_empty() {
            let tick = Duration::from_secs(u64::from(company.scheduling.tick_seconds.max(1)));
            lock(&engine.shared.tasks).push(scheduler.clone().spawn(tick));
        }
        *lock(&engine.shared.scheduler) = Some(scheduler.clone());

        if let Some(every) = options.maintenance_interval {
            let upkeep =
                Maintenance::new(stores.clone()).gc_webhooks(options.gc_webhook_deliveries);
            lock(&engine.shared.tasks).push(upkeep.spawn(every));
        }

        engine.shared.ready.store(true, Ordering::Release);
        info!(
            company = %company.name,
            revision_id = engine.shared.revision_id.map_or_else(|| "-".to_owned(), |r| r.to_string()),
            agent_seats = seats.len(),
            human_seats = org.seats().len() - seats.len(),
            tools = engine.shared.catalog.registry.len(),
            schedules = scheduler.entries().len(),
            boot_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            event = "org_started",
            "engine running"
        );
        Ok(engine)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn colleague(org: &Organization, handle: &str) -> Option<Colleague> {
    let s = org.seat(handle)?;
    Some(match s.kind {
        SeatKind::Agent => Colleague::agent(s.name.clone(), s.handle.clone()),
        SeatKind::Human => Colleague::human(s.name.clone(), s.handle.clone()),
    })
}

/// What a turn knows about a seat.
fn seat_profile(company: &Company, org: &Organization, seat: &Seat) -> SeatProfile {
    let role = &seat.role;
    let mut p = SeatProfile::new(&company.name, seat.handle.clone(), seat.name.clone());
    p.agent_id = seat.agent_id;
    p.goal = role.goal.clone().unwrap_or_default();
    p.backstory = role.backstory.clone().unwrap_or_default();
    p.responsibilities = role.responsibilities.clone();
    p.guidelines = role.behavioral_guidelines.clone();
    p.manager_chain = seat
        .manager_chain
        .iter()
        .filter_map(|h| colleague(org, h))
        .collect();
    p.reports = seat
        .reports
        .iter()
        .filter_map(|h| colleague(org, h))
        .collect();
    p.token_budget = role.token_budget;
    p.llm = role_llm(company, role);
    p
}

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
    router: Mutex<Option<Arc<NotificationRouter>>>,
    scheduler: Mutex<Option<Arc<Scheduler>>>,
    subscriptions: Mutex<Vec<(String, Subscription)>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    mcp: tokio::sync::Mutex<Option<McpHub>>,
    ready: AtomicBool,
    stopped: AtomicBool,
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
    pub fn running_turns(&self) -> usize {
        self.shared.runtime.running()
    }

    /// Tokens used per agent and in total since this engine started
    /// (`summary.agents["<agent id>"].tokens`, `summary.engine`).
    pub fn usage_summary(&self) -> UsageSummary {
        self.shared.runtime.turns.summary()
    }

    /// The notification router, when this engine runs one.
    pub fn router(&self) -> Option<Arc<NotificationRouter>> {
        lock(&self.shared.router).clone()
    }

    /// Fires the schedules due in `(after, until]` now (the tick loop does
    /// this every `scheduling.tick_seconds`); claims keep it at most once.
    pub async fn fire_schedules(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Vec<FiredTask> {
        let scheduler = lock(&self.shared.scheduler).clone();
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
        if let Some(router) = lock(&shared.router).as_ref() {
            router.stop();
        }
        // The scheduler and the store maintenance.
        for task in lock(&shared.tasks).drain(..) {
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
        let subs: Vec<(String, Subscription)> = std::mem::take(&mut *lock(&shared.subscriptions));
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
}
