//! What every backend's node shares: publish listeners, paused groups, the
//! shutdown signal and the registry of running members.

use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crewlet_core::Event;
use futures::FutureExt;
use tokio::sync::{Notify, watch};
use tokio::task::AbortHandle;

use crate::{
    Delivery, DeliveryOptions, EventHandler, HandlerError, PublishListener, ShutdownReport,
};

/// A one-shot flag that tasks can wait on.
#[derive(Default)]
pub(crate) struct Signal {
    set: AtomicBool,
    notify: Notify,
}

impl Signal {
    pub(crate) fn fire(&self) {
        self.set.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    pub(crate) fn is_set(&self) -> bool {
        self.set.load(Ordering::SeqCst)
    }

    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}

/// The per-node state both backends embed.
pub(crate) struct Node {
    pub(crate) delivery: DeliveryOptions,
    listeners: RwLock<Arc<[Arc<dyn PublishListener>]>>,
    has_listeners: AtomicBool,
    paused: Mutex<HashMap<(String, String), watch::Sender<bool>>>,
    pub(crate) shutdown: Signal,
    members: Mutex<HashMap<u64, Option<AbortHandle>>>,
    next_member: AtomicU64,
    members_changed: Notify,
}

impl Node {
    pub(crate) fn new(delivery: DeliveryOptions) -> Self {
        Self {
            delivery,
            listeners: RwLock::new(Arc::from(Vec::new())),
            has_listeners: AtomicBool::new(false),
            paused: Mutex::new(HashMap::new()),
            shutdown: Signal::default(),
            members: Mutex::new(HashMap::new()),
            next_member: AtomicU64::new(0),
            members_changed: Notify::new(),
        }
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shutdown.is_set()
    }

    pub(crate) fn add_listener(&self, listener: Arc<dyn PublishListener>) {
        let mut guard = self.listeners.write();
        let mut list: Vec<_> = guard.iter().cloned().collect();
        list.push(listener);
        *guard = Arc::from(list);
        self.has_listeners.store(true, Ordering::Release);
    }

    /// Runs every listener in order; failures and panics are logged, never returned.
    pub(crate) async fn run_listeners(&self, topic: &str, event: &Event) {
        if !self.has_listeners.load(Ordering::Acquire) {
            return;
        }
        let list = self.listeners.read().clone();
        for listener in list.iter() {
            match AssertUnwindSafe(listener.on_publish(topic, event))
                .catch_unwind()
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(
                    topic, event_id = %event.id, %error,
                    "publish listener failed; the event was published anyway"
                ),
                Err(panic) => tracing::error!(
                    topic, event_id = %event.id, panic = panic_message(&*panic),
                    "publish listener panicked; the event was published anyway"
                ),
            }
        }
    }

    /// The pause switch of `(topic, group)` on this node (`true` = paused).
    pub(crate) fn pause_switch(&self, topic: &str, group: &str) -> watch::Receiver<bool> {
        let mut paused = self.paused.lock();
        paused
            .entry((topic.to_owned(), group.to_owned()))
            .or_insert_with(|| watch::channel(false).0)
            .subscribe()
    }

    pub(crate) fn set_paused(&self, topic: &str, group: &str, value: bool) {
        let mut paused = self.paused.lock();
        let switch = paused
            .entry((topic.to_owned(), group.to_owned()))
            .or_insert_with(|| watch::channel(false).0);
        switch.send_replace(value);
    }

    /// Registers a member task about to be spawned; the returned guard must
    /// move into the task so that it unregisters however the task ends.
    pub(crate) fn member_guard(self: &Arc<Self>) -> MemberGuard {
        let id = self.next_member.fetch_add(1, Ordering::Relaxed);
        self.members.lock().insert(id, None);
        MemberGuard {
            node: self.clone(),
            id,
        }
    }

    pub(crate) fn set_abort_handle(&self, id: u64, handle: AbortHandle) {
        if let Some(slot) = self.members.lock().get_mut(&id) {
            *slot = Some(handle);
        }
    }

    /// Fires the shutdown signal and waits for members to finish, then aborts the rest.
    pub(crate) async fn shutdown_members(&self) -> ShutdownReport {
        self.shutdown.fire();
        let deadline = tokio::time::Instant::now() + self.delivery.shutdown_timeout;
        loop {
            let changed = self.members_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.members.lock().is_empty() {
                return ShutdownReport::default();
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                break;
            }
        }
        let members = std::mem::take(&mut *self.members.lock());
        let abandoned = members.len();
        for handle in members.into_values().flatten() {
            handle.abort();
        }
        tracing::warn!(
            abandoned,
            "queue shutdown timed out; abandoned handlers' messages will be redelivered"
        );
        ShutdownReport { abandoned }
    }
}

pub(crate) struct MemberGuard {
    node: Arc<Node>,
    pub(crate) id: u64,
}

impl Drop for MemberGuard {
    fn drop(&mut self) {
        self.node.members.lock().remove(&self.id);
        self.node.members_changed.notify_waiters();
    }
}

/// Why a member's wait ended.
pub(crate) enum Wake {
    Run,
    Stop,
}

/// Waits while `(topic, group)` is paused on this node. Returns `Stop` when
/// the member was closed or the node shut down.
pub(crate) async fn wait_while_paused(
    paused: &mut watch::Receiver<bool>,
    stop: &Signal,
    shutdown: &Signal,
) -> Wake {
    if stop.is_set() || shutdown.is_set() {
        return Wake::Stop;
    }
    if !*paused.borrow() {
        return Wake::Run;
    }
    tokio::select! {
        r = paused.wait_for(|p| !*p) => if r.is_ok() { Wake::Run } else { Wake::Stop },
        () = stop.wait() => Wake::Stop,
        () = shutdown.wait() => Wake::Stop,
    }
}

/// Calls the handler; a panic becomes an error.
pub(crate) async fn run_handler(
    handler: &dyn EventHandler,
    delivery: Delivery,
) -> Result<(), HandlerError> {
    match AssertUnwindSafe(handler.handle(delivery))
        .catch_unwind()
        .await
    {
        Ok(result) => result,
        Err(panic) => Err(HandlerError::new(format!(
            "handler panicked: {}",
            panic_message(&*panic)
        ))),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".to_owned()
    }
}
