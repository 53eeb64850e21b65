//! Deduping deliveries: claim a delivery's keys in the webhook-delivery
//! store, publish, and release the claims if the publish fails, so the
//! sender's retry (or the queue's redelivery) is taken as new.
//!
//! Written once here for both places that dedupe: the API's webhook route
//! ([`admit`]: claims under the source's name and marks what reached the
//! queue) and the engine's router ([`claim`] under `engine.router`). The
//! store is reached through [`ClaimStore`]; the API and the engine adapt
//! `crewlet_store::WebhookDeliveries` to it (this crate does not depend on
//! the store), the router adding its retry-until-back patience.

use std::fmt;
use std::future::Future;

use tracing::{debug, warn};

/// The webhook-delivery store as the claim policy uses it.
pub trait ClaimStore: Sync {
    type Error: fmt::Display + Send;

    /// Claims `key`: `true` when nobody had.
    fn claim(
        &self,
        source: &str,
        key: &str,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Whether `key` is claimed.
    fn is_claimed(
        &self,
        source: &str,
        key: &str,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// Gives the claim on `key` back.
    fn release(
        &self,
        source: &str,
        key: &str,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// The keys of one delivery claimed by this process, released if its
/// publish fails.
pub struct DeliveryClaim<'a, S: ClaimStore> {
    store: &'a S,
    source: &'a str,
    claimed: Vec<String>,
}

/// A publish that failed, and the claims that could not be given back.
#[derive(Debug)]
pub struct Unpublished<E, R> {
    pub error: E,
    /// Release failures: those keys stay claimed until the store forgets them.
    pub unreleased: Vec<R>,
}

impl<'a, S: ClaimStore> DeliveryClaim<'a, S> {
    /// A claim on no key: publishing through it releases nothing.
    pub fn none(store: &'a S, source: &'a str) -> Self {
        Self {
            store,
            source,
            claimed: Vec::new(),
        }
    }

    /// The keys held.
    pub fn keys(&self) -> &[String] {
        &self.claimed
    }

    /// Runs `publish`; when it fails, releases every claimed key and
    /// returns the failure with the releases that failed too.
    pub async fn publish<T, E>(
        self,
        publish: impl Future<Output = Result<T, E>>,
    ) -> Result<PublishedClaim<'a, S, T>, Unpublished<E, S::Error>> {
        match publish.await {
            Ok(value) => Ok(PublishedClaim { claim: self, value }),
            Err(error) => {
                let mut unreleased = Vec::new();
                for key in &self.claimed {
                    if let Err(e) = self.store.release(self.source, key).await {
                        unreleased.push(e);
                    }
                }
                Err(Unpublished { error, unreleased })
            }
        }
    }
}

/// A delivery whose publish succeeded, with what the publish returned.
pub struct PublishedClaim<'a, S: ClaimStore, T> {
    claim: DeliveryClaim<'a, S>,
    pub value: T,
}

impl<S: ClaimStore, T> PublishedClaim<'_, S, T> {
    /// Marks each claimed key as published (best effort: without the
    /// marker a retry is deferred to the router, which dedupes it).
    pub async fn confirm(self) -> T {
        let c = &self.claim;
        for key in &c.claimed {
            if let Err(e) = c.store.claim(c.source, &published_marker(key)).await {
                debug!(source = c.source, error = %e, "cannot mark the delivery published; a retry goes to the router");
            }
        }
        self.value
    }
}

/// What the store says of a delivery's keys.
pub enum Claim<'a, S: ClaimStore> {
    /// Every key is new (or let through): the new ones are held.
    New(DeliveryClaim<'a, S>),
    /// Key `index` was claimed before (the keys before it stay claimed).
    Seen { index: usize, key: String },
    /// The store failed.
    Unavailable(S::Error),
}

/// Claims every key of a delivery, in order (its id first, then its replay
/// key), stopping at the first key claimed before unless `let_through`
/// (asked once per delivery) says the delivery is ours anyway.
pub async fn claim<'a, S: ClaimStore>(
    store: &'a S,
    source: &'a str,
    keys: &[String],
    mut let_through: impl FnMut() -> bool + Send,
) -> Claim<'a, S> {
    let mut claimed = Vec::with_capacity(keys.len());
    let mut through = None;
    for (index, key) in keys.iter().enumerate() {
        match store.claim(source, key).await {
            Ok(true) => claimed.push(key.clone()),
            Ok(false) => {
                if !*through.get_or_insert_with(&mut let_through) {
                    return Claim::Seen {
                        index,
                        key: key.clone(),
                    };
                }
            }
            Err(e) => return Claim::Unavailable(e),
        }
    }
    Claim::New(DeliveryClaim {
        store,
        source,
        claimed,
    })
}

/// The marker set once the delivery claimed as `key` is on the queue.
pub fn published_marker(key: &str) -> String {
    format!("{key}#published")
}

/// What the API does with a verified delivery.
pub enum Admission<'a, S: ClaimStore> {
    /// Every key is new; publish through the claim (released if that fails)
    /// and [`confirm`](PublishedClaim::confirm) it.
    New(DeliveryClaim<'a, S>),
    /// A key was seen before and its delivery reached the queue: a retry
    /// of the delivery, or (`replay`) its signed body resent under a fresh id.
    Duplicate { replay: bool },
    /// The router decides: the store is unavailable, or a key was claimed
    /// but its delivery never confirmed as published (the process that
    /// claimed it crashed, or is still publishing). The delivery is
    /// published marked `dedupe_deferred` (through a claim on nothing); the
    /// engine's router, which holds it until the store answers, dedupes it
    /// on the same keys. Refusing would lose it for senders that do not
    /// retry (GitHub), and letting it through unmarked could run it twice.
    Deferred(DeliveryClaim<'a, S>),
}

/// The API's dedupe of a delivery from `source` with `keys`.
pub async fn admit<'a, S: ClaimStore>(
    store: &'a S,
    source: &'a str,
    keys: &[String],
) -> Admission<'a, S> {
    let seen = match claim(store, source, keys, || false).await {
        Claim::New(claimed) => return Admission::New(claimed),
        Claim::Seen { index, key } => store
            .is_claimed(source, &published_marker(&key))
            .await
            .map(|published| (index, published)),
        Claim::Unavailable(e) => Err(e),
    };
    match seen {
        Ok((index, true)) => Admission::Duplicate { replay: index > 0 },
        Ok((_, false)) => {
            debug!(
                source,
                "delivery claimed before but never confirmed published; the router decides"
            );
            Admission::Deferred(DeliveryClaim::none(store, source))
        }
        Err(e) => {
            warn!(source, error = %e, "webhook dedupe unavailable; publishing the delivery for the router to dedupe once the store is back");
            Admission::Deferred(DeliveryClaim::none(store, source))
        }
    }
}

#[cfg(test)]
mod tests;
