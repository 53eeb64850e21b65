//! [`Api`]: the router plus the background work, and serving it on a
//! listener until a shutdown signal.
//!
//! Connections are served here rather than by `axum::serve`, which has no
//! header-read or idle timeout and no connection cap: a few hundred slow or
//! idle clients could hold every file descriptor and starve `/health`.

use std::future::Future;
use std::io::ErrorKind;
use std::net::SocketAddr;

use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::error::ApiError;
use crate::state::{ApiLimits, ApiState};

mod conn;
mod server;

use server::Server;

/// A built API: serve it with [`Api::serve`], or mount [`Api::router`] yourself.
pub struct Api {
    state: ApiState,
}

impl Api {
    pub(crate) fn new(state: ApiState) -> Self {
        Self { state }
    }

    pub fn state(&self) -> &ApiState {
        &self.state
    }

    /// The axum router with every route, CORS, the JSON 404 and the request
    /// span (DEBUG; webhooks have their own).
    pub fn router(&self) -> Router {
        let (router, _) = crate::routes::router().split_for_parts();
        // The page and its assets carry no data and need no token; they are
        // not API operations, so they are not in the OpenAPI document.
        let router = router
            .route(
                "/dashboard",
                axum::routing::get(crate::routes::dashboard::page),
            )
            .route(
                "/dashboard/",
                axum::routing::get(crate::routes::dashboard::page),
            )
            .route(
                "/dashboard/assets/{file}",
                axum::routing::get(crate::routes::dashboard::asset),
            )
            // A WebSocket is no OpenAPI operation: docs/dashboard.md has it.
            .route("/ws/stream", axum::routing::get(crate::routes::stream::ws));
        let mut router = router
            .fallback(crate::routes::fallback)
            .method_not_allowed_fallback(crate::routes::method_not_allowed)
            .with_state(self.state.clone())
            .layer(axum::middleware::from_fn(crate::routes::request_span));
        if let Some(cors) = crate::routes::cors(&self.state.inner().config.auth.allowed_origins) {
            router = router.layer(cors);
        }
        router
    }

    /// Starts the background work: re-reading the active company revision
    /// and deleting old webhook delivery claims. Stops when dropped.
    pub fn spawn_background(&self) -> Background {
        let state = self.state.clone();
        let limits = state.inner().limits;
        let poll = tokio::spawn(async move {
            let mut tick = tokio::time::interval(limits.config_poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut gc = tokio::time::interval(limits.dedupe_gc);
            gc.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // Activations by any process nudge a reload at once; the poll
            // catches up on a missed nudge.
            let mut nudges = match state
                .inner()
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
            loop {
                let nudge = async {
                    match nudges.as_mut() {
                        Some(stream) => stream.recv().await.is_some(),
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = tick.tick() => state.reload_company().await,
                    open = nudge => {
                        if open {
                            state.reload_company().await;
                        } else {
                            nudges = None;
                        }
                    }
                    _ = gc.tick() => {
                        if let Err(e) = state.inner().stores.webhooks.gc().await {
                            warn!(error = %e, "cannot delete old webhook delivery claims");
                        }
                    }
                }
            }
        });
        // The live stream: seeded from the newest stored events, then fed
        // by a non-durable read of the event stream.
        let live = self.state.inner().live.clone();
        let feed_state = self.state.clone();
        let feed = tokio::spawn(async move {
            let org = || feed_state.view().and_then(|v| v.organization());
            match live
                .hydrate(feed_state.inner().stores.events.as_ref(), org().as_deref())
                .await
            {
                Ok(n) => tracing::debug!(events = n, "live stream seeded from the event store"),
                Err(e) => warn!(error = %e, "the live stream starts without stored history"),
            }
            let state = feed_state.clone();
            live.run(move || state.view().and_then(|v| v.organization()))
                .await;
        });
        // Budgets are enforced on the ledger, not by events: the live view
        // reads it.
        let ledger_state = self.state.clone();
        let budgets = tokio::spawn(self.state.inner().live.clone().follow_budgets(
            self.state.inner().stores.ledger.clone(),
            move || {
                let org = ledger_state.view().and_then(|v| v.organization());
                let cap = ledger_state
                    .snapshot()
                    .map_or(0, |s| s.company.token_budget);
                (org, cap)
            },
        ));
        Background(vec![poll, feed, budgets])
    }

    /// Serves on `listener` until `shutdown` resolves, then drains: `/ready`
    /// answers 503, new connections are refused, in-flight requests finish.
    ///
    /// Each connection is HTTP/1.1 with keep-alive, bounded by the limits'
    /// `header_read_timeout` and `idle_timeout`; at most
    /// [`connection_cap`] connections are open at once.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ApiError> {
        let background = self.spawn_background();
        let state = self.state.clone();
        let limits = state.inner().limits;
        let cap = connection_cap(&limits);
        if let Ok(addr) = listener.local_addr() {
            info!(%addr, max_connections = cap, "api listening");
        }
        let server = Server::new(self.router(), limits, cap);
        server
            .run(listener, async move {
                shutdown.await;
                state.set_draining();
                info!("api draining");
            })
            .await;
        drop(background);
        Ok(())
    }
}

/// Background tasks of an [`Api`]; aborted on drop.
pub struct Background(Vec<JoinHandle<()>>);

impl Drop for Background {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Binds `host:port`. A port already taken fails with a message naming the
/// commands that may hold it.
pub async fn bind(host: &str, port: u16) -> Result<TcpListener, ApiError> {
    let addr = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    TcpListener::bind(&addr).await.map_err(|e| {
        let reason = if e.kind() == ErrorKind::AddrInUse {
            let mut hint = format!(
                "port {port} is already in use; another process holds it: `crewlet run` with api.port: {port} in config.yaml, or another `crewlet run api` / `crewlet-api`"
            );
            if port == 8080 {
                hint.push_str(", or the Pulsar admin server (8080 in the bundled docker-compose.yml)");
            }
            hint.push_str("; stop it or pick another port with --port");
            hint
        } else if e.kind() == ErrorKind::PermissionDenied && port < 1024 {
            format!(
                "{e}; ports below 1024 need privileges: `sudo sysctl net.ipv4.ip_unprivileged_port_start={port}` or CAP_NET_BIND_SERVICE"
            )
        } else {
            e.to_string()
        };
        ApiError::Bind { addr, reason }
    })
}

/// The address a listener got (e.g. after binding port 0).
pub fn local_addr(listener: &TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}

/// The connection cap for `limits`: `max_connections`, lowered to the
/// open-file limit minus `fd_reserve` so the process keeps descriptors for
/// its stores, its queue and a new `/health` connection (at least 1).
pub fn connection_cap(limits: &ApiLimits) -> usize {
    let configured = limits.max_connections.max(1);
    match open_file_limit() {
        Some(soft) => {
            let left = if soft > limits.fd_reserve {
                soft - limits.fd_reserve
            } else {
                soft / 2
            };
            configured.min(left.max(1))
        }
        None => configured,
    }
}

/// RLIMIT_NOFILE (soft), when the platform has one.
fn open_file_limit() -> Option<usize> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we own and nothing else.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        if rc != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        usize::try_from(limit.rlim_cur).ok()
    }
    #[cfg(not(unix))]
    {
        None
    }
}
