//! The standalone API process (`crewlet run api`, `crewlet-api`): builds the
//! queue and the stores from the Tier A bootstrap, serves until SIGINT or
//! SIGTERM, then drains; its `raw_webhook` events are stored from the
//! broker by the `event-store` group ([`crewlet_backends::archive`]).
//!
//! Port: `--port`, default [`DEFAULT_PORT`]; `api.port` is never read (it is
//! the engine's embedded API). Host: `--host`, else `api.host`.

use std::future::Future;
use std::path::PathBuf;

use crewlet_backends::{Backends, Process};
use crewlet_config::{Bootstrap, Observability};
use crewlet_memory::MemoryStores;
use crewlet_store::Database;
use crewlet_telemetry::{TelemetryGuard, TelemetryOptions};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::error::ApiError;
use crate::state::ApiBuilder;

/// `crewlet run api` listens here unless `--port` says otherwise.
pub const DEFAULT_PORT: u16 = 8000;

/// Connects the queue and the stores the bootstrap names
/// ([`crewlet_backends::Backends::connect`]) and joins the `event-store`
/// group: a webhook is acknowledged once its `raw_webhook` is on the
/// broker, and the group stores it from there, so a crash of this process
/// loses none. Says loudly what an in-memory part means for a standalone API.
pub async fn connect(bootstrap: &Bootstrap) -> Result<Backends, ApiError> {
    let backends = Backends::connect(bootstrap, Process::Api).await?;
    if !backends.queue.is_durable() {
        warn!(
            "the standalone api runs on the in-process memory queue: webhooks it accepts never reach an engine in another process; set providers.queue (type: pulsar) in config.yaml"
        );
    }
    if backends.stores.database.is_none() {
        warn!(
            "no providers.database: company revisions, webhook dedupe and events live in this process's memory; nothing survives a restart, and the engine cannot see any of it"
        );
    }
    Ok(backends)
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
    let backends = connect(&bootstrap).await?;
    let mut api_config = bootstrap.api.clone();
    let addr = listener.local_addr().map_err(|e| ApiError::Bind {
        addr: bootstrap.api.host.clone(),
        reason: e.to_string(),
    })?;
    crate::prepare_listener(&mut api_config, &addr.ip().to_string(), addr.port())?;
    let secrets = crewlet_backends::Secrets::open(&bootstrap, &backends.stores).await?;
    let builder = ApiBuilder::new(api_config, backends.queue.clone(), &backends.stores)
        .events(backends.stores.events.clone())
        .security(bootstrap.security.clone())
        .secrets(secrets);
    let api = with_memory(builder, backends.stores.database.clone())
        .await
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

/// The memory stores of `GET /agents/{id}/memory`: PostgreSQL's when there
/// is a database. Without one (memory lives in the engine process) or when
/// they fail to open, the route answers 503 saying which.
async fn with_memory(builder: ApiBuilder, database: Option<Database>) -> ApiBuilder {
    let Some(db) = database else {
        return builder.memory_unavailable(
            "this standalone api has no database (providers.database), so it cannot see any agent's memory: without a database memory lives in the engine process; ask the engine's embedded api (api.port > 0)",
        );
    };
    match MemoryStores::postgres(db).await {
        Ok(stores) => builder.memory(stores),
        Err(e) => {
            warn!(error = %e, "cannot open the memory stores: GET /agents/{{id}}/memory answers 503 until the api restarts");
            builder.memory_unavailable(format!(
                "the memory stores could not be opened when this api started ({e}); restart it once the database is reachable and migrated"
            ))
        }
    }
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
