use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use crewlet_core::Event;
use futures::Stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::node::Signal;
use crate::{HandlerError, QueueError};

/// Delivery knobs shared by every backend. Defaults follow `docs/queue.md` ("Semantics"); tests
/// shorten the delays.
#[derive(Clone, Debug)]
pub struct DeliveryOptions {
    /// How long a negatively acknowledged message waits before redelivery.
    pub redelivery_delay: Duration,
    /// Redeliveries after the first delivery before the message goes to
    /// `dlq-{topic}-{group}`: a message is handled at most `1 + max_redeliveries` times.
    pub max_redeliveries: u32,
    /// Messages a member takes ahead of its handler (Pulsar: the receiver queue and flow permits).
    pub prefetch: usize,
    /// How long `shutdown()` waits for in-flight handlers before abandoning them
    /// (their messages are redelivered to another member or on restart).
    pub shutdown_timeout: Duration,
    /// Events a stream subscriber may fall behind by before further events are
    /// dropped for it (streams are live views, never back-pressure on publishers).
    pub stream_buffer: usize,
}

impl Default for DeliveryOptions {
    fn default() -> Self {
        Self {
            redelivery_delay: Duration::from_secs(1),
            max_redeliveries: 10,
            prefetch: 64,
            shutdown_timeout: Duration::from_secs(30),
            stream_buffer: 1024,
        }
    }
}

/// Options of one subscription member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubscribeOptions {
    /// Overrides [`DeliveryOptions::prefetch`] for this member. Keep it small
    /// where handlers are slow (a seat inbox: a member must not hoard messages
    /// it cannot start); raise it where handlers are quick and traffic high.
    pub prefetch: Option<usize>,
    /// Deliver in batches split by key ([`EventHandler::handle_batch`]);
    /// the member's prefetch is raised to at least `max_drain`.
    pub batch: Option<crate::BatchOptions>,
}

impl SubscribeOptions {
    pub fn with_prefetch(mut self, prefetch: usize) -> Self {
        self.prefetch = Some(prefetch);
        self
    }

    pub fn with_batch(mut self, batch: crate::BatchOptions) -> Self {
        self.batch = Some(batch);
        self
    }

    /// The prefetch of a member with these options.
    pub(crate) fn member_prefetch(&self, default: usize) -> usize {
        let prefetch = self.prefetch.unwrap_or(default).max(1);
        match &self.batch {
            Some(b) => prefetch.max(b.max_drain),
            None => prefetch,
        }
    }
}

/// Where a dead letter came from. Carried with a message on a `dlq-…` topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The topic the message failed on.
    pub topic: String,
    /// The group whose handler failed.
    pub group: String,
    /// How many times it was handled (`1 + max_redeliveries`).
    pub attempts: u32,
    /// The last handler error.
    pub error: String,
}

/// One message handed to a handler.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub event: Arc<Event>,
    pub topic: Arc<str>,
    pub group: Arc<str>,
    /// 1 on the first delivery, 2 on the first redelivery, ... Kept in the
    /// message itself, so it survives consumer reconnects and restarts.
    pub attempt: u32,
    /// Set on messages read from a dead-letter topic.
    pub dead_letter: Option<Arc<DeadLetter>>,
}

/// Handles the messages of one durable subscription. `Ok` acknowledges;
/// `Err` negatively acknowledges (redelivery after the delay, dead letter
/// after the cap). A panic counts as `Err`. Delivery is at least once:
/// dedupe on `event.id` where a duplicate would hurt.
#[async_trait]
pub trait EventHandler: Send + Sync + 'static {
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError>;

    /// One part of a batch subscription's drain (messages sharing a key,
    /// in order): `Ok` acknowledges them all, `Err` negatively acknowledges
    /// each. The default handles them one by one and stops at the first
    /// error (so a failure re-delivers the ones already handled too):
    /// handlers of batch subscriptions override it.
    async fn handle_batch(&self, batch: Vec<Delivery>) -> Result<(), HandlerError> {
        for delivery in batch {
            self.handle(delivery).await?;
        }
        Ok(())
    }
}

/// An [`EventHandler`] from an async closure; see [`handler_fn`].
pub struct FnHandler<F>(F);

/// Wraps `|delivery| async move { ... }` as a shareable handler.
pub fn handler_fn<F, Fut>(f: F) -> Arc<dyn EventHandler>
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    Arc::new(FnHandler(f))
}

#[async_trait]
impl<F, Fut> EventHandler for FnHandler<F>
where
    F: Fn(Delivery) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    async fn handle(&self, delivery: Delivery) -> Result<(), HandlerError> {
        (self.0)(delivery).await
    }
}

/// Runs inline after every successful publish on the node it was added to
/// (the event store writer is one). An error or a panic is logged and never
/// fails the publish: the event has already reached the broker.
#[async_trait]
pub trait PublishListener: Send + Sync + 'static {
    async fn on_publish(&self, topic: &str, event: &Event) -> Result<(), HandlerError>;
}

/// What `shutdown()` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Handlers still running when `shutdown_timeout` expired; they were
    /// cancelled and their messages will be redelivered.
    pub abandoned: usize,
}

/// The event routing contract (`docs/queue.md`, "Semantics"). One value is one node: a process's
/// connection to the broker, with its own publish listeners, paused groups and
/// shutdown. Several nodes on one broker compete for the same groups.
#[async_trait]
pub trait EventQueue: Send + Sync + 'static {
    /// Publishes durably: returns once the broker has the event, after
    /// retrying transient failures. Then runs the publish listeners.
    async fn publish(&self, topic: &str, event: &Event) -> Result<(), QueueError>;

    /// [`EventQueue::publish`] for an event that is already shared; the memory
    /// broker then delivers it without copying.
    async fn publish_shared(&self, topic: &str, event: Arc<Event>) -> Result<(), QueueError> {
        self.publish(topic, &event).await
    }

    /// Adds a listener that runs after each successful publish on this node.
    fn add_publish_listener(&self, listener: Arc<dyn PublishListener>);

    /// Attaches a member of the durable subscription `(topic, group)`, creating
    /// the subscription on first use at the oldest message the topic retains.
    /// Members of one group compete: each message goes to exactly one of them
    /// (in the normal path). Returns once the member is attached.
    async fn subscribe(
        &self,
        topic: &str,
        group: &str,
        handler: Arc<dyn EventHandler>,
    ) -> Result<Subscription, QueueError> {
        self.subscribe_with(topic, group, handler, SubscribeOptions::default())
            .await
    }

    /// [`EventQueue::subscribe`] with per-member options (e.g. a larger
    /// prefetch for quick handlers on busy event topics).
    async fn subscribe_with(
        &self,
        topic: &str,
        group: &str,
        handler: Arc<dyn EventHandler>,
        options: SubscribeOptions,
    ) -> Result<Subscription, QueueError>;

    /// A non-durable live view of every topic matching `pattern` (`*` one
    /// segment, `>` the rest), from now on. Nothing is kept for it while it is
    /// not read beyond `stream_buffer` events, and nothing once it is dropped.
    async fn subscribe_stream(&self, pattern: &str) -> Result<EventStream, QueueError>;

    /// Stops handing messages of `(topic, group)` to this node's members
    /// (a running handler finishes). Messages wait in the subscription (or go
    /// to other nodes' members) until [`EventQueue::resume`]. Members that
    /// attach while paused start paused.
    fn pause(&self, topic: &str, group: &str) -> Result<(), QueueError>;

    fn resume(&self, topic: &str, group: &str) -> Result<(), QueueError>;

    /// Stops taking work: refuses new publishes and subscriptions, lets
    /// running handlers finish (up to `shutdown_timeout`), detaches every
    /// member and stream. Unhandled messages stay in their subscriptions.
    async fn shutdown(&self) -> ShutdownReport;

    /// `memory` or `pulsar`, for boot logs.
    fn backend(&self) -> &'static str;

    /// Whether published events survive a restart of this process.
    fn is_durable(&self) -> bool;
}

/// One member of a durable subscription. Dropping it detaches the member
/// (after its running handler, if any, finishes); [`Subscription::close`] does
/// the same and waits for it.
pub struct Subscription {
    topic: String,
    group: String,
    stop: Arc<Signal>,
    task: Option<JoinHandle<()>>,
}

impl Subscription {
    pub(crate) fn new(topic: &str, group: &str, stop: Arc<Signal>, task: JoinHandle<()>) -> Self {
        Self {
            topic: topic.to_owned(),
            group: group.to_owned(),
            stop,
            task: Some(task),
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    /// Whether the member has stopped (closed, or its node shut down).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Detaches the member and waits until its running handler has finished
    /// and its prefetched messages are back in the subscription.
    pub async fn close(mut self) {
        self.stop.fire();
        if let Some(task) = self.task.take()
            && let Err(e) = task.await
            && e.is_panic()
        {
            tracing::error!(topic = %self.topic, group = %self.group, "subscription member panicked");
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.stop.fire();
    }
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("topic", &self.topic)
            .field("group", &self.group)
            .finish()
    }
}

/// One event seen by a stream subscriber.
#[derive(Clone, Debug)]
pub struct StreamEvent {
    pub topic: Arc<str>,
    pub event: Arc<Event>,
}

/// A live, non-durable view of the topics matching a pattern. Read it with
/// [`EventStream::recv`] or as a `futures::Stream`. Dropping it detaches it.
pub struct EventStream {
    rx: mpsc::Receiver<StreamEvent>,
    dropped: Arc<AtomicU64>,
    _guard: Option<Box<dyn Send + Sync>>,
}

impl EventStream {
    pub(crate) fn new(
        rx: mpsc::Receiver<StreamEvent>,
        dropped: Arc<AtomicU64>,
        guard: Option<Box<dyn Send + Sync>>,
    ) -> Self {
        Self {
            rx,
            dropped,
            _guard: guard,
        }
    }

    /// The next event, or `None` once the node has shut down.
    pub async fn recv(&mut self) -> Option<StreamEvent> {
        self.rx.recv().await
    }

    /// Events dropped because this subscriber fell more than `stream_buffer` behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Stream for EventStream {
    type Item = StreamEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamEvent>> {
        self.rx.poll_recv(cx)
    }
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("dropped", &self.dropped())
            .finish()
    }
}
