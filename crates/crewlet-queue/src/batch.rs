//! Batch delivery: a member that takes what is waiting (plus an optional
//! linger, up to `max_drain`), splits it by a caller's key into parts of at
//! most `max_batch`, and hands each part to [`EventHandler::handle_batch`]
//! once. A part's messages are acknowledged
//! together when its handler succeeds and negatively acknowledged one by one
//! (each with its own attempt count) when it fails; other parts of the same
//! drain are not touched. Nothing is acknowledged before its handler
//! returns, so the broker backlog stays the only buffer.

use std::collections::HashMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use crewlet_core::Event;
use futures::FutureExt;

use crate::{Delivery, EventHandler, HandlerError};

/// What a part is keyed on: `None` puts the message in a part of its own
/// (never merged).
pub type BatchKey = Arc<dyn Fn(&Event) -> Option<String> + Send + Sync>;

/// How a batch member drains and splits.
#[derive(Clone)]
pub struct BatchOptions {
    /// After the first message, wait this long for more (`0`: take only what
    /// is already waiting).
    pub linger: Duration,
    /// Most messages in one part (a larger group of one key comes as
    /// several parts, in order).
    pub max_batch: usize,
    /// Most messages one drain takes: a backlog spread over many keys is
    /// taken whole (up to this), so each key's messages meet in one part.
    pub max_drain: usize,
    pub key: BatchKey,
}

/// Default of [`BatchOptions::max_drain`].
pub const DEFAULT_MAX_DRAIN: usize = 1000;

impl BatchOptions {
    pub fn new(linger: Duration, max_batch: usize, key: BatchKey) -> Self {
        let max_batch = max_batch.max(1);
        Self {
            linger,
            max_batch,
            max_drain: DEFAULT_MAX_DRAIN.max(max_batch),
            key,
        }
    }

    pub fn with_max_drain(mut self, max_drain: usize) -> Self {
        self.max_drain = max_drain.max(1);
        self
    }
}

impl fmt::Debug for BatchOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchOptions")
            .field("linger", &self.linger)
            .field("max_batch", &self.max_batch)
            .field("max_drain", &self.max_drain)
            .finish_non_exhaustive()
    }
}

impl PartialEq for BatchOptions {
    fn eq(&self, other: &Self) -> bool {
        self.linger == other.linger
            && self.max_batch == other.max_batch
            && self.max_drain == other.max_drain
            && Arc::ptr_eq(&self.key, &other.key)
    }
}

impl Eq for BatchOptions {}

/// Splits `items` into parts by key, each part in arrival order and at
/// most `max_part` long, parts in the order of their first message.
pub(crate) fn partition<T>(
    items: Vec<T>,
    event: impl Fn(&T) -> Option<&Event>,
    key: &BatchKey,
    max_part: usize,
) -> Vec<Vec<T>> {
    let mut parts: Vec<Vec<T>> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for item in items {
        let k = event(&item).and_then(|e| key(e));
        match k {
            Some(k) => match by_key.get(&k) {
                Some(&i) => parts[i].push(item),
                None => {
                    by_key.insert(k, parts.len());
                    parts.push(vec![item]);
                }
            },
            None => parts.push(vec![item]),
        }
    }
    let max_part = max_part.max(1);
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        if part.len() <= max_part {
            out.push(part);
            continue;
        }
        let mut rest = part.into_iter().peekable();
        while rest.peek().is_some() {
            out.push(rest.by_ref().take(max_part).collect());
        }
    }
    out
}

/// Runs [`EventHandler::handle_batch`], a panic counting as an error.
pub(crate) async fn run_batch_handler(
    handler: &dyn EventHandler,
    batch: Vec<Delivery>,
) -> Result<(), HandlerError> {
    match AssertUnwindSafe(handler.handle_batch(batch))
        .catch_unwind()
        .await
    {
        Ok(result) => result,
        Err(_) => Err(HandlerError::new("batch handler panicked")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewlet_core::EventType;

    #[test]
    fn parts_keep_arrival_order_and_unkeyed_messages_stand_alone() {
        let ev = |s: &str| Event::new(EventType::TaskCreated, "t").with_summary(s);
        let key: BatchKey = Arc::new(|e: &Event| {
            let k = e.summary.split(':').next().unwrap_or_default().to_owned();
            (k != "solo").then_some(k)
        });
        let items = vec![
            ev("a:1"),
            ev("b:1"),
            ev("solo:1"),
            ev("a:2"),
            ev("solo:2"),
            ev("b:2"),
            ev("a:3"),
        ];
        let parts = partition(items.clone(), |e| Some(e), &key, 20);
        let names: Vec<Vec<&str>> = parts
            .iter()
            .map(|p| p.iter().map(|e| e.summary.as_str()).collect())
            .collect();
        assert_eq!(
            names,
            vec![
                vec!["a:1", "a:2", "a:3"],
                vec!["b:1", "b:2"],
                vec!["solo:1"],
                vec!["solo:2"],
            ]
        );
        // Parts longer than the cap are cut, in order.
        let parts = partition(items, |e| Some(e), &key, 2);
        let names: Vec<Vec<&str>> = parts
            .iter()
            .map(|p| p.iter().map(|e| e.summary.as_str()).collect())
            .collect();
        assert_eq!(
            names,
            vec![
                vec!["a:1", "a:2"],
                vec!["a:3"],
                vec!["b:1", "b:2"],
                vec!["solo:1"],
                vec!["solo:2"],
            ]
        );
    }
}
