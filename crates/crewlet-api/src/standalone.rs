//! The standalone API process (`crewlet run api`, `crewlet-api`): builds the
//! queue and the stores from the Tier A bootstrap, serves until SIGINT or
//! SIGTERM, then drains; its `raw_webhook` events are stored from the
//! broker by the `event-store` group ([`crate::archive`]).
//!
//! Port: `--port`, default [`DEFAULT_PORT`]; `api.port` is never read (it is
//! the engine's embedded API). Host: `--host`, else `api.host`.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use std::sync::Mutex;

use crewlet_config::{Bootstrap, Observability, QueueKind};
use crewlet_queue::{EventQueue, MemoryQueue};
use crewlet_store::{EventStore, EventStoreWriter, MigrationOptions, Stores};
use crewlet_telemetry::{TelemetryGuard, TelemetryOptions};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::archive::{ArchiveMembers, EventArchive};
use crate::error::ApiError;
use crate::state::ApiBuilder;

/// `crewlet run api` listens here unless `--port` says otherwise.
pub const DEFAULT_PORT: u16 = 8000;

/// The queue and stores of a standalone API, built from the bootstrap.
pub struct Backends {
    pub queue: Arc<dyn EventQueue>,
    pub stores: Stores,
    /// The event store reads go to.
    pub events: Arc<dyn EventStore>,
    /// Stores the `raw_webhook` events this process publishes, from the broker.
    pub archive: Arc<EventArchive>,
    members: Mutex<Option<ArchiveMembers>>,
}

impl Backends {
    /// Connects the queue (Pulsar when `providers.queue.type: pulsar`, else
    /// the in-process broker) and the stores (PostgreSQL, migrated, when a
    /// DSN is set, else memory), and joins the `event-store` group: a
    /// webhook is acknowledged once its `raw_webhook` is on the broker, and
    /// the group stores it from there, so a crash of this process loses none.
    pub async fn connect(bootstrap: &Bootstrap) -> Result<Self, ApiError> {
        let queue = connect_queue(bootstrap).await?;
        let stores = match &bootstrap.providers.database {
            Some(db) => {
                let options = MigrationOptions {
                    embedding_dim: db.embedding_dim,
                };
                let (stores, report) = Stores::open(&db.dsn, options).await?;
                info!(
                    applied = report.applied.len(),
                    already_applied = report.already_applied,
                    "postgresql stores ready"
                );
                stores
            }
            None => {
                warn!(
                    "no providers.database: company revisions, webhook dedupe and events live in this process's memory; nothing survives a restart, and the engine cannot see any of it"
                );
                Stores::memory()
            }
        };
        let events = stores.events.clone();
        let archive =
            EventArchive::detached(&queue, Arc::new(EventStoreWriter::new(events.clone())));
        let members = archive.subscribe().await?;
        Ok(Self {
            queue,
            stores,
            events,
            archive,
            members: Mutex::new(Some(members)),
        })
    }

    /// Detaches from the `event-store` group (what is not stored yet stays
    /// on the broker) and shuts the queue down.
    pub async fn close(&self) {
        let members = self
            .members
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(members) = members {
            members.close().await;
        }
        let report = self.queue.shutdown().await;
        if report.abandoned > 0 {
            warn!(
                abandoned = report.abandoned,
                "queue handlers abandoned at shutdown"
            );
        }
    }
}

async fn connect_queue(bootstrap: &Bootstrap) -> Result<Arc<dyn EventQueue>, ApiError> {
    match &bootstrap.providers.queue {
        Some(q) if q.kind == QueueKind::Pulsar => connect_pulsar(q).await,
        _ => {
            warn!(
                "the standalone api runs on the in-process memory queue: webhooks it accepts never reach an engine in another process; set providers.queue (type: pulsar) in config.yaml"
            );
            Ok(Arc::new(MemoryQueue::standalone()))
        }
    }
}

#[cfg(feature = "pulsar")]
async fn connect_pulsar(q: &crewlet_config::QueueConfig) -> Result<Arc<dyn EventQueue>, ApiError> {
    use crewlet_queue::{PulsarOptions, PulsarQueue};
    let url = q.url.clone().ok_or_else(|| {
        ApiError::Unsupported("providers.queue.url is required for pulsar".into())
    })?;
    let mut options = PulsarOptions::new(url.clone()).with_namespace(&q.tenant, &q.namespace);
    if let Some(token) = &q.auth_token {
        options = options.with_auth_token(token.clone());
    }
    options.tls_trust_certs_path = q.tls_trust_certs_path.as_ref().map(Into::into);
    options.startup_retry = std::time::Duration::from_secs(q.startup_retry_seconds);
    options.client_name = "crewlet-api".into();
    let queue = PulsarQueue::connect(options).await?;
    info!(%url, tenant = %q.tenant, namespace = %q.namespace, "pulsar queue connected");
    Ok(Arc::new(queue))
}

#[cfg(not(feature = "pulsar"))]
async fn connect_pulsar(_: &crewlet_config::QueueConfig) -> Result<Arc<dyn EventQueue>, ApiError> {
    Err(ApiError::Unsupported(
        "providers.queue.type is pulsar but crewlet-api was compiled without pulsar".into(),
    ))
}

/// What `crewlet run api` and `crewlet-api` were asked for.
#[derive(Debug, Clone)]
pub struct Options {
    /// The Tier A bootstrap file; `None`: defaults and `CREWLET_*` variables only.
    pub config: Option<PathBuf>,
    /// Listen address; `None`: `api.host`.
    pub host: Option<String>,
    /// Listen port ([`DEFAULT_PORT`] unless given; `api.port` is never read).
    pub port: u16,
    /// DEBUG logs.
    pub debug: bool,
}

/// Everything a standalone binary does: load the bootstrap (file plus
/// `CREWLET_*` overrides), set up logs and traces ([`init_telemetry`]), run
/// until SIGINT or SIGTERM, then flush the spans not yet exported.
pub fn run_blocking(options: Options) -> Result<(), ApiError> {
    let bootstrap = Bootstrap::load(options.config.as_deref())?;
    // Dropped last, after the runtime: the spans of the shutdown go out too.
    let telemetry = init_telemetry(&bootstrap, options.debug);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ApiError::Runtime)?;
    let result = runtime.block_on(run(bootstrap, options.host, options.port));
    drop(runtime);
    telemetry.shutdown();
    result
}

/// Runs the standalone API on `host:port` (host `None`: `api.host`) until
/// SIGINT or SIGTERM.
pub async fn run(bootstrap: Bootstrap, host: Option<String>, port: u16) -> Result<(), ApiError> {
    let host = host.unwrap_or_else(|| bootstrap.api.host.clone());
    let listener = crate::bind(&host, port).await?;
    serve(bootstrap, listener, shutdown_signal()).await
}

/// Runs the standalone API on an already bound listener until `shutdown`.
pub async fn serve(
    bootstrap: Bootstrap,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ApiError> {
    let backends = Backends::connect(&bootstrap).await?;
    let api = ApiBuilder::new(
        bootstrap.api.clone(),
        backends.queue.clone(),
        &backends.stores,
    )
    .events(backends.events.clone())
    .security(bootstrap.security.clone())
    .build()
    .await;
    if api.state().active_revision_id().is_none() {
        warn!(
            "no company revision is active yet: /ready answers 503 and webhooks 503 (Retry-After: 15) until one is imported"
        );
    }
    let served = api.serve(listener, shutdown).await;
    backends.close().await;
    info!("api stopped");
    served
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            warn!(error = %e, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => info!("SIGINT received; shutting down"),
        _ = term => info!("SIGTERM received; shutting down"),
    }
}

/// `service.name` of the standalone API's spans, unless
/// `observability.service_name` names something else than the default.
pub const SERVICE_NAME: &str = "crewlet-api";

/// Logs and traces for a standalone process, through `crewlet-telemetry`:
/// `RUST_LOG` wins, then `observability.log_filter`, then `info`, with DEBUG
/// for Crewlet's own targets under `--debug` or `debug: true`; JSON lines
/// when stderr is not a terminal (or `log_format: json`); the bootstrap's
/// secrets (API tokens, database password, Pulsar token) redacted from every
/// line and span; spans exported over OTLP/HTTP when
/// `OTEL_EXPORTER_OTLP_ENDPOINT` or `observability.otlp_endpoint` is set,
/// as [`SERVICE_NAME`] unless `observability.service_name` says otherwise.
/// Keep the guard until the process ends: dropping it flushes the spans.
/// A second call (a subscriber already installed) leaves the first in place.
pub fn init_telemetry(bootstrap: &Bootstrap, debug: bool) -> TelemetryGuard {
    let mut options =
        TelemetryOptions::from_bootstrap(bootstrap).with_debug(debug || bootstrap.debug);
    if bootstrap.observability.service_name == Observability::default().service_name {
        options = options.with_service_name(SERVICE_NAME);
    }
    crewlet_telemetry::init(options)
}
