//! The accept loop: the connection cap (closing the longest-idle connection
//! to admit a new one), accept-error backoff, and each connection's
//! header-read and idle deadlines.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::io::ErrorKind;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::conn::{ConnService, WatchedIo};
use crate::state::ApiLimits;

/// Milliseconds since the server started; 0 means "not set".
type Millis = u64;

/// What the server knows about one open connection.
pub(super) struct Conn {
    /// Requests whose handler has not answered yet.
    pub(super) in_flight: AtomicUsize,
    /// When the first byte of the next request head arrived (0: none yet).
    pub(super) head_started: AtomicU64,
    /// When the connection last had no request in flight.
    pub(super) idle_since: AtomicU64,
    /// Set when the connection is closed to admit another at the cap.
    evicted: AtomicBool,
    /// Wakes the connection's task: a head started, or it was evicted.
    pub(super) wake: Notify,
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

    pub(super) fn is_idle(&self) -> bool {
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
pub(super) struct Server {
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
    pub(super) fn new(router: Router, limits: ApiLimits, cap: usize) -> Arc<Self> {
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
    pub(super) fn now(&self) -> Millis {
        millis(self.epoch.elapsed()) + 1
    }

    fn open_count(&self) -> usize {
        self.cap - self.permits.available_permits()
    }

    fn connections(&self) -> parking_lot::MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        self.open.lock()
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
    pub(super) async fn run(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) {
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
            // With upgrades: a WebSocket (`/ws/stream`) leaves this loop
            // once upgraded and lives in its own task, outside the idle and
            // header deadlines (it has heartbeats and its own close rules).
            let mut connection = Box::pin(
                http.serve_connection(TokioIo::new(io), service)
                    .with_upgrades(),
            );
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
