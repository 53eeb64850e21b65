//! The [`SeatHost`]: the seats this node holds, by lease.
//!
//! Two loops, each once per heartbeat:
//! - **renew**: the node's presence lease (`node:{id}`, carrying its roles,
//!   labels and version) and every seat it holds. A seat whose lease could
//!   not be renewed is lost: its inbox detaches at once, and a turn still
//!   running finds its journal writes refused (fenced) at its next step.
//! - **place**: read the live nodes and the seat leases, then claim free
//!   seats up to this node's share and give back the rest
//!   ([`super::placement`]). Giving back is graceful: the inbox is held,
//!   the running turn finishes, the inbox detaches, then the lease is
//!   released, so a peer takes the seat at its next sweep without waiting
//!   for a lapse.
//!
//! A turn starts only on a seat whose lease was renewed recently
//! ([`SeatHost::admit`]): a node cut off from the database stops starting
//! turns within two heartbeats, long before its leases lapse.
//!
//! Attaching and detaching are the engine's ([`SeatTarget`]); the host
//! outlives engines across config revisions.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use crewlet_config::{NodeRole, Organization};
use crewlet_core::{Event, EventType};
use crewlet_queue::EventQueue;
use crewlet_store::{Fence, LeaseClaim, LeaseStore, NODE_PREFIX, SEAT_PREFIX, seat_resource};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::{Notify, watch};
use tracing::{debug, info, warn};

use super::identity::{NodeIdentity, host_name};
use super::lapse;
use super::placement::{self, NodeView, SeatLeaseView, SeatSpec};

/// How many seats attach or detach at once.
const CONCURRENCY: usize = 64;

/// Where a held seat runs: the current engine.
#[async_trait]
pub trait SeatTarget: Send + Sync {
    /// Attaches the seat's inbox and control members; `false` when this
    /// engine does not run the seat (not in its company).
    async fn attach(&self, handle: &str) -> bool;

    /// Detaches the seat. `graceful`: hold its inbox, let the running turn
    /// finish, then detach; otherwise detach at once.
    async fn detach(&self, handle: &str, graceful: bool);

    /// Seats attached now.
    fn attached(&self) -> usize {
        self.attached_handles().len()
    }

    /// The handles of the seats attached now.
    fn attached_handles(&self) -> Vec<String>;
}

/// What `/fleet` and `/health` show of this node's seats.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostStatus {
    pub held: Vec<(String, i64)>,
    pub unplaceable: Vec<String>,
    pub draining: bool,
    /// Seconds since the last successful renewal.
    pub renewed_secs_ago: Option<f64>,
}

struct State {
    /// Held seats and the fence of each.
    held: BTreeMap<String, Fence>,
    /// Being given back (still held until released).
    releasing: BTreeSet<String>,
    last_renew: Option<Instant>,
    unplaceable: Vec<String>,
}

/// The seats this node holds; see the module doc.
pub struct SeatHost {
    identity: NodeIdentity,
    leases: Arc<dyn LeaseStore>,
    queue: Arc<dyn EventQueue>,
    /// What the presence lease says that never changes for this process:
    /// the identity, the host, the pid and when the process started (read
    /// once, not at every heartbeat).
    presence_meta: serde_json::Value,
    state: Mutex<State>,
    seats: Mutex<Vec<SeatSpec>>,
    target: Mutex<Option<Arc<dyn SeatTarget>>>,
    draining: AtomicBool,
    stopped: AtomicBool,
    /// Wakes the placement loop early (a new company, a drain).
    wake: Notify,
    /// Counts successful renewals (admission waits on it).
    renewals: watch::Sender<u64>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for SeatHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeatHost")
            .field("node", &self.identity.id)
            .field("incarnation", &self.identity.incarnation)
            .finish_non_exhaustive()
    }
}

/// The seats of `org` to place, with their placement.
pub fn seat_specs(org: &Organization) -> Vec<SeatSpec> {
    org.seats()
        .iter()
        .filter(|s| s.is_agent())
        .map(|s| SeatSpec {
            handle: s.handle.clone(),
            placement: s.role.placement.as_deref().cloned(),
        })
        .collect()
}

impl SeatHost {
    pub fn new(
        identity: NodeIdentity,
        leases: Arc<dyn LeaseStore>,
        queue: Arc<dyn EventQueue>,
        api: Option<String>,
    ) -> Arc<Self> {
        let mut presence_meta = identity.meta(api.as_deref());
        presence_meta["host"] = json!(host_name().unwrap_or_default());
        presence_meta["pid"] = json!(std::process::id());
        presence_meta["process_started"] = json!(process_start_ticks(std::process::id()));
        Arc::new(Self {
            identity,
            leases,
            queue,
            presence_meta,
            state: Mutex::new(State {
                held: BTreeMap::new(),
                releasing: BTreeSet::new(),
                last_renew: None,
                unplaceable: Vec::new(),
            }),
            seats: Mutex::new(Vec::new()),
            target: Mutex::new(None),
            draining: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            wake: Notify::new(),
            renewals: watch::channel(0).0,
            tasks: Mutex::new(Vec::new()),
        })
    }

    pub fn identity(&self) -> &NodeIdentity {
        &self.identity
    }

    /// The seats to place from now on (a new company revision).
    pub fn set_company(&self, org: &Organization) {
        *self.seats.lock() = seat_specs(org);
        self.wake.notify_one();
    }

    /// Where held seats attach from now on; the seats held but not
    /// attached there yet are attached.
    pub async fn set_target(&self, target: Arc<dyn SeatTarget>) {
        *self.target.lock() = Some(target.clone());
        let held: Vec<String> = self.held();
        futures::stream::iter(held)
            .for_each_concurrent(CONCURRENCY, |h| {
                let t = target.clone();
                async move {
                    t.attach(&h).await;
                }
            })
            .await;
    }

    fn target(&self) -> Option<Arc<dyn SeatTarget>> {
        self.target.lock().clone()
    }

    /// Handles of the seats held now.
    pub fn held(&self) -> Vec<String> {
        self.state.lock().held.keys().cloned().collect()
    }

    pub fn holds(&self, handle: &str) -> bool {
        self.state.lock().held.contains_key(handle)
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub fn status(&self) -> HostStatus {
        let s = self.state.lock();
        HostStatus {
            held: s.held.iter().map(|(h, f)| (h.clone(), f.epoch)).collect(),
            unplaceable: s.unplaceable.clone(),
            draining: self.is_draining(),
            renewed_secs_ago: s.last_renew.map(|t| t.elapsed().as_secs_f64()),
        }
    }

    /// The fence a turn of `handle` starts under: only when the seat is held
    /// and its lease was renewed within two heartbeats (waiting up to one
    /// lease for the next renewal); `None` when it is not held.
    pub async fn admit(&self, handle: &str) -> Option<Fence> {
        let deadline = tokio::time::Instant::now() + self.identity.lease_ttl;
        let mut renewals = self.renewals.subscribe();
        loop {
            {
                let s = self.state.lock();
                let fence = s.held.get(handle)?.clone();
                let fresh = s
                    .last_renew
                    .is_some_and(|t| t.elapsed() <= self.identity.heartbeat * 2);
                if fresh {
                    return Some(fence);
                }
            }
            if tokio::time::timeout_at(deadline, renewals.changed())
                .await
                .map_or(true, |r| r.is_err())
            {
                return None;
            }
        }
    }

    /// Claims this node's first seats and starts the loops. A node that
    /// does not run seats only keeps its presence.
    pub async fn start(self: &Arc<Self>) {
        self.adopt_predecessor().await;
        self.renew().await;
        if self.identity.has(NodeRole::Seats) {
            self.place().await;
        }
        let me = self.clone();
        let renew = tokio::spawn(async move {
            let mut tick = tokio::time::interval(me.identity.heartbeat);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            while !me.stopped.load(Ordering::Acquire) {
                tick.tick().await;
                me.renew().await;
            }
        });
        let me = self.clone();
        let place = tokio::spawn(async move {
            if !me.identity.has(NodeRole::Seats) {
                return;
            }
            loop {
                let woken = me.wake.notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                let _ = tokio::time::timeout(me.identity.heartbeat, woken).await;
                if me.stopped.load(Ordering::Acquire) {
                    return;
                }
                me.place().await;
            }
        });
        self.tasks.lock().extend([renew, place]);
    }

    /// When this node's previous incarnation (same node id, same host) is
    /// gone, its leases are taken over at once instead of after a lapse.
    async fn adopt_predecessor(&self) {
        let presence = format!("{NODE_PREFIX}{}", self.identity.id);
        let rows = match self.leases.list(&presence).await {
            Ok(rows) => rows,
            Err(e) => {
                warn!(error = %e, "cannot read the node's presence lease");
                return;
            }
        };
        let Some(row) = rows.into_iter().find(|r| r.resource == presence) else {
            return;
        };
        if row.owner.is_empty() || row.owner == self.identity.incarnation {
            return;
        }
        if !predecessor_is_gone(&row.meta) {
            if row.live {
                warn!(node = %self.identity.id, holder = %row.owner,
                    "another live process holds this node id: its seats stay with it until its leases lapse (node ids must be distinct)");
            }
            return;
        }
        match self
            .leases
            .take_over(
                &row.owner,
                &self.identity.incarnation,
                self.identity.lease_ttl,
            )
            .await
        {
            Ok(taken) => {
                let mut s = self.state.lock();
                for l in &taken {
                    if let Some(h) = l.resource.strip_prefix(SEAT_PREFIX) {
                        s.held.insert(h.to_owned(), l.fence());
                    }
                }
                info!(node = %self.identity.id, previous = %row.owner, seats = s.held.len(),
                    "took over the leases of this node's previous incarnation");
            }
            Err(e) => warn!(error = %e, "cannot take over the previous incarnation's leases"),
        }
    }

    fn presence_claim(&self) -> LeaseClaim {
        let mut meta = self.presence_meta.clone();
        meta["draining"] = json!(self.is_draining());
        meta["seats_attached"] = json!(self.target().map_or(0, |t| t.attached()));
        LeaseClaim::new(
            format!("{NODE_PREFIX}{}", self.identity.id),
            self.identity.id.clone(),
        )
        .with_meta(meta)
    }

    /// Renews presence and the held seats; the seats lost are detached off
    /// this path (a renewal never waits on a detach, so it keeps its pace
    /// however many seats a node loses at once).
    async fn renew(self: &Arc<Self>) {
        let ttl = self.identity.lease_ttl;
        let owner = &self.identity.incarnation;
        if let Err(e) = self
            .leases
            .acquire(&[self.presence_claim()], owner, ttl)
            .await
        {
            warn!(error = %e, "cannot renew the node's presence; no new turns start until it is renewed");
            return;
        }
        let asked: BTreeMap<String, i64> = self
            .state
            .lock()
            .held
            .iter()
            .map(|(h, f)| (h.clone(), f.epoch))
            .collect();
        let resources: Vec<String> = asked.keys().map(|h| seat_resource(h)).collect();
        let renewed = match self.leases.renew(&resources, owner, ttl).await {
            Ok(r) => r,
            Err(e) => {
                warn!(error = %e, "cannot renew the seat leases; no new turns start until they are renewed");
                return;
            }
        };
        let kept: BTreeSet<String> = renewed
            .iter()
            .filter_map(|(r, _)| r.strip_prefix(SEAT_PREFIX).map(str::to_owned))
            .collect();
        let lost: Vec<String> = {
            let mut s = self.state.lock();
            let lost = lapse::lost_seats(&asked, &kept, &s.held, &s.releasing);
            for h in &lost {
                s.held.remove(h);
            }
            s.last_renew = Some(Instant::now());
            lost
        };
        self.renewals.send_modify(|n| *n += 1);
        if lost.is_empty() {
            return;
        }
        warn!(node = %self.identity.id, seats = lost.len(), first = %lost[0],
            "seat leases lost (not renewed in time); those seats are detached here and run where they are held now");
        let me = self.clone();
        tokio::spawn(async move {
            let target = me.target();
            futures::stream::iter(lost)
                .for_each_concurrent(CONCURRENCY, |h| {
                    let (me, target) = (&me, target.clone());
                    async move {
                        debug!(agent = %h, "seat lease lost; detaching");
                        if let Some(t) = target {
                            t.detach(&h, false).await;
                        }
                        me.announce(EventType::SeatReleased, &h, None, "lost").await;
                    }
                })
                .await;
        });
    }

    /// Claims and gives back seats per the placement plan.
    async fn place(self: &Arc<Self>) {
        let (nodes, leases) = match (
            self.leases.list(NODE_PREFIX).await,
            self.leases.list(SEAT_PREFIX).await,
        ) {
            (Ok(n), Ok(l)) => (n, l),
            (Err(e), _) | (_, Err(e)) => {
                warn!(error = %e, "cannot read the fleet's leases; placement waits");
                return;
            }
        };
        let nodes: Vec<NodeView> = nodes
            .iter()
            .filter(|n| n.live && n.meta["draining"] != json!(true))
            .map(|n| NodeView {
                id: n.preferred.clone(),
                labels: serde_json::from_value(n.meta["labels"].clone()).unwrap_or_default(),
                seats: n.meta["roles"]
                    .as_array()
                    .is_none_or(|r| r.iter().any(|x| x == "seats")),
            })
            .collect();
        let leases: BTreeMap<String, SeatLeaseView> = leases
            .into_iter()
            .filter_map(|l| {
                let h = l.resource.strip_prefix(SEAT_PREFIX)?.to_owned();
                Some((
                    h,
                    SeatLeaseView {
                        node: l.preferred,
                        live: l.live,
                    },
                ))
            })
            .collect();
        let me = NodeView {
            id: self.identity.id.clone(),
            labels: self.identity.labels.clone(),
            seats: self.identity.has(NodeRole::Seats),
        };
        let seats = self.seats.lock().clone();
        let (held, releasing): (BTreeSet<String>, BTreeSet<String>) = {
            let s = self.state.lock();
            (s.held.keys().cloned().collect(), s.releasing.clone())
        };
        let plan = placement::plan(&me, &nodes, &seats, &leases, &held, self.is_draining());
        {
            let mut s = self.state.lock();
            if s.unplaceable != plan.unplaceable && !plan.unplaceable.is_empty() {
                warn!(seats = ?plan.unplaceable, "seats_unplaceable: no live node may run these seats (their placement matches none)");
            }
            s.unplaceable = plan.unplaceable.clone();
        }
        for h in plan.release {
            if releasing.contains(&h) {
                continue;
            }
            self.state.lock().releasing.insert(h.clone());
            let me = self.clone();
            let task = tokio::spawn(async move { me.give_back(&h).await });
            let mut tasks = self.tasks.lock();
            // Finished give-backs leave the list (it would grow with every
            // hand-back of a long-lived node).
            tasks.retain(|t| !t.is_finished());
            tasks.push(task);
        }
        if !plan.claim.is_empty() {
            self.claim(plan.claim).await;
        }
        self.reconcile().await;
    }

    /// Makes the target's attached seats the held ones: a seat held but
    /// not attached (claimed while no engine was set, or an attach that
    /// failed) is attached; a seat attached but not held (given back while
    /// an engine was still attaching it at boot) is detached at once.
    async fn reconcile(&self) {
        let Some(target) = self.target() else {
            return;
        };
        let attached: BTreeSet<String> = target.attached_handles().into_iter().collect();
        let (missing, extra): (Vec<String>, Vec<String>) = {
            let s = self.state.lock();
            (
                s.held
                    .keys()
                    .filter(|h| !attached.contains(*h) && !s.releasing.contains(*h))
                    .cloned()
                    .collect(),
                attached
                    .iter()
                    .filter(|h| !s.held.contains_key(*h))
                    .cloned()
                    .collect(),
            )
        };
        for h in &extra {
            warn!(agent = %h, "a seat attached here is not held here; detaching it");
            target.detach(h, false).await;
        }
        futures::stream::iter(missing)
            .for_each_concurrent(CONCURRENCY, |h| {
                let t = target.clone();
                async move {
                    t.attach(&h).await;
                }
            })
            .await;
    }

    async fn claim(&self, handles: Vec<String>) {
        let claims: Vec<LeaseClaim> = handles
            .iter()
            .map(|h| LeaseClaim::new(seat_resource(h), self.identity.id.clone()))
            .collect();
        let won = match self
            .leases
            .acquire(&claims, &self.identity.incarnation, self.identity.lease_ttl)
            .await
        {
            Ok(w) => w,
            Err(e) => {
                warn!(error = %e, "cannot claim seats");
                return;
            }
        };
        let mut got = Vec::new();
        {
            let mut s = self.state.lock();
            for l in won {
                if let Some(h) = l.resource.strip_prefix(SEAT_PREFIX) {
                    s.held.insert(h.to_owned(), l.fence());
                    got.push((h.to_owned(), l.epoch));
                }
            }
        }
        if got.is_empty() {
            return;
        }
        info!(node = %self.identity.id, seats = got.len(), "seats claimed");
        let target = self.target();
        futures::stream::iter(got)
            .for_each_concurrent(CONCURRENCY, |(h, epoch)| {
                let t = target.clone();
                async move {
                    if let Some(t) = t {
                        t.attach(&h).await;
                    }
                    self.announce(EventType::SeatClaimed, &h, Some(epoch), "claimed")
                        .await;
                }
            })
            .await;
    }

    /// Hands a seat back: detach after its turn, then release the lease.
    async fn give_back(&self, handle: &str) {
        if let Some(t) = self.target() {
            t.detach(handle, true).await;
        }
        let released = self
            .leases
            .release(&[seat_resource(handle)], &self.identity.incarnation)
            .await;
        let epoch = {
            let mut s = self.state.lock();
            s.releasing.remove(handle);
            s.held.remove(handle).map(|f| f.epoch)
        };
        match released {
            Ok(_) => {
                debug!(agent = %handle, "seat handed back");
                self.announce(EventType::SeatReleased, handle, epoch, "handed_back")
                    .await;
            }
            Err(e) => {
                warn!(agent = %handle, error = %e, "cannot release a seat lease; it lapses instead")
            }
        }
    }

    /// Stops claiming and hands every seat back (each after its running
    /// turn); returns when none is held. The node stays up.
    pub async fn drain(self: &Arc<Self>) {
        if !self.draining.swap(true, Ordering::AcqRel) {
            info!(node = %self.identity.id, seats = self.held().len(), "draining: handing every seat back");
            // Peers see the drain on the presence lease.
            self.renew().await;
        }
        let held: Vec<String> = self.held();
        let fresh: Vec<String> = {
            let mut s = self.state.lock();
            held.into_iter()
                .filter(|h| s.releasing.insert(h.clone()))
                .collect()
        };
        futures::stream::iter(fresh)
            .for_each_concurrent(CONCURRENCY, |h| async move { self.give_back(&h).await })
            .await;
        // Give-backs started by the placement loop.
        while !self.state.lock().held.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Stops the loops and releases the presence lease (after a drain, or
    /// at shutdown once the seats are detached).
    pub async fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
        let mut resources: Vec<String> = self.held().iter().map(|h| seat_resource(h)).collect();
        resources.push(format!("{NODE_PREFIX}{}", self.identity.id));
        if let Err(e) = self
            .leases
            .release(&resources, &self.identity.incarnation)
            .await
        {
            warn!(error = %e, "cannot release the node's leases; they lapse instead");
        }
        self.state.lock().held.clear();
    }

    async fn announce(&self, kind: EventType, handle: &str, epoch: Option<i64>, reason: &str) {
        let verb = if kind == EventType::SeatClaimed {
            "claimed by"
        } else {
            "released by"
        };
        let event = Event::new(kind, "fleet")
            .with_summary(format!("{handle} {verb} {} ({reason})", self.identity.id))
            .with_agent_handle(handle)
            .with_payload(json!({
                "handle": handle,
                "node": self.identity.id,
                "incarnation": self.identity.incarnation,
                "epoch": epoch,
                "reason": reason,
            }));
        crate::sink::publish_event(self.queue.as_ref(), event).await;
    }
}

/// The start time of process `pid` (clock ticks since boot), when known.
fn process_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22; the command name (field 2) may hold spaces and ends at ')'.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process a presence lease describes is provably gone: it
/// ran on this host and its pid is ours, absent, or a later process.
fn predecessor_is_gone(meta: &serde_json::Value) -> bool {
    let Some(host) = host_name() else {
        return false;
    };
    if meta["host"].as_str() != Some(host.as_str()) {
        return false;
    }
    let Some(pid) = meta["pid"].as_u64().and_then(|p| u32::try_from(p).ok()) else {
        return false;
    };
    if pid == std::process::id() {
        return true;
    }
    match process_start_ticks(pid) {
        None => true,
        Some(now) => meta["process_started"].as_u64() != Some(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_predecessor_is_gone_only_when_this_host_proves_it() {
        let me = std::process::id();
        let started = process_start_ticks(me);
        assert!(started.is_some());
        let host = host_name().unwrap_or_default();
        // Our own pid, started when we did: that is us, alive.
        let alive = json!({"host": host, "pid": me, "process_started": started});
        // (Same pid counts as gone: a presence is never our own incarnation's
        // by the time this is asked, e.g. pid 1 in a restarted container.)
        assert!(predecessor_is_gone(&alive));
        let parent = std::os::unix::process::parent_id();
        let parent_alive =
            json!({"host": host, "pid": parent, "process_started": process_start_ticks(parent)});
        assert!(!predecessor_is_gone(&parent_alive));
        let parent_reused = json!({"host": host, "pid": parent, "process_started": 1});
        assert!(predecessor_is_gone(&parent_reused));
        let other_host = json!({"host": "elsewhere", "pid": 999_999_999u64});
        assert!(!predecessor_is_gone(&other_host));
    }
}
