//! The in-process broker: the semantic twin of the Pulsar backend, used by
//! every test above this crate and by the embedded default (nothing survives
//! a restart of the process).
//!
//! A [`MemoryBroker`] holds topics and their durable subscriptions (groups);
//! [`MemoryBroker::client`] makes a node ([`MemoryQueue`]) on it, so several
//! simulated processes can compete for one group. Events travel as
//! `Arc<Event>`: no serialization in memory.

use parking_lot::{Mutex, RwLock};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crewlet_core::Event;
use tokio::sync::Notify;

use crate::node::Node;
use crate::topics::{self, DEAD_LETTER_GROUP};
use crate::{DeadLetter, DeliveryOptions, QueueError};

mod client;
mod group;
mod stream;

pub use client::MemoryQueue;
use group::{Group, GroupQueue};
pub(crate) use stream::AbortOnDrop;
use stream::StreamSink;

/// Broker-wide settings.
#[derive(Clone, Debug)]
pub struct MemoryBrokerOptions {
    /// Messages each topic keeps for subscriptions created later: a group's
    /// first subscribe starts at the oldest of these (like Pulsar's `Earliest`
    /// on ledgers not yet trimmed). 0 = a new group sees only what comes after it.
    pub retained_per_topic: usize,
    /// Delivery options of the nodes made by [`MemoryBroker::client`].
    pub delivery: DeliveryOptions,
}

impl Default for MemoryBrokerOptions {
    fn default() -> Self {
        Self {
            retained_per_topic: 1024,
            delivery: DeliveryOptions::default(),
        }
    }
}

/// An in-process broker. Cloning it gives another handle on the same broker.
#[derive(Clone, Default)]
pub struct MemoryBroker {
    inner: Arc<Broker>,
}

#[derive(Default)]
struct Broker {
    topics: RwLock<HashMap<Arc<str>, Arc<Topic>>>,
    streams: Mutex<Vec<Arc<StreamSink>>>,
    retained_per_topic: usize,
    delivery: DeliveryOptions,
}

struct Topic {
    name: Arc<str>,
    state: Mutex<TopicState>,
}

#[derive(Default)]
struct TopicState {
    groups: Vec<Arc<Group>>,
    retained: VecDeque<Mail>,
    streams: Vec<Arc<StreamSink>>,
}

#[derive(Clone)]
struct Mail {
    event: Arc<Event>,
    attempt: u32,
    dead_letter: Option<Arc<DeadLetter>>,
}

impl MemoryBroker {
    pub fn new() -> Self {
        Self::with_options(MemoryBrokerOptions::default())
    }

    pub fn with_options(options: MemoryBrokerOptions) -> Self {
        Self {
            inner: Arc::new(Broker {
                topics: RwLock::default(),
                streams: Mutex::default(),
                retained_per_topic: options.retained_per_topic,
                delivery: options.delivery,
            }),
        }
    }

    /// A new node on this broker, with the broker's delivery options.
    pub fn client(&self) -> MemoryQueue {
        self.client_with(self.inner.delivery.clone())
    }

    /// A new node on this broker with its own delivery options.
    pub fn client_with(&self, delivery: DeliveryOptions) -> MemoryQueue {
        MemoryQueue {
            broker: self.inner.clone(),
            node: Arc::new(Node::new(delivery)),
        }
    }

    /// Messages of `(topic, group)` not yet acknowledged (waiting, delayed or
    /// in a handler); `None` when that subscription does not exist.
    pub fn backlog(&self, topic: &str, group: &str) -> Option<usize> {
        let topic = self.inner.existing_topic(topic)?;
        let state = topic.state.lock();
        let group = state.groups.iter().find(|g| &*g.name == group)?;
        let q = group.queue.lock();
        Some(q.ready.len() + q.in_flight + q.delayed)
    }
}

impl Broker {
    fn existing_topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().get(name).cloned()
    }

    fn topic(&self, name: &str) -> Result<Arc<Topic>, QueueError> {
        if let Some(t) = self.existing_topic(name) {
            return Ok(t);
        }
        topics::validate_topic(name)?;
        let mut all = self.topics.write();
        if let Some(t) = all.get(name) {
            return Ok(t.clone());
        }
        let name: Arc<str> = Arc::from(name);
        let mut streams = self.streams.lock();
        streams.retain(|s| !s.tx.is_closed());
        let state = TopicState {
            streams: streams
                .iter()
                .filter(|s| s.pattern.matches(&name))
                .cloned()
                .collect(),
            ..TopicState::default()
        };
        drop(streams);
        let topic = Arc::new(Topic {
            name: name.clone(),
            state: Mutex::new(state),
        });
        all.insert(name, topic.clone());
        Ok(topic)
    }

    fn publish(
        &self,
        topic: &str,
        event: Arc<Event>,
        dead_letter: Option<Arc<DeadLetter>>,
    ) -> Result<(), QueueError> {
        let topic = self.topic(topic)?;
        let mut state = topic.state.lock();
        let mail = Mail {
            event: event.clone(),
            attempt: 1,
            dead_letter,
        };
        for group in &state.groups {
            group.push(mail.clone());
        }
        if self.retained_per_topic > 0 {
            if state.retained.len() >= self.retained_per_topic {
                state.retained.pop_front();
            }
            state.retained.push_back(mail);
        }
        if !state.streams.is_empty() {
            let name = &topic.name;
            state.streams.retain(|s| s.offer(name, &event));
        }
        Ok(())
    }

    /// The group `(topic, group)`, created at the oldest retained message on first use.
    fn group(&self, topic: &str, group: &str) -> Result<Arc<Group>, QueueError> {
        topics::validate_group(topic, group)?;
        let topic = self.topic(topic)?;
        let mut state = topic.state.lock();
        if let Some(g) = state.groups.iter().find(|g| &*g.name == group) {
            return Ok(g.clone());
        }
        let ready = state.retained.iter().cloned().collect();
        let g = Arc::new(Group {
            topic: topic.name.clone(),
            name: Arc::from(group),
            queue: Mutex::new(GroupQueue {
                ready,
                ..GroupQueue::default()
            }),
            notify: Notify::new(),
        });
        state.groups.push(g.clone());
        Ok(g)
    }

    fn dead_letter(&self, mail: Mail, topic: &str, group: &str, error: String) {
        let dlq = topics::dlq(topic, group);
        // The keeper group holds dead letters until someone drains them.
        if let Err(e) = self.group(&dlq, DEAD_LETTER_GROUP) {
            tracing::error!(topic, group, error = %e, "cannot create the dead-letter subscription");
            return;
        }
        let info = Arc::new(DeadLetter {
            topic: topic.to_owned(),
            group: group.to_owned(),
            attempts: mail.attempt,
            error,
        });
        tracing::warn!(topic, group, event_id = %mail.event.id, attempts = mail.attempt, dlq = %dlq, "message dead-lettered");
        if let Err(e) = self.publish(&dlq, mail.event, Some(info)) {
            tracing::error!(topic, group, error = %e, "dead-letter publish failed");
        }
    }
}

#[cfg(test)]
mod tests;
