//! [`Api`]: the router plus the background work, and serving it on a
//! listener until a shutdown signal.
//!
//! Connections are served here rather than by `axum::serve`, which has no
//! header-read or idle timeout and no connection cap: a few hundred slow or
//! idle clients could hold every file descriptor and starve `/health`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::error::ApiError;
use crate::state::{ApiLimits, ApiState};

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
            loop {
                tokio::select! {
                    _ = tick.tick() => state.reload_company().await,
                    _ = gc.tick() => {
                        if let Err(e) = state.inner().stores.webhooks.gc().await {
                            warn!(error = %e, "cannot delete old webhook delivery claims");
                        }
                    }
                }
            }
        });
        Background(vec![poll])
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

/// Milliseconds since the server started; 0 means "not set".
type Millis = u64;

/// What the server knows about one open connection.
struct Conn {
    /// Requests whose handler has not answered yet.
    in_flight: AtomicUsize,
    /// When the first byte of the next request head arrived (0: none yet).
    head_started: AtomicU64,
    /// When the connection last had no request in flight.
    idle_since: AtomicU64,
    /// Set when the connection is closed to admit another at the cap.
    evicted: AtomicBool,
    /// Wakes the connection's task: a head started, or it was evicted.
    wake: Notify,
}

impl Conn {
    fn new(now: Millis) -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            head_started: AtomicU64::new(0),
            idle_since: AtomicU64::new(now),
            evicted: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// When this connection must close if nothing changes, and why.
    fn deadline(&self, limits: &ApiLimits, now: Millis) -> (Millis, &'static str) {
        if !self.is_idle() {
            // A request is in flight: look again later (its end moves the
            // idle deadline past this one).
            return (now + millis(limits.idle_timeout), "");
        }
        match self.head_started.load(Ordering::Acquire) {
            0 => (
                self.idle_since.load(Ordering::Acquire) + millis(limits.idle_timeout),
                "idle timeout",
            ),
            started => (
                started + millis(limits.header_read_timeout),
                "header read timeout",
            ),
        }
    }
}

fn millis(d: Duration) -> Millis {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 2)
}

/// The accept loop's shared state.
struct Server {
    router: Router,
    limits: ApiLimits,
    cap: usize,
    epoch: Instant,
    permits: Arc<Semaphore>,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// True from the moment the cap is reached until the count falls back
    /// below 90 % of it: the warning is logged once per burst.
    at_cap: AtomicBool,
    /// Connections closed to make room during the current burst.
    shed: AtomicU64,
}

impl Server {
    fn new(router: Router, limits: ApiLimits, cap: usize) -> Arc<Self> {
        Arc::new(Self {
            router,
            limits,
            cap,
            epoch: Instant::now(),
            permits: Arc::new(Semaphore::new(cap)),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            at_cap: AtomicBool::new(false),
            shed: AtomicU64::new(0),
        })
    }

    /// Now, in milliseconds since the server started (never 0).
    fn now(&self) -> Millis {
        millis(self.epoch.elapsed()) + 1
    }

    fn open_count(&self) -> usize {
        self.cap - self.permits.available_permits()
    }

    fn connections(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes the connection that has been waiting for a request the
    /// longest; false when every connection has a request in flight.
    fn evict_one(&self) -> bool {
        let mut open = self.connections();
        let victim = open
            .iter()
            .filter(|(_, c)| c.is_idle())
            .min_by_key(|(_, c)| c.idle_since.load(Ordering::Acquire))
            .map(|(id, _)| *id);
        let Some(conn) = victim.and_then(|id| open.remove(&id)) else {
            return false;
        };
        drop(open);
        conn.evicted.store(true, Ordering::Release);
        conn.wake.notify_one();
        self.shed.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// A slot for a new connection: a free one, else one freed by closing
    /// the longest-idle connection, else (every connection busy) the next
    /// one to close.
    async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        loop {
            match self.permits.clone().try_acquire_owned() {
                Ok(p) => return Some(p),
                Err(tokio::sync::TryAcquireError::Closed) => return None,
                Err(tokio::sync::TryAcquireError::NoPermits) => {}
            }
            if !self.at_cap.swap(true, Ordering::AcqRel) {
                warn!(
                    max_connections = self.cap,
                    "api connection cap reached: {} connections are open; closing the longest-idle ones to admit new clients (raise the open-file limit, `ulimit -n`, or the api's max_connections)",
                    self.cap
                );
            }
            self.evict_one();
            // An evicted connection frees its slot at once; a busy server
            // frees one when a request ends and its connection idles out.
            if let Ok(p) = tokio::time::timeout(
                Duration::from_millis(100),
                self.permits.clone().acquire_owned(),
            )
            .await
            {
                return p.ok();
            }
        }
    }

    fn closed(&self, id: u64) {
        self.connections().remove(&id);
        if self.at_cap.load(Ordering::Acquire)
            && self.open_count() < self.cap - self.cap / 10
            && self.at_cap.swap(false, Ordering::AcqRel)
        {
            let shed = self.shed.swap(0, Ordering::Relaxed);
            info!(
                open = self.open_count(),
                closed_to_make_room = shed,
                "api connections back below the cap"
            );
        }
    }

    /// Accepts until `shutdown`, then stops accepting, tells every
    /// connection to finish its request and close, and waits for them.
    async fn run(self: Arc<Self>, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut shutdown = pin!(shutdown);
        let mut backoff = Duration::from_millis(10);
        let mut accept_failing = false;
        loop {
            let permit = tokio::select! {
                () = &mut shutdown => break,
                p = self.slot() => match p {
                    Some(p) => p,
                    None => break,
                },
            };
            let accepted = tokio::select! {
                () = &mut shutdown => break,
                a = listener.accept() => a,
            };
            match accepted {
                Ok((stream, _)) => {
                    if accept_failing {
                        accept_failing = false;
                        info!("api accepting connections again");
                    }
                    backoff = Duration::from_millis(10);
                    self.clone()
                        .spawn_connection(stream, permit, stop_rx.clone());
                }
                Err(e) if is_per_connection(&e) => {}
                Err(e) => {
                    // EMFILE, ENFILE, ENOBUFS...: retrying at once would spin.
                    if !accept_failing {
                        accept_failing = true;
                        warn!(error = %e, "api cannot accept connections; closing the longest-idle one and retrying with a backoff");
                    }
                    drop(permit);
                    self.evict_one();
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
        drop(listener);
        let _ = stop_tx.send(true);
        // Every connection holds a permit until it closes.
        let all = u32::try_from(self.cap).unwrap_or(u32::MAX);
        let _ = self.permits.acquire_many(all).await;
    }

    fn spawn_connection(
        self: Arc<Self>,
        stream: TcpStream,
        permit: OwnedSemaphorePermit,
        mut stop: watch::Receiver<bool>,
    ) {
        let _ = stream.set_nodelay(true);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn::new(self.now()));
        self.connections().insert(id, conn.clone());
        tokio::spawn(async move {
            let io = WatchedIo {
                inner: stream,
                conn: conn.clone(),
                server: self.clone(),
            };
            let service = ConnService {
                router: self.router.clone(),
                conn: conn.clone(),
                server: self.clone(),
            };
            let mut http = hyper::server::conn::http1::Builder::new();
            // Header and idle deadlines are ours (below): hyper's header timer
            // would also close keep-alive connections idle longer than it.
            http.keep_alive(true).header_read_timeout(None);
            // Boxed so it (and its socket) is dropped before the permit.
            let mut connection = Box::pin(http.serve_connection(TokioIo::new(io), service));
            let mut draining = *stop.borrow();
            if draining {
                connection.as_mut().graceful_shutdown();
            }
            loop {
                let (deadline, _) = conn.deadline(&self.limits, self.now());
                let sleep = tokio::time::sleep_until(
                    self.epoch + Duration::from_millis(deadline.saturating_sub(1)),
                );
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(e) = result {
                            debug!(error = %e, "api connection ended with an error");
                        }
                        break;
                    }
                    () = sleep => {
                        let now = self.now();
                        let (deadline, why) = conn.deadline(&self.limits, now);
                        if !why.is_empty() && deadline <= now {
                            debug!(reason = why, "api closing a connection");
                            break;
                        }
                    }
                    () = conn.wake.notified() => {}
                    _ = stop.changed(), if !draining => {
                        draining = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
                if conn.evicted.load(Ordering::Acquire) {
                    debug!("api closing an idle connection to admit a new one");
                    break;
                }
            }
            drop(connection);
            drop(permit);
            self.closed(id);
        });
    }
}

/// Accept errors that concern one connection only (retry at once).
fn is_per_connection(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionAborted
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionRefused
            | ErrorKind::Interrupted
            | ErrorKind::WouldBlock
    )
}

/// The socket, noting when the first byte of a request head arrives.
struct WatchedIo {
    inner: TcpStream,
    conn: Arc<Conn>,
    server: Arc<Server>,
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(())))
            && buf.filled().len() > before
            && this.conn.is_idle()
            && this.conn.head_started.load(Ordering::Acquire) == 0
        {
            this.conn
                .head_started
                .store(this.server.now(), Ordering::Release);
            this.conn.wake.notify_one();
        }
        polled
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router as one connection's hyper service, counting requests in flight.
struct ConnService {
    router: Router,
    conn: Arc<Conn>,
    server: Arc<Server>,
}

/// Ends a request's flight when its handler answered (or was dropped).
struct InFlight {
    conn: Arc<Conn>,
    server: Arc<Server>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.conn
            .idle_since
            .store(self.server.now(), Ordering::Release);
        self.conn.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.conn.in_flight.fetch_add(1, Ordering::AcqRel);
        self.conn.head_started.store(0, Ordering::Release);
        let flight = InFlight {
            conn: self.conn.clone(),
            server: self.server.clone(),
        };
        let mut router = self.router.clone();
        Box::pin(async move {
            let response = tower_service::Service::call(&mut router, request.map(Body::new)).await;
            drop(flight);
            response
        })
    }
}
