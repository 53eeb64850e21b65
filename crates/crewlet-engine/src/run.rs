//! `crewlet run`: the engine process, with the embedded API when
//! `api.port > 0` (or `--api-port`).
//!
//! 1. Connect the queue and the stores (migrations run when a database is
//!    configured); say in one line what does not survive a restart.
//! 2. Find the company: `--import-company FILE` is validated (and checked
//!    against Tier A's `security` block) and stored as the new active
//!    revision; otherwise the active revision is used;
//!    when none is active and a `company.yaml` sits beside the bootstrap
//!    file, that file is imported. With none at all the engine waits for one
//!    (`crewlet config import`, or `PUT /config` on the API) and `/ready`
//!    answers 503 meanwhile.
//! 3. Bind the embedded API (a port already taken fails here, naming it),
//!    then boot the engine and serve.
//! 4. A newly activated revision (told by the embedded API, nudged by the
//!    `config_revision_activated` event any process publishes, or seen by
//!    polling the store every few seconds: the store is the source of
//!    truth) is applied without a restart: the next engine boots beside the
//!    running one and takes each seat over when it runs no turn
//!    ([`crate::engine`]'s `handover`). A revision that fails to apply
//!    leaves the previous one running. A revision Tier A's `security`
//!    refuses (stored by another process) is logged and not run; at boot
//!    it is an error.
//!
//! The company's `${VAR}` are expanded only from the variables
//! `security.company_env` allows, in the engine and in the embedded API.
//! 5. SIGINT/SIGTERM: `/ready` turns 503, the engine drains (running turns
//!    finish within the drain timeout), the API stops, the queue node shuts
//!    down.

use parking_lot::RwLock;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crewlet_api::{AgentView, ApiBuilder, EngineView, RunningCompany, ToolView};
use crewlet_config::{Bootstrap, Company, ConfigError, Organization, Security};
use crewlet_store::ConfigRevision;
use crewlet_telemetry::{TelemetryGuard, TelemetryOptions};
use tokio::sync::Notify;
use tracing::{error, info, warn};

use crate::company::{active_company, import_company, local_author, sibling_company_file};
use crate::engine::{Engine, EngineBuilder, EngineOptions, FleetHandles};
use crate::error::EngineError;
use crate::fleet::{Duties, NodeIdentity, SeatHost};
use crewlet_backends::Backends;
use crewlet_config::NodeRole;

/// How often the store is asked whether another revision was activated.
const REVISION_POLL: Duration = Duration::from_secs(5);

/// The command line of `crewlet run`, as the engine needs it.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// The bootstrap file (for finding a sibling `company.yaml`).
    pub config_path: Option<PathBuf>,
    /// A company file to import as the new active revision before booting.
    pub import_company: Option<PathBuf>,
    /// Serve the API on this port (over `api.port`).
    pub api_port: Option<u16>,
    /// Serve the API on this address (over `api.host`).
    pub api_host: Option<String>,
    /// DEBUG logs for crewlet's own targets.
    pub debug: bool,
    /// Read tool skills from this folder instead of the knowledge backend.
    pub tool_skills_dir: Option<PathBuf>,
    /// What this node does (`--roles`; over the bootstrap's `node.roles`).
    pub roles: Option<Vec<crewlet_config::NodeRole>>,
    /// Never download a model: a missing one makes its provider unavailable
    /// with the command that fetches it (`--offline`, `CREWLET_OFFLINE=1`).
    pub offline: bool,
}

/// Logs and traces for the process, through `crewlet-telemetry`: JSON lines
/// when stderr is not a terminal (or `log_format: json`), text on a
/// terminal; `RUST_LOG`, else `observability.log_filter`, else `info`, with
/// DEBUG for crewlet's own targets under `--debug`/`debug: true`; secrets of
/// the bootstrap redacted; spans exported over OTLP/HTTP when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` or `observability.otlp_endpoint` is set.
/// Hold the guard until the process ends (dropping it flushes the spans).
pub fn init_telemetry(bootstrap: &Bootstrap, debug: bool) -> TelemetryGuard {
    crewlet_telemetry::init(
        TelemetryOptions::from_bootstrap(bootstrap).with_debug(debug || bootstrap.debug),
    )
}

/// Runs until SIGINT or SIGTERM.
pub async fn run(bootstrap: Bootstrap, options: RunOptions) -> Result<(), EngineError> {
    run_until(
        bootstrap,
        options,
        crewlet_api::standalone::shutdown_signal(),
    )
    .await
}

/// The engine as the embedded API sees it: whichever engine currently runs
/// (none while waiting for a company or between two revisions).
#[derive(Default)]
pub struct EngineSlot {
    engine: RwLock<Option<Engine>>,
    draining: AtomicBool,
    activated: Notify,
}

impl EngineSlot {
    fn get(&self) -> Option<Engine> {
        self.engine.read().clone()
    }

    fn set(&self, engine: Option<Engine>) {
        *self.engine.write() = engine;
    }
}

impl EngineView for EngineSlot {
    fn agents(&self) -> Vec<AgentView> {
        self.get().map(|e| e.agents()).unwrap_or_default()
    }

    fn agent(&self, id_or_handle: &str) -> Option<AgentView> {
        self.get().and_then(|e| EngineView::agent(&e, id_or_handle))
    }

    fn tools(&self, handle: Option<&str>) -> Vec<ToolView> {
        self.get().map(|e| e.tools(handle)).unwrap_or_default()
    }

    fn is_ready(&self) -> bool {
        !self.draining.load(Ordering::Acquire) && self.get().is_some_and(|e| e.is_ready())
    }

    fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    fn organization(&self) -> Option<Arc<Organization>> {
        self.get().map(|e| e.organization().clone())
    }

    fn revision_id(&self) -> Option<i64> {
        self.get().and_then(|e| e.revision())
    }

    fn running(&self) -> Option<RunningCompany> {
        self.get().and_then(|e| EngineView::running(&e))
    }

    fn config_activated(&self, _revision_id: i64) {
        self.activated.notify_one();
    }
}

/// Why the serving loop woke up.
enum Wake {
    Shutdown,
    Revision(Box<(Company, ConfigRevision)>),
}

/// What `security` refuses in `company`, as the error boot stops with.
pub fn check_security(
    security: &Security,
    source: &str,
    text: Option<&str>,
    company: &Company,
) -> Result<(), ConfigError> {
    let problems = security.company_problems(source, text, company);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            file: format!("{source} (refused by the `security` block of the bootstrap file)"),
            problems,
        })
    }
}

/// Validates the company file at `path` and checks it against `security`,
/// before it is imported.
pub fn check_company_file(security: &Security, path: &Path) -> Result<(), EngineError> {
    let text = std::fs::read_to_string(path).map_err(|e| EngineError::file("read", path, e))?;
    let source = path.display().to_string();
    let company = Company::from_yaml(&source, &text)?;
    Ok(check_security(security, &source, Some(&text), &company)?)
}

type RevisionKey = (i64, Option<chrono::DateTime<chrono::Utc>>);

/// Waits for a revision other than `current` to be active (told by the API
/// or found by polling), or for `shutdown`. A revision `security` refuses is
/// logged once and skipped.
async fn next_revision(
    backends: &Backends,
    slot: &EngineSlot,
    security: &Security,
    current: Option<RevisionKey>,
    nudges: &mut Option<crewlet_queue::EventStream>,
    shutdown: &mut (impl Future<Output = ()> + Unpin),
) -> Wake {
    let mut refused: Option<RevisionKey> = None;
    loop {
        let nudge = async {
            match nudges.as_mut() {
                Some(stream) => {
                    if stream.recv().await.is_none() {
                        // The stream ended (the queue shuts down): poll only.
                        *nudges = None;
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut *shutdown => return Wake::Shutdown,
            () = slot.activated.notified() => {}
            () = nudge => {}
            () = tokio::time::sleep(REVISION_POLL) => {}
        }
        // The key first: the company itself is read only when it changed.
        match backends.stores.config.active_key().await {
            Ok(Some(key)) => {
                let key = (key.revision_id, key.activated_at);
                if current == Some(key) || refused == Some(key) {
                    continue;
                }
            }
            Ok(None) => continue,
            Err(e) => {
                warn!(error = %e, "cannot read the active company revision; keeping the current one");
                continue;
            }
        }
        match active_company(backends.stores.config.as_ref()).await {
            Ok(Some((company, rev))) => {
                let key = (rev.revision_id, rev.activated_at);
                if current == Some(key) || refused == Some(key) {
                    continue;
                }
                let source = format!("company revision {}", rev.revision_id);
                match check_security(security, &source, None, &company) {
                    Ok(()) => return Wake::Revision(Box::new((company, rev))),
                    Err(e) => {
                        error!(error = %e, revision_id = rev.revision_id, "the active company revision is refused by the bootstrap file's security block; the engine keeps running the previous one");
                        refused = Some(key);
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                warn!(error = %e, "cannot read the active company revision; keeping the current one")
            }
        }
    }
}

/// Follows `fleet_control` on the queue: a `drain` for this node hands its
/// seats over (`crewlet node drain`); `/ready` answers 503 from then on.
async fn follow_drains(
    backends: &Backends,
    host: &Arc<SeatHost>,
    slot: &Arc<EngineSlot>,
) -> Option<tokio::task::JoinHandle<()>> {
    let topic = crewlet_queue::topics::events(&crewlet_core::EventType::FleetControl);
    let mut stream = match backends.queue.subscribe_stream(&topic).await {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, "cannot follow fleet control on the queue; `crewlet node drain` will not reach this node (SIGTERM still drains it)");
            return None;
        }
    };
    let (host, slot) = (host.clone(), slot.clone());
    Some(tokio::spawn(async move {
        while let Some(event) = stream.recv().await {
            let p = &event.event.payload;
            if p["node"].as_str() != Some(host.identity().id.as_str()) {
                continue;
            }
            if p["command"].as_str() == Some("drain") {
                slot.draining.store(true, Ordering::Release);
                let host = host.clone();
                tokio::spawn(async move {
                    host.drain().await;
                    info!(node = %host.identity().id, "drained: this node holds no seat; stop it when convenient");
                });
            }
        }
    }))
}

/// [`run`] with a caller-chosen shutdown trigger (tests, embedding).
pub async fn run_until(
    bootstrap: Bootstrap,
    options: RunOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), EngineError> {
    for w in bootstrap.warnings() {
        warn!(path = %w.path, "bootstrap setting: {}", w.message);
    }
    let backends = Backends::connect(&bootstrap, crewlet_backends::Process::Engine).await?;
    info!(
        queue = backends.queue.backend(),
        database = backends.stores.database.is_some(),
        "backends connected"
    );
    if let Some(warning) = backends.durability_warning() {
        warn!("{warning}");
    }
    let result = serve(&bootstrap, &options, &backends, shutdown).await;
    let report = backends.queue.shutdown().await;
    if report.abandoned > 0 {
        warn!(
            abandoned = report.abandoned,
            "queue handlers abandoned at shutdown; their messages will be redelivered"
        );
    }
    info!("crewlet run stopped");
    result
}

async fn serve(
    bootstrap: &Bootstrap,
    options: &RunOptions,
    backends: &Backends,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), EngineError> {
    let configs = backends.stores.config.clone();
    let security = &bootstrap.security;
    if let Some(path) = &options.import_company {
        check_company_file(security, path)?;
        import_company(configs.as_ref(), path, &local_author(), None).await?;
    } else if configs.active().await?.is_none()
        && let Some(path) = sibling_company_file(options.config_path.as_deref())
    {
        info!(file = %path.display(), "no company revision is active; importing the company file beside the bootstrap file");
        check_company_file(security, &path)?;
        import_company(
            configs.as_ref(),
            &path,
            &local_author(),
            Some(&format!("imported at start from {}", path.display())),
        )
        .await?;
    }

    // The company's `${NAME}` resolve from the secret store first; a key
    // that cannot open it stops the start here, naming the key id.
    let secrets = crewlet_backends::Secrets::open(bootstrap, &backends.stores).await?;
    let slot = Arc::new(EngineSlot::default());
    let identity = NodeIdentity::resolve(
        bootstrap.node.as_ref(),
        |k| std::env::var(k).ok(),
        options.roles.as_deref(),
    );
    info!(node = %identity.id, incarnation = %identity.incarnation,
        roles = ?identity.roles.iter().map(|r| r.as_str()).collect::<Vec<_>>(), "fleet node");
    if backends.stores.database.is_none() && backends.queue.is_durable() {
        warn!(node = %identity.id,
            "seat_placement_is_process_local: no providers.database, so seat leases live in this process; a second engine on this queue would run the same seats (configure providers.database to run a fleet)");
    }
    // One set of memory stores for every engine this process runs (across
    // config reloads) and for the embedded API's memory route.
    let memory = crate::learning::memory_stores(&backends.stores).await;
    let mut port = options.api_port.unwrap_or(bootstrap.api.port);
    if port > 0 && !identity.has(NodeRole::Ingress) {
        info!(node = %identity.id, "this node has no ingress role: no embedded api");
        port = 0;
    }
    let (api_stop, api_task, api_state) = if port > 0 {
        let host = options
            .api_host
            .clone()
            .unwrap_or_else(|| bootstrap.api.host.clone());
        // Refuses anonymous reads on a public bind before binding it.
        let mut api_config = bootstrap.api.clone();
        crewlet_api::prepare_listener(&mut api_config, &host, port)?;
        let listener = crewlet_api::bind(&host, port).await?;
        let api = ApiBuilder::new(api_config, backends.queue.clone(), &backends.stores)
            .engine(slot.clone())
            .security(security.clone())
            .secrets(secrets.clone());
        let api = match &memory {
            Some(m) => api.memory(m.clone()),
            None => {
                api.memory_unavailable("the memory tables could not be opened; see the engine log")
            }
        };
        let api = api.build().await;
        let state = api.state().clone();
        let stop = Arc::new(Notify::new());
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = api
                .serve(listener, async move { stopped.notified().await })
                .await
            {
                error!(error = %e, "embedded api stopped with an error");
            }
        });
        (Some(stop), Some(task), Some(state))
    } else {
        info!(
            "no embedded api (api.port is 0); run `crewlet run api` beside this process to receive webhooks"
        );
        (None, None, None)
    };

    let api_address = (port > 0).then(|| {
        let host = options.api_host.as_deref().unwrap_or(&bootstrap.api.host);
        format!("http://{host}:{port}")
    });
    let host = SeatHost::new(
        identity.clone(),
        backends.stores.leases.clone(),
        backends.queue.clone(),
        api_address,
    );
    let fleet = FleetHandles {
        host: host.clone(),
        duties: Duties::new(identity.clone(), backends.stores.leases.clone()),
    };
    let engine_options = EngineOptions {
        node_name: identity.id.clone(),
        // Routing is org-derived: any node with seats or duties may route.
        run_router: identity.has(NodeRole::Seats) || identity.has(NodeRole::Duties),
        fleet: Some(fleet),
        // The embedded API deletes old webhook delivery claims itself.
        gc_webhook_deliveries: api_task.is_none(),
        pull_models: !(options.offline || crewlet_models::offline_from_env()),
        env: security.company_lookup(secrets.lookup(Arc::new(crewlet_config::process_env))),
        tool_skills: crate::SkillSyncOptions {
            dir: options.tool_skills_dir.clone(),
            ..Default::default()
        },
        ..EngineOptions::default()
    };
    let mut shutdown = Box::pin(shutdown);
    let mut current = active_company(configs.as_ref()).await?;
    if let Some((company, rev)) = &current {
        let source = format!("company revision {}", rev.revision_id);
        check_security(security, &source, None, company)?;
    }
    if current.is_none() {
        warn!(
            "no company revision is active yet: the engine waits for one (`crewlet run --import-company FILE`, `crewlet config import FILE`, or PUT /config); /ready answers 503 until then"
        );
    }
    // The company-wide nudge: every activation (by any process) publishes
    // `config_revision_activated`; the store stays the source of truth
    // (a missed nudge costs one poll).
    let mut nudges = match backends
        .queue
        .subscribe_stream(&crewlet_queue::topics::events(
            &crewlet_core::EventType::ConfigRevisionActivated,
        ))
        .await
    {
        Ok(stream) => Some(stream),
        Err(e) => {
            warn!(error = %e, "cannot follow config activations on the queue; polling the store only");
            None
        }
    };
    if let Some((company, _)) = &current {
        host.set_company(&Organization::new(company));
    }
    host.start().await;
    let drains = follow_drains(backends, &host, &slot).await;
    let mut result = Ok(());
    let mut engine: Option<Engine> = None;
    // The revision the loop last acted on (the running one, or one that
    // failed to apply: not retried until another is activated).
    let mut seen: Option<RevisionKey> = None;
    let mut retiring: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    loop {
        if let Some((company, rev)) = current.take() {
            // A new revision is when a running process picks up secrets
            // set since it started (`crewlet secrets set` says so).
            if engine.is_some()
                && let Err(e) = secrets.reload().await
            {
                warn!(error = %e, "cannot read the secret store; keeping the secrets loaded before");
            }
            seen = Some((rev.revision_id, rev.activated_at));
            host.set_company(&Organization::new(&company));
            let mut builder = EngineBuilder::new(company, backends)
                .revision(Some(rev.revision_id))
                .options(engine_options.clone());
            if let Some(m) = &memory {
                builder = builder.memory(m.clone());
            }
            if let Some(running) = &engine {
                info!(
                    from = running.revision().unwrap_or_default(),
                    to = rev.revision_id,
                    "a new company revision is active; applying it without a restart"
                );
                builder = builder.taking_over(running.clone());
            }
            let applying = std::time::Instant::now();
            match builder.start().await {
                Ok(next) => {
                    if let Some(previous) = engine.take() {
                        // Seats move to `next` as they finish their turns.
                        previous.begin_retire();
                        let org = next.organization().clone();
                        retiring.retain(|t| !t.is_finished());
                        let (n, p) = (next.clone(), previous.clone());
                        retiring.push(tokio::spawn(async move {
                            n.finish_takeover(&p, applying).await;
                        }));
                        retiring.push(tokio::spawn(async move { previous.retire(&org).await }));
                    }
                    // Seats the node claimed meanwhile attach here.
                    host.set_target(Arc::new(next.clone())).await;
                    slot.set(Some(next.clone()));
                    // The API shares the engine's company from now on.
                    if let Some(api) = &api_state {
                        api.reload_company().await;
                    }
                    engine = Some(next);
                }
                Err(e) if engine.is_some() => {
                    error!(error = %e, revision_id = rev.revision_id, "the new company revision could not be applied; the engine keeps running the previous one");
                }
                Err(e) => {
                    error!(error = %e, revision_id = rev.revision_id, "the engine could not start on this revision");
                    result = Err(e);
                    break;
                }
            }
        }
        let wake = next_revision(backends, &slot, security, seen, &mut nudges, &mut shutdown).await;
        match wake {
            Wake::Shutdown => break,
            Wake::Revision(next) => current = Some(*next),
        }
    }
    slot.draining.store(true, Ordering::Release);
    if let Some(task) = drains {
        task.abort();
    }
    if let Some(e) = engine.take() {
        e.shutdown().await;
        slot.set(None);
    }
    for task in retiring {
        let _ = task.await;
    }
    // The seats are detached: peers may take them at their next sweep
    // instead of waiting for the leases to lapse.
    host.stop().await;
    slot.draining.store(true, Ordering::Release);
    if let (Some(stop), Some(task)) = (api_stop, api_task) {
        stop.notify_one();
        if tokio::time::timeout(Duration::from_secs(15), task)
            .await
            .is_err()
        {
            warn!("the embedded api did not stop within 15 s");
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("crewlet-run-{name}-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        dir
    }

    #[tokio::test]
    async fn boot_refuses_a_company_file_the_security_block_does_not_allow() {
        let dir = temp("security");
        let file = dir.join("company.yaml");
        let yaml = format!(
            "name: A\nroles:\n  - {{name: CEO, handle: ceo}}\n{}mcp_servers:\n  - name: x\n    command: /bin/sh\n",
            crate::TEST_LLM
        );
        std::fs::write(&file, yaml)
            .map_err(|e| e.to_string())
            .unwrap_or_default();
        let options = RunOptions {
            import_company: Some(file.clone()),
            ..RunOptions::default()
        };
        let err = run_until(Bootstrap::default(), options, std::future::pending())
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains(&format!("{}:", file.display()))
                && err.contains("mcp_servers[0].command")
                && err.contains("security.mcp_commands"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn boot_refuses_an_active_revision_the_security_block_does_not_allow() {
        let backends = Backends::memory();
        let yaml = "name: A\nroles:\n  - {name: CEO, handle: ceo}\nproviders:\n  llm:\n    main: {type: openai-compatible, model: m, base_url: \"http://127.0.0.1:9/v1\", api_keys: [\"${ACME_DATABASE_DSN}\"]}\n";
        let company = Company::from_yaml("t", yaml).map_err(|e| e.to_string());
        let Ok(company) = company else {
            panic!("{company:?}");
        };
        let created = backends
            .stores
            .config
            .create(crewlet_store::NewRevision {
                parent_revision_id: None,
                created_by: "t".into(),
                source: "cli-import".into(),
                summary: "t".into(),
                payload: serde_json::to_value(&company).unwrap_or_default(),
                activate: true,
            })
            .await;
        assert!(created.is_ok());
        let err = serve(
            &Bootstrap::default(),
            &RunOptions::default(),
            &backends,
            std::future::pending(),
        )
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains("company revision 1") && err.contains("`ACME_DATABASE_DSN`"),
            "{err}"
        );
    }
}
