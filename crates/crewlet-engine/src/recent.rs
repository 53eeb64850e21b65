//! A bounded set of recently handled ids: delivery is at least once, so
//! consumers remember what they already did.

use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};
use std::hash::Hash;

/// Remembers the last `capacity` ids.
#[derive(Debug)]
pub(crate) struct RecentIds<T: Eq + Hash + Clone> {
    inner: Mutex<(HashSet<T>, VecDeque<T>)>,
    capacity: usize,
}

impl<T: Eq + Hash + Clone> RecentIds<T> {
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new((HashSet::new(), VecDeque::new())),
            capacity: capacity.max(1),
        }
    }

    pub fn contains(&self, id: &T) -> bool {
        self.inner.lock().0.contains(id)
    }

    /// Records `id`; `false` when it was already there.
    pub fn insert(&self, id: T) -> bool {
        let mut guard = self.inner.lock();
        let (set, order) = &mut *guard;
        if !set.insert(id.clone()) {
            return false;
        }
        order.push_back(id);
        while order.len() > self.capacity {
            if let Some(old) = order.pop_front() {
                set.remove(&old);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgets_the_oldest_past_capacity() {
        let r = RecentIds::new(2);
        assert!(r.insert(1));
        assert!(!r.insert(1));
        assert!(r.insert(2));
        assert!(r.insert(3));
        assert!(!r.contains(&1));
        assert!(r.contains(&2) && r.contains(&3));
    }
}
