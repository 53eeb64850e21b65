//! [`EngineBuilder`]: what an engine is built from, and the boot sequence
//! of [`EngineBuilder::start`] as named steps (see the module docs of
//! [`crate::engine`] for the order and why).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::Utc;
use crewlet_backends::{Backends, EventArchive};
use crewlet_config::{Company, Organization};
use crewlet_core::{Event, EventType, TraceContext};
use crewlet_integrations::McpHub;
use crewlet_llm::{Embedder, LlmRegistry};
use crewlet_memory::{CounterpartyProfiles, MemoryStores};
use crewlet_queue::{EventQueue, SubscribeOptions, Subscription, topics};
use crewlet_store::Stores;
use crewlet_turn::{CompanyProfile, ToolSkills, TurnEngine, TurnSettings, Visibility};
use futures::StreamExt;
use serde_json::json;
use tracing::{info, warn};

use super::profile::seat_profile;
use super::{EVENT_SOURCE, Engine, EngineOptions, Shared};
use crate::error::EngineError;
use crate::hooks::{self, Hook, TASK_STATE_EVENTS};
use crate::learning::{learning_base, start_learning};
use crate::llm::{CircuitEvents, build_registry, guard_registry};
use crate::maintenance::Maintenance;
use crate::router::{NotificationRouter, RouterHandler};
use crate::scheduler::Scheduler;
use crate::seat::{InboxHandler, SeatRuntime, SeatState, TurnRuntime};
use crate::sink::QueueEventSink;
use crate::tools::ToolCatalog;
use crate::tools::builtin::LookupColleague;

/// Seats subscribing to their inboxes at once during boot.
const SUBSCRIBE_CONCURRENCY: usize = 32;

/// The key of a seat's control member among the engine's subscriptions.
pub(super) fn control_key(handle: &str) -> String {
    format!("{handle}#control")
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
    embedder: Option<Arc<dyn Embedder>>,
    memory: Option<MemoryStores>,
    knowledge: Option<Arc<dyn crewlet_integrations::knowledge::KnowledgeSearcher>>,
    skill_source: Option<Arc<dyn crewlet_integrations::knowledge::SkillSource>>,
    predecessor: Option<Engine>,
}

/// The company's tools: the builtins, and the MCP servers started for it.
struct Tools {
    catalog: Arc<ToolCatalog>,
    hub: Option<McpHub>,
    /// `mcp_server_failed` events of the servers that did not start.
    failures: Vec<Event>,
}

/// One runtime per agent seat, and their handles in org order.
struct SeatRuntimes {
    seats: Arc<HashMap<String, Arc<SeatRuntime>>>,
    order: Vec<String>,
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
            embedder: None,
            memory: None,
            knowledge: None,
            skill_source: None,
            predecessor: None,
        }
    }

    /// Boots as the successor of `running` (a new revision applied without
    /// a restart, see [`super::handover`]): the seats both run are taken
    /// over as `running` gives them up, after the caller's
    /// [`Engine::begin_retire`] on it.
    pub fn taking_over(mut self, running: Engine) -> Self {
        self.predecessor = Some(running);
        self
    }

    /// Uses these memory stores instead of opening them beside the
    /// engine's stores (a process shares one set across engines and its
    /// API).
    pub fn memory(mut self, memory: MemoryStores) -> Self {
        self.memory = Some(memory);
        self
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

    /// Searches this knowledge base for the `## Relevant knowledge` block
    /// instead of the company's Confluence or Plane.
    pub fn knowledge(
        mut self,
        searcher: Arc<dyn crewlet_integrations::knowledge::KnowledgeSearcher>,
    ) -> Self {
        self.knowledge = Some(searcher);
        self
    }

    /// Reads the tool skills from `source` instead of the company's
    /// Confluence or Plane.
    pub fn tool_skills(
        mut self,
        source: Arc<dyn crewlet_integrations::knowledge::SkillSource>,
    ) -> Self {
        self.skill_source = Some(source);
        self
    }

    /// Uses this embedder for learning instead of building
    /// `providers.embeddings`.
    pub fn embedder(mut self, embedder: Arc<dyn Embedder>) -> Self {
        self.embedder = Some(embedder);
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

    /// Boots the company (see the module docs) and returns the running
    /// engine. A step that fails shuts down what the earlier ones started.
    pub async fn start(mut self) -> Result<Engine, EngineError> {
        let started = Instant::now();
        let predecessor = self.predecessor.take();
        let (engine, mcp_failures) = self.assemble().await;
        let boot = TraceContext::new_root();
        if predecessor.is_none() {
            engine.announce_start(boot, mcp_failures).await;
        } else {
            for failure in mcp_failures {
                engine.publish(failure.with_trace(boot.child())).await;
            }
        }
        if let Err(e) = engine.connect(boot, predecessor.as_ref()).await {
            engine.shutdown().await;
            return Err(e);
        }
        engine.start_background();
        engine.mark_ready(started);
        Ok(engine)
    }

    /// Everything up to the first publish: warnings, secrets redaction,
    /// providers, tools, seat runtimes and the turn engine.
    async fn assemble(self) -> (Engine, Vec<Event>) {
        let company = Arc::new(self.company);
        let org = Arc::new(company.organization());
        // Keys that do nothing yet and references that resolve to nothing:
        // the file is valid, but the operator should know.
        for w in company.warnings() {
            warn!(path = %w.path, "company setting: {}", w.message);
        }
        let options = self.options;
        // Every credential of the company (model keys, webhook secrets, bot
        // and account tokens) is redacted from logs and spans from now on,
        // whether or not anything means to log it.
        crewlet_telemetry::register_secrets(crewlet_telemetry::secrets_in_company(
            &company,
            |name| (options.env)(name),
        ));
        if options.pull_models {
            crate::local_llm::pull_missing(&company).await;
        }
        let llm = match self.llm {
            Some(r) => r,
            None => {
                let (registry, problems) = build_registry(&company, options.env.as_ref());
                crate::local_llm::announce_fallbacks(&company, &org, &problems);
                registry
            }
        };
        let llm = guard_registry(
            llm,
            &company,
            self.stores.quotas.clone(),
            Some(Arc::new(CircuitEvents::new(
                self.queue.clone(),
                EVENT_SOURCE,
            ))),
        );
        let base = learning_base(
            &company,
            &self.stores,
            self.embedder,
            self.memory,
            options.env.as_ref(),
        )
        .await;
        let notes = base.as_ref().map(|b| b.memory.profiles.clone());
        let mattermost = crate::mattermost::Mattermost::from_company(&company, &org, &options.env);
        let tools = start_tools(&company, &org, &options, notes).await;
        if let Some(mm) = &mattermost {
            for (tool, visibility) in crate::mattermost::tools(mm, self.stores.follows.clone()) {
                tools.catalog.add_builtin(tool, visibility);
            }
        }
        let asks = crate::colleagues::Asks::new(
            org.clone(),
            self.queue.clone(),
            crate::colleagues::AskSettings {
                max_depth: company.turn_engine.delegation_depth_limit,
                escalate_after: options.ask_escalate_after,
                can_wait: company.turn_engine.max_concurrent_turns > 1,
            },
            mattermost.clone(),
            crate::slack::SlackSeats::from_company(&company, &org, &options.env),
        );
        tools.catalog.add_builtin(
            Arc::new(crate::colleagues::AskColleague(asks.clone())),
            Visibility::All,
        );
        crate::tools::subagents::add_spawn_tools(&tools.catalog);
        let sandbox = crate::sandbox::SandboxService::from_company(
            &company,
            &org,
            &options.env,
            self.stores.sandbox_runs.clone(),
            self.queue.clone(),
            self.stores.ledger.clone(),
            crate::sandbox::ChatSurfaces {
                mattermost: mattermost.clone(),
                slack: crate::slack::SlackSeats::from_company(&company, &org, &options.env),
                follows: Some(self.stores.follows.clone()),
            },
        )
        .await;
        if let Some(sandbox) = &sandbox {
            tools.catalog.add_builtin(
                Arc::new(crate::sandbox::RunSandboxTool(sandbox.clone())),
                Visibility::roles(sandbox.handles()),
            );
        }
        let searcher = self
            .knowledge
            .or_else(|| crate::knowledge::from_company(&company, &options.env));
        if let Some(searcher) = &searcher {
            tools.catalog.add_builtin(
                Arc::new(crate::knowledge::SearchKnowledge::new(searcher.clone())),
                Visibility::All,
            );
        }
        let skills = Arc::new(ToolSkills::new());
        skills.set_variables(crate::tool_skills::variables(&company, &options.env));
        let skill_source = self.skill_source.or_else(|| {
            crate::tool_skills::from_company(&company, &options.env, &options.tool_skills)
        });
        let skill_sync = match skill_source {
            Some(source) => {
                let loaded = crate::tool_skills::boot(source.as_ref(), &skills).await;
                Some(crate::tool_skills::spawn(
                    source,
                    skills.clone(),
                    options.tool_skills.clone(),
                    loaded,
                ))
            }
            None => None,
        };
        let SeatRuntimes { seats, order } = seat_runtimes(&company, &org);
        let sink: Arc<dyn crewlet_turn::EventSink> = Arc::new(QueueEventSink::new(
            self.queue.clone(),
            seats.clone(),
            self.archive.as_ref().map(|a| a.writer().clone()),
        ));
        let mut turns = TurnEngine::new(
            company_profile(&company),
            llm,
            self.stores.ledger.clone(),
            sink.clone(),
        )
        .with_tools(tools.catalog.registry.clone())
        .with_skills(skills)
        .with_settings(turn_settings(&company, &options))
        .with_subagents(crate::tools::subagents::subagent_settings(&company));
        let learning = base.as_ref().map(|base| {
            start_learning(&company, base, &seats, &tools.catalog, sink.clone(), &turns)
        });
        if let Some(l) = &learning {
            turns = turns.with_recall(l.clone());
        }
        if let Some(searcher) = searcher {
            let inner: Arc<dyn crewlet_turn::Recall> = match &learning {
                Some(l) => l.clone(),
                None => Arc::new(crewlet_turn::NoRecall),
            };
            let recall =
                crate::knowledge::KnowledgeRecall::new(searcher, turns.auxiliary(), inner, sink);
            turns = turns.with_recall(Arc::new(recall));
        }
        let memory = base.map(|b| b.memory);
        let max_turns =
            usize::try_from(company.turn_engine.max_concurrent_turns).unwrap_or(usize::MAX);
        let statuses: Vec<Arc<dyn crate::working::WorkingStatus>> = mattermost
            .as_ref()
            .and_then(crate::mattermost::Typing::new)
            .map(|t| Arc::new(t) as Arc<dyn crate::working::WorkingStatus>)
            .into_iter()
            .chain(
                crate::slack::SlackStatus::from_company(&company, &org, &options.env)
                    .map(|s| Arc::new(s) as Arc<dyn crate::working::WorkingStatus>),
            )
            .collect();
        let runtime = Arc::new(
            TurnRuntime::new(
                Arc::new(turns),
                self.stores.clone(),
                max_turns,
                learning.clone(),
            )
            .with_statuses(statuses)
            .with_asks(asks)
            .with_fleet(options.fleet.as_ref().map(|f| f.host.clone()))
            .with_sandbox(sandbox),
        );
        let shared = Arc::new(Shared {
            company,
            org,
            revision_id: self.revision_id,
            queue: self.queue,
            stores: self.stores,
            archive: self.archive,
            archive_members: tokio::sync::Mutex::new(None),
            seats,
            order,
            runtime,
            catalog: tools.catalog,
            learning,
            memory,
            router: Mutex::new(None),
            mattermost,
            fleet: tokio::sync::Mutex::new(None),
            scheduler: Mutex::new(None),
            subscriptions: Mutex::new(Vec::new()),
            tasks: Mutex::new(skill_sync.into_iter().collect()),
            mcp: tokio::sync::Mutex::new(tools.hub),
            ready: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            retire_begun: AtomicBool::new(false),
            retiring: tokio::sync::watch::channel(false).0,
            taken_over: tokio::sync::Notify::new(),
            attached: Mutex::new(std::collections::HashSet::new()),
            started_at: Utc::now(),
            options,
        });
        (Engine { shared }, tools.failures)
    }
}

/// The builtin tools, and the company's MCP servers when the options say
/// so; `lookup_colleague` shows the caller's notes when learning keeps them.
async fn start_tools(
    company: &Company,
    org: &Arc<Organization>,
    options: &EngineOptions,
    notes: Option<Arc<dyn CounterpartyProfiles>>,
) -> Tools {
    let catalog = Arc::new(ToolCatalog::new());
    let lookup = LookupColleague::new(org.clone());
    let lookup = match notes {
        Some(profiles) => lookup.with_profiles(profiles),
        None => lookup,
    };
    catalog.add_builtin(Arc::new(lookup), Visibility::All);
    if !options.start_mcp || company.mcp_servers.is_empty() {
        return Tools {
            catalog,
            hub: None,
            failures: Vec::new(),
        };
    }
    let started =
        crate::tools::mcp::start(company, org, &catalog.registry, options.env.as_ref()).await;
    for (tool, server) in &started.tools {
        catalog.set_provider(tool, server);
    }
    Tools {
        catalog,
        hub: Some(started.hub),
        failures: started.failures,
    }
}

fn seat_runtimes(company: &Company, org: &Organization) -> SeatRuntimes {
    let mut seats = HashMap::new();
    let mut order = Vec::new();
    for seat in org.agents() {
        let profile = seat_profile(company, org, seat);
        seats.insert(
            seat.handle.clone(),
            Arc::new(SeatRuntime::new(seat.clone(), profile)),
        );
        order.push(seat.handle.clone());
    }
    SeatRuntimes {
        seats: Arc::new(seats),
        order,
    }
}

/// The company's `turn_engine` section as the turn engine's knobs.
pub(crate) fn turn_settings(company: &Company, options: &EngineOptions) -> TurnSettings {
    let te = &company.turn_engine;
    TurnSettings {
        max_iterations: te.max_iterations,
        plan_round_cap: te.plan_max_tool_rounds,
        execute_round_cap: te.max_tool_rounds,
        rescue_rounds: te.plan_rescue_rounds,
        max_delegation_depth: te.delegation_depth_limit,
        turn_timeout: Duration::from_secs(te.turn_timeout_seconds.max(1)),
        stream: options.stream_progress,
        source: "engine.turn".into(),
        ..TurnSettings::default()
    }
}

pub(crate) fn company_profile(company: &Company) -> CompanyProfile {
    CompanyProfile {
        name: company.name.clone(),
        mission: company.mission.clone().unwrap_or_default(),
        vision: company.vision.clone().unwrap_or_default(),
        policies: company.policies.clone(),
        token_budget: company.token_budget,
        budget_period: company.budget_policy.period,
        budget_warn_at: company.budget_policy.warn_at,
    }
}

impl Engine {
    /// `org_started`, then the MCP servers that failed to start.
    async fn announce_start(&self, boot: TraceContext, mcp_failures: Vec<Event>) {
        let (company, org) = (&self.shared.company, &self.shared.org);
        let agents = self.shared.seats.len();
        self.publish(
            Event::new(EventType::OrgStarted, EVENT_SOURCE)
                .with_summary(format!(
                    "{} started with {agents} agent seats",
                    company.name
                ))
                .with_trace(boot)
                .with_payload(json!({
                    "company": company.name,
                    "revision_id": self.shared.revision_id,
                    "agent_seats": agents,
                    "human_seats": org.seats().len() - agents,
                    "node": self.shared.options.node_name,
                })),
        )
        .await;
        for failure in mcp_failures {
            self.publish(failure.with_trace(boot.child())).await;
        }
    }

    /// Joins the queue: the `event-store` group, every seat's inbox (then
    /// `agent_spawned` per seat), and the notification router.
    async fn connect(&self, boot: TraceContext, from: Option<&Engine>) -> Result<(), EngineError> {
        self.join_archive().await?;
        self.subscribe_inboxes(from).await?;
        self.announce_seats(boot, from).await;
        self.start_router().await?;
        self.start_fleet().await;
        Ok(())
    }

    /// One Mattermost websocket per seat with a bot, when this engine runs
    /// the router (the sockets feed it).
    async fn start_fleet(&self) {
        let Some(mm) = &self.shared.mattermost else {
            return;
        };
        if !self.shared.options.run_router {
            return;
        }
        let fleet = crate::mattermost::Fleet::start(
            mm,
            self.shared.queue.clone(),
            self.shared.stores.follows.clone(),
            self.shared.options.mattermost.clone(),
        );
        *self.shared.fleet.lock().await = Some(fleet);
    }

    /// Events the inline writes could not store, and the raw webhooks.
    async fn join_archive(&self) -> Result<(), EngineError> {
        if let Some(archive) = &self.shared.archive {
            let members = archive.subscribe().await?;
            *self.shared.archive_members.lock().await = Some(members);
        }
        Ok(())
    }

    /// One inbox member per seat; each seat is idle once subscribed. A
    /// seat the predecessor runs too is attached once it gives it up.
    async fn subscribe_inboxes(&self, from: Option<&Engine>) -> Result<(), EngineError> {
        let (kept, fresh): (Vec<String>, Vec<String>) = self
            .shared
            .order
            .iter()
            .cloned()
            .partition(|h| from.is_some_and(|f| f.shared.seats.contains_key(h)));
        if let Some(from) = from {
            for handle in kept {
                // Attached once the predecessor gives it up, not before.
                self.mark_attached(&handle);
                self.take_over_seat(from.clone(), handle);
            }
        }
        // A fleet node attaches only the seats it holds (more as it claims).
        let fresh: Vec<String> = fresh
            .into_iter()
            .filter(|h| self.hosts(h) && self.mark_attached(h))
            .collect();
        let subscribed: Vec<Result<(String, Subscription), EngineError>> =
            futures::stream::iter(fresh)
                .map(|handle| self.subscribe_inbox(handle))
                .buffer_unordered(SUBSCRIBE_CONCURRENCY)
                .collect()
                .await;
        let mut failed = None;
        for r in subscribed {
            match r {
                Ok((handle, sub)) => self.shared.subscriptions.lock().push((handle, sub)),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        failed.map_or(Ok(()), Err)
    }

    pub(super) async fn subscribe_inbox(
        &self,
        handle: String,
    ) -> Result<(String, Subscription), EngineError> {
        let seat = self.seat(&handle).ok_or_else(|| EngineError::NotFound {
            what: "seat",
            key: handle.clone(),
        })?;
        let route = topics::agent_inbox(&handle);
        let handler = Arc::new(InboxHandler {
            seat: seat.clone(),
            runtime: self.shared.runtime.clone(),
            queue: self.shared.queue.clone(),
        });
        // A seat runs one turn at a time: its member takes one batch (the
        // tasks that waited, split by conversation) and no more, so it does
        // not hoard mail another engine could start.
        let company = &self.shared.company;
        let batch = crate::coalesce::batch_options(
            company.notification_coalesce_window_seconds,
            company.notification_coalesce_max_batch,
        );
        let sub = self
            .shared
            .queue
            .subscribe_with(
                &route.topic,
                &route.group,
                handler,
                SubscribeOptions::default()
                    .with_prefetch(1)
                    .with_batch(batch),
            )
            .await?;
        // The seat's control topic, attached with its inbox.
        let control = topics::agent_control(&handle);
        match self
            .shared
            .queue
            .subscribe(
                &control.topic,
                &control.group,
                Arc::new(crate::seat::ControlHandler { seat: seat.clone() }),
            )
            .await
        {
            Ok(c) => self
                .shared
                .subscriptions
                .lock()
                .push((control_key(&handle), c)),
            Err(e) => {
                warn!(agent = %handle, error = %e, "cannot attach the seat's control topic; a paused seat resumes on its own poll")
            }
        }
        seat.set_state(SeatState::Idle);
        Ok((handle, sub))
    }

    /// `agent_spawned` per seat, in org order; after a predecessor, only for
    /// the new seats, and `role_updated` for the changed ones.
    async fn announce_seats(&self, boot: TraceContext, from: Option<&Engine>) {
        for handle in &self.shared.order {
            let Some(seat) = self.seat(handle) else {
                continue;
            };
            let s = &seat.seat;
            if let Some(before) = from.and_then(|f| f.seat(handle)) {
                let changed = super::handover::seat_changes(&before.seat, s);
                if !changed.is_empty() {
                    self.announce_role_updated(&before.seat, s, &changed, boot)
                        .await;
                }
                continue;
            }
            self.publish(
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
                        "tools": self.shared.catalog.registry.tools_for(&s.handle).len(),
                    })),
            )
            .await;
        }
    }

    /// The notification router on `crewlet.notifications.inbound`, when the
    /// options run one.
    async fn start_router(&self) -> Result<(), EngineError> {
        if !self.shared.options.run_router {
            return Ok(());
        }
        let stores = &self.shared.stores;
        let router = Arc::new(NotificationRouter::new(
            &self.shared.company,
            self.shared.org.clone(),
            self.shared.queue.clone(),
            stores.follows.clone(),
            stores.webhooks.clone(),
        ));
        let sub = self
            .shared
            .queue
            .subscribe(
                topics::NOTIFICATIONS_INBOUND,
                topics::NOTIFICATIONS_INBOUND_GROUP,
                Arc::new(RouterHandler(router.clone())),
            )
            .await?;
        self.shared
            .subscriptions
            .lock()
            .push(("router".into(), sub));
        *self.shared.router.lock() = Some(router);
        Ok(())
    }

    /// The scheduler's tick loop and the store upkeep, as the company and
    /// the options ask.
    fn start_background(&self) {
        let (company, options) = (&self.shared.company, &self.shared.options);
        let (scheduler, problems) = Scheduler::new(
            company,
            self.shared.org.clone(),
            self.shared.queue.clone(),
            self.shared.stores.schedules.clone(),
            options.node_name.clone(),
        );
        for p in &problems {
            warn!(problem = %p, "schedule left out");
        }
        let scheduler = Arc::new(scheduler);
        if options.run_scheduler && company.scheduling.enabled && !scheduler.entries().is_empty() {
            let tick = Duration::from_secs(u64::from(company.scheduling.tick_seconds.max(1)));
            let duties = options.fleet.as_ref().map(|f| f.duties.clone());
            self.shared
                .tasks
                .lock()
                .push(scheduler.clone().spawn(tick, duties));
        }
        *self.shared.scheduler.lock() = Some(scheduler);
        if let Some(reaper) = self
            .shared
            .runtime
            .sandbox
            .as_ref()
            .and_then(|s| s.spawn_reaper())
        {
            self.shared.tasks.lock().push(reaper);
        }
        if let Some(every) = options.maintenance_interval {
            let upkeep = Maintenance::new(self.shared.stores.clone())
                .gc_webhooks(options.gc_webhook_deliveries)
                .learning(self.shared.learning.clone());
            let duties = options.fleet.as_ref().map(|f| f.duties.clone());
            self.shared.tasks.lock().push(upkeep.spawn(every, duties));
        }
    }

    /// Ready for `/ready`, and the boot line.
    fn mark_ready(&self, started: Instant) {
        self.shared.ready.store(true, Ordering::Release);
        let (company, org) = (&self.shared.company, &self.shared.org);
        let agents = self.shared.seats.len();
        let schedules = self
            .shared
            .scheduler
            .lock()
            .as_ref()
            .map_or(0, |s| s.entries().len());
        info!(
            company = %company.name,
            revision_id = self.shared.revision_id.map_or_else(|| "-".to_owned(), |r| r.to_string()),
            agent_seats = agents,
            human_seats = org.seats().len() - agents,
            tools = self.shared.catalog.registry.len(),
            schedules,
            boot_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            event = "org_started",
            "engine running"
        );
    }
}
