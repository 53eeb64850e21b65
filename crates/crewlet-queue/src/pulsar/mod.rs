//! The Apache Pulsar backend.
//!
//! - Topic `persistent://{tenant}/{namespace}/{subject}`; a group is a Shared
//!   subscription of that name, created at `Earliest`.
//! - Producers are cached per topic. Event and notification topics batch
//!   (up to 1,000 messages or 128 KiB, waiting at most 1 ms), each message
//!   still acknowledged to its publisher only once stored; inbox and command
//!   topics never batch (each message on its own). The pulsar client
//!   re-creates producers after a broker restart and `publish` retries 5
//!   times (0.5/1/2/4 s).
//! - Consumers take `prefetch` (64) messages ahead. There is **no ack
//!   timeout**: a message is redelivered only when its handler fails or its
//!   consumer disconnects, so an LLM turn may take as long as it needs.
//! - A failed message is republished to its own topic, addressed to its
//!   group alone (`crewlet-retry-group`), with its `crewlet-attempt` property
//!   incremented and a delivery time `delay` ahead (sent unbatched: a batch
//!   carries one delivery time), then acknowledged. Other groups and streams
//!   pass over such a copy. The attempt count lives in the message, so it
//!   survives reconnects, and a subscription costs one topic and one consumer
//!   (no retry topic: a fleet of 10,000 seats is 20,000 topics, not 40,000).
//!   After the cap the message goes to `dlq-{topic}-{group}`, kept by the
//!   durable group [`DEAD_LETTER_GROUP`](crate::topics::DEAD_LETTER_GROUP).
//! - A supervisor per member re-creates its consumers when the client gives
//!   up on them (broker down longer than its own retries).
//! - A broker that is not ready yet (starting, restarting, loading a topic)
//!   is waited for by `connect`, `subscribe` and the first producer of each
//!   topic, for `startup_retry` (60 s); see `retry.rs`.
//! - `TCP_NODELAY` is set on the client's broker sockets (`nodelay.rs`):
//!   without it acks and permit grants stall on delayed ACKs.
//! - Streams are non-durable subscriptions (one per matching topic, found by
//!   listing the namespace every `stream_refresh`): they keep no backlog.

mod connect;
mod member;
mod nodelay;
mod options;
mod retry;
mod stream;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use retry::Failure;

use async_trait::async_trait;
use crewlet_core::Event;
use pulsar::consumer::InitialPosition;
use pulsar::producer::Message as OutMessage;
use pulsar::{ConsumerOptions, Producer, ProducerOptions, Pulsar, SubType, TokioExecutor};
use tokio::sync::Mutex as AsyncMutex;

pub use options::PulsarOptions;

use crate::node::{Node, Signal};
use crate::topics::{self, DEAD_LETTER_GROUP};
use crate::{
    BoxError, EventHandler, EventQueue, EventStream, PublishListener, QueueError, ShutdownReport,
    SubscribeOptions, Subscription,
};

/// Message property holding the delivery attempt (absent = 1).
pub const ATTEMPT_PROPERTY: &str = "crewlet-attempt";
/// Message property of a redelivery copy: the only group it is for.
pub const RETRY_GROUP_PROPERTY: &str = "crewlet-retry-group";
/// Properties of a dead letter: where it failed and why.
pub const DLQ_TOPIC_PROPERTY: &str = "crewlet-dlq-topic";
pub const DLQ_GROUP_PROPERTY: &str = "crewlet-dlq-group";
pub const DLQ_ATTEMPTS_PROPERTY: &str = "crewlet-dlq-attempts";
pub const DLQ_ERROR_PROPERTY: &str = "crewlet-dlq-error";
/// The event's id and type, for operators browsing topics.
pub const EVENT_ID_PROPERTY: &str = "crewlet-event-id";
pub const EVENT_TYPE_PROPERTY: &str = "crewlet-event-type";

type Client = Pulsar<TokioExecutor>;
type SharedProducer = Arc<AsyncMutex<Producer<TokioExecutor>>>;

/// How a producer sends: as the topic's subject says, or never batched
/// (redeliveries, whose delivery time a batch would lose).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Lane {
    Usual,
    Unbatched,
}

/// A node connected to an Apache Pulsar cluster.
#[derive(Clone)]
pub struct PulsarQueue {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) options: PulsarOptions,
    pub(crate) node: Arc<Node>,
    /// Per topic this node has made a producer for: the cached producer, or
    /// `None` after a failed send dropped it. Only the first producer of a
    /// topic (no entry yet) waits for a broker that is still starting.
    producers: parking_lot::Mutex<HashMap<(String, Lane), Option<SharedProducer>>>,
    dead_letter_keepers: AsyncMutex<HashSet<String>>,
    next_consumer: std::sync::atomic::AtomicU64,
}

impl PulsarQueue {
    /// Connects and checks that `{tenant}/{namespace}` exists (a clear error
    /// naming them if not). Never calls the admin API. A broker that is still
    /// starting is waited for, up to [`PulsarOptions::startup_retry`].
    pub async fn connect(options: PulsarOptions) -> Result<Self, QueueError> {
        let client = connect::client(&options).await?;
        connect::check_namespace(&client, &options).await?;
        tracing::info!(url = %options.url, tenant = %options.tenant, namespace = %options.namespace, "connected to pulsar");
        let port = nodelay::broker_port(&options.url);
        let inner = Arc::new(Inner {
            client,
            node: Arc::new(Node::new(options.delivery.clone())),
            options,
            producers: parking_lot::Mutex::new(HashMap::new()),
            dead_letter_keepers: AsyncMutex::new(HashSet::new()),
            next_consumer: std::sync::atomic::AtomicU64::new(0),
        });
        nodelay::spawn(Arc::downgrade(&inner), port);
        Ok(Self { inner })
    }

    pub fn options(&self) -> &PulsarOptions {
        &self.inner.options
    }
}

/// Subjects whose producers batch: events and notifications, many small
/// messages that any member of a group may take in any grouping. Inboxes
/// and commands are never batched: a seat takes one message at a time, and
/// a batch would hand it several at once.
pub const BATCHED_PREFIXES: [&str; 2] = ["crewlet.events.", "crewlet.notifications."];
/// Longest a message waits for its batch to fill.
pub const BATCH_TIMEOUT: Duration = Duration::from_millis(1);
/// Most messages and bytes in one batch.
pub const BATCH_MESSAGES: u32 = 1000;
pub const BATCH_BYTES: usize = 128 * 1024;

fn producer_options(full_topic: &str, lane: Lane) -> ProducerOptions {
    let subject = full_topic.rsplit('/').next().unwrap_or(full_topic);
    if lane == Lane::Usual && BATCHED_PREFIXES.iter().any(|p| subject.starts_with(p)) {
        // Each message still gets its own receipt, only once the broker has
        // stored its batch: durability is unchanged, a publish waits at most
        // BATCH_TIMEOUT more.
        ProducerOptions {
            batch_size: Some(BATCH_MESSAGES),
            batch_byte_size: Some(BATCH_BYTES),
            batch_timeout: Some(BATCH_TIMEOUT),
            block_queue_if_full: true,
            ..ProducerOptions::default()
        }
    } else {
        ProducerOptions {
            batch_size: None,
            block_queue_if_full: true,
            ..ProducerOptions::default()
        }
    }
}

pub(crate) async fn bounded<T: Send + 'static>(
    limit: Duration,
    operation: impl std::future::Future<Output = T> + Send + 'static,
) -> Option<T> {
    match tokio::time::timeout(limit, tokio::spawn(operation)).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(_)) | Err(_) => None,
    }
}

pub(crate) fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Inner {
    fn producer_for(&self, full_topic: &str, lane: Lane) -> Option<SharedProducer> {
        let key = (full_topic.to_owned(), lane);
        self.producers.lock().get(&key).cloned().flatten()
    }

    async fn producer(
        &self,
        full_topic: &str,
        lane: Lane,
    ) -> Result<SharedProducer, pulsar::Error> {
        if let Some(p) = self.producer_for(full_topic, lane) {
            return Ok(p);
        }
        let producer = self.new_producer(full_topic, lane).await?;
        let mut all = self.producers.lock();
        Ok(all
            .entry((full_topic.to_owned(), lane))
            .or_default()
            .get_or_insert_with(|| Arc::new(AsyncMutex::new(producer)))
            .clone())
    }

    /// The first producer this node makes for a topic waits for a broker
    /// that is not ready yet (within [`PulsarOptions::startup_retry`]); later
    /// ones, after a failed send, are left to the publish retry policy.
    async fn first_producer(
        self: &Arc<Self>,
        full_topic: &str,
        lane: Lane,
    ) -> Result<(), BoxError> {
        if self
            .producers
            .lock()
            .contains_key(&(full_topic.to_owned(), lane))
        {
            return Ok(());
        }
        let limit = self.options.operation_timeout;
        let what = format!("create a producer for {full_topic}");
        retry::until_ready(self.options.startup_retry, &what, || {
            let (me, topic) = (self.clone(), full_topic.to_owned());
            let timed_out = || format!("timed out creating a producer for {full_topic}");
            let made = retry::attempt(
                limit,
                timed_out,
                async move { me.producer(&topic, lane).await },
            );
            async move { made.await.map(drop) }
        })
        .await
    }

    async fn new_producer(
        &self,
        full_topic: &str,
        lane: Lane,
    ) -> Result<Producer<TokioExecutor>, pulsar::Error> {
        self.client
            .producer()
            .with_topic(full_topic)
            .with_options(producer_options(full_topic, lane))
            .build()
            .await
    }

    fn forget_producer(&self, full_topic: &str, lane: Lane) {
        if let Some(slot) = self
            .producers
            .lock()
            .get_mut(&(full_topic.to_owned(), lane))
        {
            *slot = None;
        }
    }

    async fn send_once(
        self: Arc<Self>,
        full_topic: String,
        lane: Lane,
        message: OutMessage,
    ) -> Result<(), BoxError> {
        let producer = self.producer(&full_topic, lane).await?;
        let receipt = {
            let mut p = producer.lock().await;
            p.send_non_blocking(message).await?
        };
        receipt.await?;
        Ok(())
    }

    /// Sends with the publish retry policy; the error names the topic.
    pub(crate) async fn send(
        self: &Arc<Self>,
        subject: &str,
        message: OutMessage,
    ) -> Result<(), QueueError> {
        self.send_on(subject, Lane::Usual, message).await
    }

    /// [`Inner::send`] on a chosen lane.
    pub(crate) async fn send_on(
        self: &Arc<Self>,
        subject: &str,
        lane: Lane,
        message: OutMessage,
    ) -> Result<(), QueueError> {
        let full = self.options.full_topic(subject);
        if let Err(source) = self.first_producer(&full, lane).await {
            return Err(QueueError::Publish {
                topic: subject.to_owned(),
                attempts: 1,
                source,
            });
        }
        let attempts = u32::try_from(self.options.publish_backoff.len() + 1).unwrap_or(u32::MAX);
        let mut last: BoxError = "no attempt made".into();
        for attempt in 1..=attempts {
            let sent = bounded(
                self.options.operation_timeout,
                self.clone().send_once(full.clone(), lane, message.clone()),
            )
            .await;
            match sent {
                Some(Ok(())) => return Ok(()),
                Some(Err(e)) => last = e,
                None => {
                    last = format!(
                        "no broker receipt within {:?}",
                        self.options.operation_timeout
                    )
                    .into()
                }
            }
            // A fresh producer next time, in case this one is wedged.
            self.forget_producer(&full, lane);
            if let Some(wait) = self.options.publish_backoff.get(attempt as usize - 1) {
                tracing::warn!(topic = subject, attempt, error = %last, "publish failed; retrying in {wait:?}");
                tokio::time::sleep(*wait).await;
            }
        }
        Err(QueueError::Publish {
            topic: subject.to_owned(),
            attempts,
            source: last,
        })
    }

    pub(crate) fn consumer_name(&self, group: &str) -> String {
        let n = self
            .next_consumer
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{}-{group}-{n}", self.options.client_name)
    }

    /// A Shared consumer of `group` on `subject`, at `Earliest`, without ack
    /// timeout; one attempt.
    pub(crate) async fn consumer(
        &self,
        subject: &str,
        group: &str,
        prefetch: usize,
    ) -> Result<pulsar::Consumer<Vec<u8>, TokioExecutor>, BoxError> {
        self.consumer_once(subject, group, prefetch)
            .await
            .map_err(|f| Box::new(f) as BoxError)
    }

    /// Like [`Inner::consumer`], waiting for a broker that is not ready yet
    /// (within [`PulsarOptions::startup_retry`]).
    pub(crate) async fn consumer_until_ready(
        &self,
        subject: &str,
        group: &str,
        prefetch: usize,
    ) -> Result<pulsar::Consumer<Vec<u8>, TokioExecutor>, BoxError> {
        let what = format!("subscribe to {subject} as {group}");
        retry::until_ready(self.options.startup_retry, &what, || {
            self.consumer_once(subject, group, prefetch)
        })
        .await
    }

    async fn consumer_once(
        &self,
        subject: &str,
        group: &str,
        prefetch: usize,
    ) -> Result<pulsar::Consumer<Vec<u8>, TokioExecutor>, Failure> {
        let prefetch = u32::try_from(prefetch.max(1)).unwrap_or(64);
        let build = self
            .client
            .consumer()
            .with_topic(self.options.full_topic(subject))
            .with_subscription(group)
            .with_subscription_type(SubType::Shared)
            .with_consumer_name(self.consumer_name(group))
            .with_batch_size(prefetch)
            .with_unacked_message_resend_delay(None)
            .with_options(
                ConsumerOptions::default()
                    .with_initial_position(InitialPosition::Earliest)
                    .with_receiver_queue_size(prefetch)
                    .durable(true),
            )
            .build::<Vec<u8>>();
        let timed_out = || format!("timed out subscribing to {subject} as {group}");
        retry::attempt(self.options.operation_timeout * 2, timed_out, build).await
    }

    /// Makes sure the dead-letter topic has its keeper subscription, so dead
    /// letters are retained until someone drains them.
    pub(crate) async fn ensure_dead_letter_keeper(&self, dlq: &str) -> Result<(), BoxError> {
        let mut kept = self.dead_letter_keepers.lock().await;
        if kept.contains(dlq) {
            return Ok(());
        }
        let mut c = self.consumer(dlq, DEAD_LETTER_GROUP, 1).await?;
        let _ = bounded(
            self.options.operation_timeout,
            async move { c.close().await },
        )
        .await;
        kept.insert(dlq.to_owned());
        Ok(())
    }
}

/// The outgoing message for an event.
pub(crate) fn event_message(event: &Event, payload: Vec<u8>) -> OutMessage {
    let mut properties = HashMap::with_capacity(3);
    properties.insert(EVENT_ID_PROPERTY.to_owned(), event.id.to_string());
    properties.insert(
        EVENT_TYPE_PROPERTY.to_owned(),
        event.event_type.as_str().to_owned(),
    );
    OutMessage {
        payload,
        properties,
        event_time: u64::try_from(event.timestamp.timestamp_millis()).ok(),
        ..OutMessage::default()
    }
}

#[async_trait]
impl EventQueue for PulsarQueue {
    async fn publish(&self, topic: &str, event: &Event) -> Result<(), QueueError> {
        let inner = &self.inner;
        if inner.node.is_shut_down() {
            return Err(QueueError::ShutDown {
                operation: "publish to",
                topic: topic.to_owned(),
            });
        }
        topics::validate_topic(topic)?;
        let payload = event.to_json().map_err(|e| QueueError::Publish {
            topic: topic.to_owned(),
            attempts: 0,
            source: Box::new(e),
        })?;
        inner.send(topic, event_message(event, payload)).await?;
        inner.node.run_listeners(topic, event).await;
        Ok(())
    }

    fn add_publish_listener(&self, listener: Arc<dyn PublishListener>) {
        self.inner.node.add_listener(listener);
    }

    async fn subscribe_with(
        &self,
        topic: &str,
        group: &str,
        handler: Arc<dyn EventHandler>,
        options: SubscribeOptions,
    ) -> Result<Subscription, QueueError> {
        if self.inner.node.is_shut_down() {
            return Err(QueueError::ShutDown {
                operation: "subscribe to",
                topic: topic.to_owned(),
            });
        }
        topics::validate_topic(topic)?;
        topics::validate_group(topic, group)?;
        let stop = Arc::new(Signal::default());
        let paused = self.inner.node.pause_switch(topic, group);
        let prefetch = options.member_prefetch(self.inner.options.delivery.prefetch);
        let consumers = if *paused.borrow() {
            None
        } else {
            Some(
                member::attach(
                    &self.inner,
                    topic,
                    group,
                    prefetch,
                    member::Patience::UntilReady,
                )
                .await?,
            )
        };
        let guard = self.inner.node.member_guard();
        let id = guard.id;
        let m = member::Member {
            inner: self.inner.clone(),
            topic: Arc::from(topic),
            group: Arc::from(group),
            handler,
            stop: stop.clone(),
            paused,
            prefetch,
            batch: options.batch,
        };
        let task = tokio::spawn(async move {
            let _guard = guard;
            m.run(consumers).await;
        });
        self.inner.node.set_abort_handle(id, task.abort_handle());
        Ok(Subscription::new(topic, group, stop, task))
    }

    async fn subscribe_stream(&self, pattern: &str) -> Result<EventStream, QueueError> {
        if self.inner.node.is_shut_down() {
            return Err(QueueError::ShutDown {
                operation: "stream",
                topic: pattern.to_owned(),
            });
        }
        stream::open(&self.inner, pattern).await
    }

    fn pause(&self, topic: &str, group: &str) -> Result<(), QueueError> {
        topics::validate_topic(topic)?;
        topics::validate_group(topic, group)?;
        self.inner.node.set_paused(topic, group, true);
        Ok(())
    }

    fn resume(&self, topic: &str, group: &str) -> Result<(), QueueError> {
        topics::validate_topic(topic)?;
        topics::validate_group(topic, group)?;
        self.inner.node.set_paused(topic, group, false);
        Ok(())
    }

    async fn shutdown(&self) -> ShutdownReport {
        let report = self.inner.node.shutdown_members().await;
        let producers: Vec<_> = self
            .inner
            .producers
            .lock()
            .drain()
            .filter_map(|(_, p)| p)
            .collect();
        for p in producers {
            let _ = bounded(self.inner.options.operation_timeout, async move {
                p.lock().await.close().await
            })
            .await;
        }
        report
    }

    fn backend(&self) -> &'static str {
        "pulsar"
    }

    fn is_durable(&self) -> bool {
        true
    }
}
