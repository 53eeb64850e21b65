//! The in-process broker: the semantic twin of the Pulsar backend, used by
//! every test above this crate and by the embedded default (nothing survives
//! a restart of the process).
//!
//! A [`MemoryBroker`] holds topics and their durable subscriptions (groups);
//! [`MemoryBroker::client`] makes a node ([`MemoryQueue`]) on it, so several
//! simulated processes can compete for one group. Events travel as
//! `Arc<Event>`: no serialization in memory.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use crewlet_core::Event;
use tokio::sync::{Notify, mpsc};

use crate::node::{Node, Signal, Wake, lock, run_handler, wait_while_paused};
use crate::pattern::TopicPattern;
use crate::topics::{self, DEAD_LETTER_GROUP};
use crate::{
    DeadLetter, Delivery, DeliveryOptions, EventHandler, EventQueue, EventStream, PublishListener,
    QueueError, ShutdownReport, StreamEvent, SubscribeOptions, Subscription,
};

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

/// A durable subscription: its mail waits here while no member is attached.
struct Group {
    topic: Arc<str>,
    name: Arc<str>,
    queue: Mutex<GroupQueue>,
    notify: Notify,
}

#[derive(Default)]
struct GroupQueue {
    ready: VecDeque<Mail>,
    /// Members waiting for mail that nobody has woken yet.
    waiting: usize,
    /// Messages handed to members and not yet acked, nacked or returned.
    in_flight: usize,
    /// Nacked messages waiting for their redelivery delay.
    delayed: usize,
}

#[derive(Clone)]
struct Mail {
    event: Arc<Event>,
    attempt: u32,
    dead_letter: Option<Arc<DeadLetter>>,
}

struct StreamSink {
    pattern: TopicPattern,
    tx: mpsc::Sender<StreamEvent>,
    dropped: Arc<AtomicU64>,
}

impl StreamSink {
    /// Offers an event; `false` once the subscriber is gone.
    fn offer(&self, topic: &Arc<str>, event: &Arc<Event>) -> bool {
        match self.tx.try_send(StreamEvent {
            topic: topic.clone(),
            event: event.clone(),
        }) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
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
        let state = lock(&topic.state);
        let group = state.groups.iter().find(|g| &*g.name == group)?;
        let q = lock(&group.queue);
        Some(q.ready.len() + q.in_flight + q.delayed)
    }
}

impl Broker {
    fn existing_topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    fn topic(&self, name: &str) -> Result<Arc<Topic>, QueueError> {
        if let Some(t) = self.existing_topic(name) {
            return Ok(t);
        }
        topics::validate_topic(name)?;
        let mut all = self
            .topics
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(t) = all.get(name) {
            return Ok(t.clone());
        }
        let name: Arc<str> = Arc::from(name);
        let mut streams = lock(&self.streams);
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
        let mut state = lock(&topic.state);
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
        let mut state = lock(&topic.state);
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

    fn remove_stream(&self, sink: &Arc<StreamSink>) {
        let all = self
            .topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        lock(&self.streams).retain(|s| !Arc::ptr_eq(s, sink));
        for topic in all.values() {
            lock(&topic.state).streams.retain(|s| !Arc::ptr_eq(s, sink));
        }
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

impl Group {
    fn push(&self, mail: Mail) {
        let wake = {
            let mut q = lock(&self.queue);
            q.ready.push_back(mail);
            Self::take_waiter(&mut q)
        };
        if wake {
            self.notify.notify_one();
        }
    }

    fn take_waiter(q: &mut GroupQueue) -> bool {
        if q.waiting > 0 {
            q.waiting -= 1;
            true
        } else {
            false
        }
    }

    /// Puts unhandled mail back at the front (a member detached or was cancelled).
    fn give_back(&self, mails: impl DoubleEndedIterator<Item = Mail>) {
        let wake = {
            let mut q = lock(&self.queue);
            let mut n = 0;
            for mail in mails.rev() {
                q.ready.push_front(mail);
                n += 1;
            }
            q.in_flight = q.in_flight.saturating_sub(n);
            n > 0 && Self::take_waiter(&mut q)
        };
        if wake {
            self.notify.notify_one();
        }
    }

    /// Takes up to `max` messages; `None` when there are none (the caller is
    /// then counted as waiting and must await `notify`).
    fn take(&self, max: usize, into: &mut VecDeque<Mail>) -> bool {
        let mut q = lock(&self.queue);
        if q.ready.is_empty() {
            q.waiting += 1;
            return false;
        }
        let n = max.min(q.ready.len());
        into.extend(q.ready.drain(..n));
        q.in_flight += n;
        // More than this member takes: pass the wake-up on to another waiting member.
        let wake_next = !q.ready.is_empty() && Self::take_waiter(&mut q);
        drop(q);
        if wake_next {
            self.notify.notify_one();
        }
        true
    }

    fn stop_waiting(&self) {
        let wake = {
            let mut q = lock(&self.queue);
            q.waiting = q.waiting.saturating_sub(1);
            // Pass on a wake-up this member may have consumed.
            !q.ready.is_empty() && Self::take_waiter(&mut q)
        };
        if wake {
            self.notify.notify_one();
        }
    }

    fn settle(&self) {
        let mut q = lock(&self.queue);
        q.in_flight = q.in_flight.saturating_sub(1);
    }
}

/// A message in a handler: if the member is cancelled before settling it,
/// the message goes back to the subscription (like a consumer disconnect).
struct InFlight<'a> {
    group: &'a Arc<Group>,
    mail: Option<Mail>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(mail) = self.mail.take() {
            self.group.give_back(std::iter::once(mail));
        }
    }
}

/// A node on a [`MemoryBroker`].
#[derive(Clone)]
pub struct MemoryQueue {
    broker: Arc<Broker>,
    node: Arc<Node>,
}

impl MemoryQueue {
    /// A node on a broker of its own (the embedded default).
    pub fn standalone() -> Self {
        MemoryBroker::new().client()
    }

    /// Another node on the same broker, with this node's delivery options.
    pub fn sibling(&self) -> MemoryQueue {
        MemoryBroker {
            inner: self.broker.clone(),
        }
        .client_with(self.node.delivery.clone())
    }
}

#[async_trait]
impl EventQueue for MemoryQueue {
    async fn publish(&self, topic: &str, event: &Event) -> Result<(), QueueError> {
        self.publish_shared(topic, Arc::new(event.clone())).await
    }

    async fn publish_shared(&self, topic: &str, event: Arc<Event>) -> Result<(), QueueError> {
        if self.node.is_shut_down() {
            return Err(QueueError::ShutDown {
                operation: "publish to",
                topic: topic.to_owned(),
            });
        }
        self.broker.publish(topic, event.clone(), None)?;
        self.node.run_listeners(topic, &event).await;
        Ok(())
    }

    fn add_publish_listener(&self, listener: Arc<dyn PublishListener>) {
        self.node.add_listener(listener);
    }

    async fn subscribe_with(
        &self,
        topic: &str,
        group: &str,
        handler: Arc<dyn EventHandler>,
        options: SubscribeOptions,
    ) -> Result<Subscription, QueueError> {
        if self.node.is_shut_down() {
            return Err(QueueError::ShutDown {
                operation: "subscribe to",
                topic: topic.to_owned(),
            });
        }
        let g = self.broker.group(topic, group)?;
        let stop = Arc::new(Signal::default());
        let guard = self.node.member_guard();
        let id = guard.id;
        let member = Member {
            broker: self.broker.clone(),
            node: self.node.clone(),
            group: g,
            handler,
            stop: stop.clone(),
            paused: self.node.pause_switch(topic, group),
            prefetch: options
                .prefetch
                .unwrap_or(self.node.delivery.prefetch)
                .max(1),
        };
        let task = tokio::spawn(async move {
            let _guard = guard;
            member.run().await;
        });
        self.node.set_abort_handle(id, task.abort_handle());
        Ok(Subscription::new(topic, group, stop, task))
    }

    async fn subscribe_stream(&self, pattern: &str) -> Result<EventStream, QueueError> {
        if self.node.is_shut_down() {
            return Err(QueueError::ShutDown {
                operation: "stream",
                topic: pattern.to_owned(),
            });
        }
        let pattern = TopicPattern::parse(pattern)?;
        let (tx, rx) = mpsc::channel(self.node.delivery.stream_buffer.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let sink = Arc::new(StreamSink {
            pattern,
            tx,
            dropped: dropped.clone(),
        });
        {
            // Same lock order as topic creation: topics, then streams.
            let all = self
                .broker
                .topics
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut streams = lock(&self.broker.streams);
            streams.retain(|s| !s.tx.is_closed());
            streams.push(sink.clone());
            drop(streams);
            for topic in all.values() {
                if sink.pattern.matches(&topic.name) {
                    lock(&topic.state).streams.push(sink.clone());
                }
            }
        }
        // Ending the stream when this node shuts down: every holder of the
        // sender lets go, so the receiver sees the end.
        let (node, broker) = (self.node.clone(), self.broker.clone());
        let closer = tokio::spawn(async move {
            node.shutdown.wait().await;
            broker.remove_stream(&sink);
        });
        Ok(EventStream::new(
            rx,
            dropped,
            Some(Box::new(AbortOnDrop(closer))),
        ))
    }

    fn pause(&self, topic: &str, group: &str) -> Result<(), QueueError> {
        topics::validate_topic(topic)?;
        topics::validate_group(topic, group)?;
        self.node.set_paused(topic, group, true);
        Ok(())
    }

    fn resume(&self, topic: &str, group: &str) -> Result<(), QueueError> {
        topics::validate_topic(topic)?;
        topics::validate_group(topic, group)?;
        self.node.set_paused(topic, group, false);
        Ok(())
    }

    async fn shutdown(&self) -> ShutdownReport {
        self.node.shutdown_members().await
    }

    fn backend(&self) -> &'static str {
        "memory"
    }

    fn is_durable(&self) -> bool {
        false
    }
}

/// Aborts a helper task when the value owning it is dropped.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Mail a member took ahead of its handler; returned to the group if the
/// member stops (or is cancelled) before handling it.
struct Prefetched {
    group: Arc<Group>,
    mails: VecDeque<Mail>,
}

impl Prefetched {
    fn return_all(&mut self) {
        if !self.mails.is_empty() {
            self.group.give_back(self.mails.drain(..));
        }
    }
}

impl Drop for Prefetched {
    fn drop(&mut self) {
        self.return_all();
    }
}

struct Member {
    broker: Arc<Broker>,
    node: Arc<Node>,
    group: Arc<Group>,
    handler: Arc<dyn EventHandler>,
    stop: Arc<Signal>,
    paused: tokio::sync::watch::Receiver<bool>,
    prefetch: usize,
}

impl Member {
    async fn run(mut self) {
        let prefetch = self.prefetch;
        let mut batch = Prefetched {
            group: self.group.clone(),
            mails: VecDeque::with_capacity(prefetch),
        };
        loop {
            if let Wake::Stop =
                wait_while_paused(&mut self.paused, &self.stop, &self.node.shutdown).await
            {
                break;
            }
            if !self.group.take(prefetch, &mut batch.mails) {
                tokio::select! {
                    () = self.group.notify.notified() => {}
                    () = self.stop.wait() => { self.group.stop_waiting(); break; }
                    () = self.node.shutdown.wait() => { self.group.stop_waiting(); break; }
                    r = self.paused.wait_for(|p| *p) => {
                        self.group.stop_waiting();
                        if r.is_err() { break; }
                    }
                }
                continue;
            }
            while let Some(mail) = batch.mails.pop_front() {
                self.handle(mail).await;
                if self.stop.is_set() || self.node.shutdown.is_set() || *self.paused.borrow() {
                    batch.return_all();
                    break;
                }
            }
        }
    }

    async fn handle(&self, mail: Mail) {
        let mut in_flight = InFlight {
            group: &self.group,
            mail: Some(mail.clone()),
        };
        let delivery = Delivery {
            event: mail.event.clone(),
            topic: self.group.topic.clone(),
            group: self.group.name.clone(),
            attempt: mail.attempt,
            dead_letter: mail.dead_letter.clone(),
        };
        let result = run_handler(&*self.handler, delivery).await;
        in_flight.mail = None;
        drop(in_flight);
        self.group.settle();
        if let Err(error) = result {
            self.nack(mail, error.to_string());
        }
    }

    fn nack(&self, mut mail: Mail, error: String) {
        let (topic, group) = (&*self.group.topic, &*self.group.name);
        if mail.attempt > self.node.delivery.max_redeliveries {
            self.broker.dead_letter(mail, topic, group, error);
            return;
        }
        tracing::debug!(topic, group, event_id = %mail.event.id, attempt = mail.attempt, %error, "handler failed; redelivering after the delay");
        mail.attempt += 1;
        lock(&self.group.queue).delayed += 1;
        let g = self.group.clone();
        let delay = self.node.delivery.redelivery_delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            {
                let mut q = lock(&g.queue);
                q.delayed = q.delayed.saturating_sub(1);
            }
            g.push(mail);
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use crewlet_core::EventType;

    use super::*;
    use crate::handler_fn;

    fn ev(n: usize) -> Event {
        Event::new(EventType::Other("t".into()), "test").with_summary(n.to_string())
    }

    fn quick() -> DeliveryOptions {
        DeliveryOptions {
            redelivery_delay: Duration::from_millis(10),
            max_redeliveries: 1,
            shutdown_timeout: Duration::from_millis(100),
            stream_buffer: 2,
            ..DeliveryOptions::default()
        }
    }

    async fn until(mut f: impl FnMut() -> bool) {
        for _ in 0..500 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not met in 5 s");
    }

    fn counting(n: &Arc<AtomicUsize>) -> Arc<dyn EventHandler> {
        let n = n.clone();
        handler_fn(move |_| {
            n.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
    }

    #[tokio::test]
    async fn retention_is_bounded_and_replayed_to_a_new_group() -> Result<(), QueueError> {
        let broker = MemoryBroker::with_options(MemoryBrokerOptions {
            retained_per_topic: 3,
            delivery: quick(),
        });
        let q = broker.client();
        for i in 0..5 {
            q.publish("crewlet.t", &ev(i)).await?;
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let _sub = q
            .subscribe(
                "crewlet.t",
                "g",
                handler_fn(move |d| {
                    lock(&s).push(d.event.summary.clone());
                    async { Ok(()) }
                }),
            )
            .await?;
        until(|| lock(&seen).len() == 3).await;
        assert_eq!(*lock(&seen), vec!["2", "3", "4"]);
        Ok(())
    }

    #[tokio::test]
    async fn without_retention_a_new_group_starts_at_the_end() -> Result<(), QueueError> {
        let broker = MemoryBroker::with_options(MemoryBrokerOptions {
            retained_per_topic: 0,
            delivery: quick(),
        });
        let q = broker.client();
        q.publish("crewlet.t", &ev(0)).await?;
        let n = Arc::new(AtomicUsize::new(0));
        let _sub = q.subscribe("crewlet.t", "g", counting(&n)).await?;
        assert_eq!(broker.backlog("crewlet.t", "g"), Some(0));
        q.publish("crewlet.t", &ev(1)).await?;
        until(|| n.load(Ordering::SeqCst) == 1).await;
        Ok(())
    }

    #[tokio::test]
    async fn backlog_counts_unacked_mail_and_dead_letters_are_kept() -> Result<(), QueueError> {
        let broker = MemoryBroker::with_options(MemoryBrokerOptions {
            retained_per_topic: 16,
            delivery: quick(),
        });
        let q = broker.client();
        assert_eq!(broker.backlog("crewlet.t", "g"), None);
        let sub = q
            .subscribe("crewlet.t", "g", counting(&Arc::new(AtomicUsize::new(0))))
            .await?;
        sub.close().await;
        q.publish("crewlet.t", &ev(0)).await?;
        q.publish("crewlet.t", &ev(1)).await?;
        assert_eq!(broker.backlog("crewlet.t", "g"), Some(2));

        let _failing = q
            .subscribe("crewlet.t", "g", handler_fn(|_| async { Err("no".into()) }))
            .await?;
        let dlq = topics::dlq("crewlet.t", "g");
        until(|| broker.backlog(&dlq, DEAD_LETTER_GROUP) == Some(2)).await;
        until(|| broker.backlog("crewlet.t", "g") == Some(0)).await;

        // A group created later on the DLQ replays them with their origin.
        let origins = Arc::new(Mutex::new(Vec::new()));
        let o = origins.clone();
        let _inspect = q
            .subscribe(
                &dlq,
                "inspect",
                handler_fn(move |d| {
                    lock(&o).push(
                        d.dead_letter
                            .as_ref()
                            .map(|i| (i.topic.clone(), i.attempts)),
                    );
                    async { Ok(()) }
                }),
            )
            .await?;
        until(|| lock(&origins).len() == 2).await;
        assert!(
            lock(&origins)
                .iter()
                .all(|o| *o == Some(("crewlet.t".to_owned(), 2)))
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_abandoned_handler_gives_its_message_back() -> Result<(), QueueError> {
        let broker = MemoryBroker::with_options(MemoryBrokerOptions {
            retained_per_topic: 0,
            delivery: quick(),
        });
        let q = broker.client();
        let started = Arc::new(AtomicUsize::new(0));
        let st = started.clone();
        let _stuck = q
            .subscribe(
                "crewlet.t",
                "g",
                handler_fn(move |_| {
                    st.fetch_add(1, Ordering::SeqCst);
                    async {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok(())
                    }
                }),
            )
            .await?;
        q.publish("crewlet.t", &ev(0)).await?;
        until(|| started.load(Ordering::SeqCst) == 1).await;
        let report = q.shutdown().await;
        assert_eq!(report.abandoned, 1);

        let n = Arc::new(AtomicUsize::new(0));
        let _next = broker
            .client()
            .subscribe("crewlet.t", "g", counting(&n))
            .await?;
        until(|| n.load(Ordering::SeqCst) == 1).await;
        Ok(())
    }

    #[tokio::test]
    async fn a_slow_stream_drops_instead_of_blocking_publishers() -> Result<(), QueueError> {
        let q = MemoryBroker::new().client_with(quick());
        let stream = q.subscribe_stream("crewlet.>").await?;
        for i in 0..5 {
            q.publish("crewlet.t", &ev(i)).await?;
        }
        assert_eq!(stream.dropped(), 3);
        drop(stream);
        q.publish("crewlet.t", &ev(9)).await?;
        Ok(())
    }
}
