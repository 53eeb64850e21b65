//! What the learning loop remembers about a running turn, between its
//! prefetch, its memory tools and its reflection: the trigger text the
//! tools search with, the `refresh_memory` hints already answered, the
//! skills loaded and whether the agent persisted something itself.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use uuid::Uuid;

/// Turns tracked at once; the oldest is forgotten beyond this.
const MAX_TURNS: usize = 1024;

#[derive(Clone, Debug, Default)]
pub(crate) struct TurnMemo {
    /// The trigger as the relevance filters read it.
    pub task: String,
    pub sender: Option<String>,
    /// `refresh_memory` hints and their answers, first asked first.
    pub hints: Vec<(String, String)>,
    /// Skills loaded with `use_skill`, first use first.
    pub skills_used: Vec<String>,
    /// The agent called `reflect_and_persist` in this turn.
    pub persisted: bool,
}

#[derive(Default)]
pub(crate) struct TurnMemos {
    inner: Mutex<(HashMap<Uuid, TurnMemo>, VecDeque<Uuid>)>,
}

impl TurnMemos {
    pub fn start(&self, turn_id: Uuid, memo: TurnMemo) {
        let mut guard = self.inner.lock();
        let (map, order) = &mut *guard;
        if map.insert(turn_id, memo).is_none() {
            order.push_back(turn_id);
        }
        while order.len() > MAX_TURNS {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }

    /// Runs `f` on the turn's memo, creating an empty one for a turn that
    /// started without a prefetch.
    pub fn with<R>(&self, turn_id: Uuid, f: impl FnOnce(&mut TurnMemo) -> R) -> R {
        let mut guard = self.inner.lock();
        let (map, order) = &mut *guard;
        if !map.contains_key(&turn_id) {
            order.push_back(turn_id);
        }
        f(map.entry(turn_id).or_default())
    }

    /// The turn's memo, forgotten (its reflection is the last reader).
    pub fn finish(&self, turn_id: Uuid) -> TurnMemo {
        let mut guard = self.inner.lock();
        let (map, order) = &mut *guard;
        order.retain(|t| *t != turn_id);
        map.remove(&turn_id).unwrap_or_default()
    }
}

/// A bounded set of recently reflected turns.
pub(crate) struct RecentTurns {
    inner: Mutex<(std::collections::HashSet<Uuid>, VecDeque<Uuid>)>,
    cap: usize,
}

impl RecentTurns {
    pub fn new(cap: usize) -> Self {
        Self {
            inner: Mutex::new(Default::default()),
            cap: cap.max(1),
        }
    }

    /// Whether `turn_id` is new (and now remembered).
    pub fn insert(&self, turn_id: Uuid) -> bool {
        let mut guard = self.inner.lock();
        let (set, order) = &mut *guard;
        if !set.insert(turn_id) {
            return false;
        }
        order.push_back(turn_id);
        while order.len() > self.cap {
            if let Some(old) = order.pop_front() {
                set.remove(&old);
            }
        }
        true
    }
}
