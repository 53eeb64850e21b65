//! The live stream behind `/stream/snapshot` and `WS /ws/stream`.
//!
//! One feed per API process reads every event from the queue through a
//! non-durable stream (`EventQueue::subscribe_stream`, never a durable
//! subscription), applies it to the [`Projection`] and fans it out to the
//! sockets over one bounded broadcast ring. Every frame gets a sequence
//! number under the same lock that applies it, so a socket that takes its
//! snapshot at sequence `S` forwards exactly the frames after `S`: nothing
//! is lost or sent twice. The last [`RING`] frames are kept for sockets
//! that resume with `after=<event id>`; older cursors are resumed from the
//! event store. A socket more than [`BROADCAST`] frames behind is closed
//! (4008) rather than buffered: memory never grows with a slow client.

pub mod budget;
pub mod projection;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use crewlet_config::Organization;
use crewlet_core::Event;
use crewlet_queue::{EventQueue, TopicPattern, topics};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use uuid::Uuid;

pub use projection::{Attention, Projection, SeatLive, Today, is_failure};

/// Frames kept for resumption.
pub const RING: usize = 10_000;
/// Frames a socket may fall behind before it is closed.
pub const BROADCAST: usize = 16_384;
/// Events in a snapshot.
pub const SNAPSHOT_EVENTS: usize = 100;
/// Events read from the store at start.
const HYDRATE: u32 = 500;

/// One frame of the stream, serialized once for every socket.
#[derive(Debug)]
pub struct Frame {
    pub seq: u64,
    /// The event's id (event frames).
    pub event_id: Option<Uuid>,
    /// The event's topic (`crewlet.events.<type>`); `None`: a seat frame.
    pub topic: Option<String>,
    pub json: String,
    /// The frame carries no content: every socket gets `json`.
    plain: bool,
    /// The frame without its content, made for the first socket without
    /// `read:content` that sends it (`None`: it could not be read).
    metadata: OnceLock<Option<String>>,
}

impl Frame {
    fn new(
        seq: u64,
        event_id: Option<Uuid>,
        topic: Option<String>,
        json: String,
        plain: bool,
    ) -> Self {
        Self {
            seq,
            event_id,
            topic,
            json,
            plain,
            metadata: OnceLock::new(),
        }
    }

    /// The frame as a socket sees it: whole with `read:content`, its
    /// content left out otherwise.
    pub fn json_for(&self, content: bool) -> Option<&str> {
        if content || self.plain {
            return Some(&self.json);
        }
        self.metadata
            .get_or_init(|| crate::content::strip_frame(&self.json))
            .as_deref()
    }
}

struct Inner {
    projection: Projection,
    ring: VecDeque<Arc<Frame>>,
    seq: u64,
    /// The newest stored event applied.
    cursor: Option<Uuid>,
    /// Payload-free rows of the newest events, newest last.
    recent: VecDeque<Value>,
}

/// The projection, the ring and the fan-out.
pub struct LiveHub {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Frame>>,
    clients: AtomicUsize,
    /// Events the upstream stream dropped (the feed fell behind the queue).
    dropped: AtomicU64,
    started_at: DateTime<Utc>,
    /// `true` once the API drains: every socket closes with 1001.
    stopping: tokio::sync::watch::Sender<bool>,
    /// The read of the event stream, from [`subscribe`](Self::subscribe)
    /// until [`run`](Self::run) takes it.
    upstream: Mutex<Option<crewlet_queue::EventStream>>,
    /// Ids applied from the store at start, so the live read does not
    /// apply them twice.
    hydrated: Mutex<std::collections::HashSet<Uuid>>,
}

/// An event as a stream row: its wire form plus `failed` and `handle`.
pub fn event_row(event: &Event) -> Value {
    let mut v = serde_json::to_value(event).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("failed".into(), Value::Bool(is_failure(event)));
        if let Some(h) = event.agent_handle() {
            m.insert("handle".into(), Value::from(h));
        }
    }
    v
}

/// What a new socket starts from.
pub struct Opening {
    pub snapshot: Value,
    pub replay: Vec<Arc<Frame>>,
    /// The sequence the snapshot reflects; forward only frames after it.
    pub seq: u64,
    /// `Some(false)`: `after` was not in the ring (resume from the store).
    pub in_ring: Option<bool>,
    pub rx: broadcast::Receiver<Arc<Frame>>,
}

impl LiveHub {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(BROADCAST);
        Self {
            inner: Mutex::new(Inner {
                projection: Projection::default(),
                ring: VecDeque::with_capacity(RING),
                seq: 0,
                cursor: None,
                recent: VecDeque::with_capacity(SNAPSHOT_EVENTS),
            }),
            tx,
            clients: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            started_at: Utc::now(),
            stopping: tokio::sync::watch::Sender::new(false),
            upstream: Mutex::new(None),
            hydrated: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// Applies `event` and sends its frames (the event, and the seat it
    /// moved).
    pub fn ingest(&self, event: &Event, org: Option<&Organization>) {
        let mut inner = self.inner.lock();
        inner.seq += 1;
        // One serialization serves both the frame and the snapshot's row.
        let row = event_row(event);
        let frame = Arc::new(Frame::new(
            inner.seq,
            Some(event.id),
            Some(topics::events(&event.event_type)),
            json!({"kind": "event", "data": &row}).to_string(),
            !crate::content::has_content(&event.event_type),
        ));
        if inner.ring.len() == RING {
            inner.ring.pop_front();
        }
        inner.ring.push_back(frame.clone());
        if event.is_stored() {
            inner.cursor = Some(event.id);
            if inner.recent.len() == SNAPSHOT_EVENTS {
                inner.recent.pop_front();
            }
            let mut row = row;
            if let Value::Object(m) = &mut row {
                m.remove("payload");
            }
            inner.recent.push_back(row);
        }
        let changed = inner.projection.apply(event);
        let _ = self.tx.send(frame);
        if let (Some(handle), Some(org)) = (changed, org)
            && let Some(seat) = inner.projection.seat(org, &handle)
        {
            self.send_state(&mut inner, json!({"kind": "seat", "data": seat}));
        }
    }

    fn snapshot_locked(&self, inner: &Inner, org: Option<&Organization>, health: Value) -> Value {
        let events: Vec<&Value> = inner.recent.iter().rev().collect();
        json!({
            "cursor": inner.cursor.map(|c| c.to_string()),
            "generated_at": Utc::now(),
            "company": org.map(|o| o.company().to_owned()),
            "health": health,
            "seats": inner.projection.seats(org),
            "events": events,
            "attention": inner.projection.attention(),
            "budget": inner.projection.budgets().org_json(),
            "today": inner.projection.today(),
        })
    }

    /// Sends a frame that is not an event (`seat`, `budget`), numbered
    /// under the lock that changed the state it carries.
    fn send_state(&self, inner: &mut Inner, frame: Value) {
        inner.seq += 1;
        let _ = self.tx.send(Arc::new(Frame::new(
            inner.seq,
            None,
            None,
            frame.to_string(),
            // Budget frames hold figures only; seat frames hold task text.
            frame["kind"] == "budget",
        )));
    }

    /// Takes a new reading of the ledger: a seat frame for each seat whose
    /// budget moved, and a `budget` frame (the org budget and any new
    /// `budget_near` items) when the org budget moved or a cap crossed 80%.
    pub fn set_budgets(&self, budgets: budget::Budgets, org: Option<&Organization>) {
        let mut inner = self.inner.lock();
        let change = inner.projection.set_budgets(budgets, Utc::now());
        if let Some(org) = org {
            for handle in &change.seats {
                if let Some(seat) = inner.projection.seat(org, handle) {
                    self.send_state(&mut inner, json!({"kind": "seat", "data": seat}));
                }
            }
        }
        if change.org || !change.near.is_empty() {
            let raised: Vec<Attention> = inner
                .projection
                .attention()
                .into_iter()
                .take(change.near.len())
                .collect();
            let mut data = inner.projection.budgets().org_json();
            data["attention"] = json!(raised);
            self.send_state(&mut inner, json!({"kind": "budget", "data": data}));
        }
    }

    /// Reads the ledger every [`budget::REFRESH`] until the task is
    /// dropped; `caps` answers the active organization and company cap.
    pub async fn follow_budgets(
        self: Arc<Self>,
        ledger: Arc<dyn crewlet_store::TokenLedger>,
        caps: impl Fn() -> (Option<Arc<Organization>>, u64) + Send + 'static,
    ) {
        let mut tick = tokio::time::interval(budget::REFRESH);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tick.tick().await;
            match ledger.budgets().await {
                Ok(rows) => {
                    failing = false;
                    let (org, cap) = caps();
                    let budgets = budget::Budgets::from_ledger(&rows, org.as_deref(), cap);
                    self.set_budgets(budgets, org.as_deref());
                }
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(error = %e, "the live stream cannot read the token ledger; budgets shown may be stale");
                }
                Err(_) => {}
            }
        }
    }

    /// The snapshot now.
    pub fn snapshot(&self, org: Option<&Organization>, health: Value) -> Value {
        let inner = self.inner.lock();
        self.snapshot_locked(&inner, org, health)
    }

    /// A socket's start: its snapshot, the ring frames after `after` (when
    /// it is there), and its receiver, all at one sequence.
    pub fn open(&self, org: Option<&Organization>, health: Value, after: Option<Uuid>) -> Opening {
        let inner = self.inner.lock();
        let rx = self.tx.subscribe();
        let snapshot = self.snapshot_locked(&inner, org, health);
        let (replay, in_ring) = match after {
            None => (Vec::new(), None),
            Some(id) => match inner.ring.iter().position(|f| f.event_id == Some(id)) {
                Some(i) => (
                    inner
                        .ring
                        .iter()
                        .skip(i + 1)
                        .filter(|f| f.topic.is_some())
                        .cloned()
                        .collect(),
                    Some(true),
                ),
                None => (Vec::new(), Some(false)),
            },
        };
        Opening {
            snapshot,
            replay,
            seq: inner.seq,
            in_ring,
            rx,
        }
    }

    /// Closes every socket (the API is draining).
    pub fn shutdown(&self) {
        self.stopping.send_replace(true);
    }

    /// Resolves once the API drains.
    pub fn stopping(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    pub fn client_guard(self: &Arc<Self>) -> ClientGuard {
        self.clients.fetch_add(1, Ordering::Relaxed);
        ClientGuard(self.clone())
    }

    pub fn started_at(&self) -> DateTime<Utc> {
        self.started_at
    }

    pub fn upstream_dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Opens the non-durable read of every event. Called before the API
    /// answers anything; [`run`](Self::run) then applies what it reads.
    pub async fn subscribe(&self, queue: &dyn EventQueue) {
        match queue.subscribe_stream(topics::ALL_EVENTS_PATTERN).await {
            Ok(stream) => *self.upstream.lock() = Some(stream),
            Err(e) => tracing::error!(error = %e,
                "the live stream cannot read the event stream; the dashboard shows no live state"),
        }
    }

    /// Seeds the projection and the ring from the newest stored events.
    pub async fn hydrate(
        &self,
        store: &dyn crewlet_store::EventStore,
        org: Option<&Organization>,
    ) -> Result<usize, crewlet_store::StoreError> {
        let page = store
            .recent(&crewlet_store::EventQuery {
                limit: Some(HYDRATE),
                ..Default::default()
            })
            .await?;
        let n = page.events.len();
        let mut hydrated = self.hydrated.lock();
        for e in page.events.iter().rev() {
            hydrated.insert(e.id);
            self.ingest(e, org);
        }
        Ok(n)
    }

    /// Applies what the read of the event stream delivers until the queue
    /// shuts down (events already applied from the store are skipped).
    pub async fn run(
        self: Arc<Self>,
        org: impl Fn() -> Option<Arc<Organization>> + Send + 'static,
    ) {
        let Some(mut stream) = self.upstream.lock().take() else {
            return;
        };
        while let Some(item) = stream.recv().await {
            self.dropped.store(stream.dropped(), Ordering::Relaxed);
            {
                let mut hydrated = self.hydrated.lock();
                if !hydrated.is_empty() && hydrated.remove(&item.event.id) {
                    continue;
                }
            }
            let org = org();
            self.ingest(&item.event, org.as_deref());
        }
    }
}

impl Default for LiveHub {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts a connected socket while it lives.
pub struct ClientGuard(Arc<LiveHub>);

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The subjects a socket asked for (default: every event).
pub fn subjects(spec: Option<&str>) -> Result<Vec<TopicPattern>, String> {
    let spec = spec
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .unwrap_or(topics::ALL_EVENTS_PATTERN);
    spec.split(',')
        .map(|p| TopicPattern::parse(p.trim()).map_err(|e| format!("bad subject `{p}`: {e}")))
        .collect()
}
