//! Hooks for embedders: a callback per task state change or agent spawn.
//!
//! A hook is a publish listener on the engine's queue node filtered to the
//! relevant event types: it sees every such event this process publishes
//! (its seats' turns, its router, its scheduler), inline and in order. Keep
//! callbacks quick (hand heavy work to a task); a panicking callback is
//! logged and never disturbs the engine. Dropping the [`Hook`] turns the
//! callback off.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use crewlet_core::{Event, EventType};
use crewlet_queue::{EventQueue, HandlerError, PublishListener};

/// Event types of a task's life: created, started, completed, failed, delegated.
pub const TASK_STATE_EVENTS: [EventType; 5] = [
    EventType::TaskCreated,
    EventType::TaskStarted,
    EventType::TaskCompleted,
    EventType::TaskFailed,
    EventType::TaskDelegated,
];

type Callback = Arc<dyn Fn(&Event) + Send + Sync>;

/// A registered callback; dropping it turns the callback off.
#[must_use = "the hook is turned off when this is dropped"]
pub struct Hook {
    active: Arc<AtomicBool>,
}

impl Hook {
    /// Turns the callback off now.
    pub fn cancel(&self) {
        self.active.store(false, Ordering::Release);
    }

    /// Keeps the callback for as long as the engine's queue node lives.
    pub fn forever(self) {
        std::mem::forget(self);
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        self.cancel();
    }
}

struct HookListener {
    types: Vec<EventType>,
    callback: Callback,
    active: Arc<AtomicBool>,
    /// The same event published on two topics (an inbox and the event
    /// stream) is seen once.
    seen: crate::recent::RecentIds<uuid::Uuid>,
}

#[async_trait]
impl PublishListener for HookListener {
    async fn on_publish(&self, _topic: &str, event: &Event) -> Result<(), HandlerError> {
        if self.active.load(Ordering::Acquire)
            && self.types.contains(&event.event_type)
            && self.seen.insert(event.id)
        {
            (self.callback)(event);
        }
        Ok(())
    }
}

/// Registers `callback` for events of `types` published by `queue`.
pub(crate) fn register(queue: &dyn EventQueue, types: &[EventType], callback: Callback) -> Hook {
    let active = Arc::new(AtomicBool::new(true));
    queue.add_publish_listener(Arc::new(HookListener {
        types: types.to_vec(),
        callback,
        active: active.clone(),
        seen: crate::recent::RecentIds::new(1024),
    }));
    Hook { active }
}
