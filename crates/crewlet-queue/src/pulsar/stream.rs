//! Live streams on Pulsar: one non-durable subscription per matching topic,
//! so a stream that goes away leaves no subscription and no backlog behind.
//!
//! The namespace is listed when the stream opens and every
//! `stream_refresh`. Topics there at the open are read from the latest
//! message (the stream starts now). A topic that appears later was created
//! after the stream opened, so it is read from its first message: the first
//! event of a new type is not lost, only delayed until the next listing. A
//! reader that failed is re-attached at the latest message (what it missed
//! meanwhile is lost to the stream, as a slow stream's overflow is).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crewlet_core::Event;
use futures::StreamExt;
use pulsar::consumer::InitialPosition;
use pulsar::proto::command_get_topics_of_namespace::Mode;
use pulsar::{ConsumerOptions, SubType};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::Inner;
use crate::memory::AbortOnDrop;
use crate::pattern::TopicPattern;
use crate::{EventStream, QueueError, StreamEvent};

/// The readers of one stream.
#[derive(Default)]
struct Readers {
    /// By subject, while they run.
    running: HashMap<String, JoinHandle<()>>,
    /// Every subject ever attached.
    known: HashSet<String>,
}

struct Tap {
    inner: Arc<Inner>,
    pattern: TopicPattern,
    name: String,
    tx: mpsc::Sender<StreamEvent>,
    dropped: Arc<AtomicU64>,
}

pub(crate) async fn open(inner: &Arc<Inner>, pattern: &str) -> Result<EventStream, QueueError> {
    let parsed = TopicPattern::parse(pattern)?;
    let (tx, rx) = mpsc::channel(inner.options.delivery.stream_buffer.max(1));
    let dropped = Arc::new(AtomicU64::new(0));
    let tap = Arc::new(Tap {
        inner: inner.clone(),
        pattern: parsed,
        name: format!("crewlet-stream-{}", uuid::Uuid::new_v4().simple()),
        tx,
        dropped: dropped.clone(),
    });
    let mut readers = Readers::default();
    tap.discover(&mut readers, true)
        .await
        .map_err(|source| QueueError::Stream {
            pattern: pattern.to_owned(),
            source,
        })?;
    let task = tokio::spawn(tap.clone().refresh(readers));
    Ok(EventStream::new(
        rx,
        dropped,
        Some(Box::new(AbortOnDrop(task))),
    ))
}

impl Tap {
    async fn matching_topics(&self) -> Result<Vec<String>, crate::BoxError> {
        let o = &self.inner.options;
        if self.pattern.is_exact() {
            return Ok(vec![self.pattern.as_str().to_owned()]);
        }
        let ns = format!("{}/{}", o.tenant, o.namespace);
        let client = self.inner.client.clone();
        let listed = super::bounded(o.operation_timeout, async move {
            client.get_topics_of_namespace(ns, Mode::Persistent).await
        })
        .await
        .ok_or("timed out listing the namespace")??;
        Ok(listed
            .iter()
            .filter_map(|full| o.subject_of(full))
            .filter(|s| !s.contains("-partition-") && self.pattern.matches(s))
            .map(str::to_owned)
            .collect())
    }

    /// Attaches a reader to every matching topic not read yet: from the
    /// latest message at the open (`initial`) and for a topic read before,
    /// from the first for a topic new since the last listing.
    async fn discover(
        self: &Arc<Self>,
        readers: &mut Readers,
        initial: bool,
    ) -> Result<(), crate::BoxError> {
        readers.running.retain(|_, task| !task.is_finished());
        for subject in self.matching_topics().await? {
            if readers.running.contains_key(&subject) {
                continue;
            }
            let position = if initial || readers.known.contains(&subject) {
                InitialPosition::Latest
            } else {
                InitialPosition::Earliest
            };
            let consumer = self.reader(&subject, position).await?;
            let task = tokio::spawn(self.clone().read(subject.clone(), consumer));
            readers.known.insert(subject.clone());
            readers.running.insert(subject, task);
        }
        Ok(())
    }

    async fn reader(
        &self,
        subject: &str,
        position: InitialPosition,
    ) -> Result<pulsar::Consumer<Vec<u8>, pulsar::TokioExecutor>, crate::BoxError> {
        let o = &self.inner.options;
        let build = self
            .inner
            .client
            .consumer()
            .with_topic(o.full_topic(subject))
            .with_subscription(self.name.clone())
            .with_subscription_type(SubType::Exclusive)
            .with_consumer_name(self.name.clone())
            .with_unacked_message_resend_delay(None)
            .with_options(
                ConsumerOptions::default()
                    .durable(false)
                    .with_initial_position(position),
            )
            .build::<Vec<u8>>();
        Ok(super::bounded(o.operation_timeout, build)
            .await
            .ok_or_else(|| format!("timed out attaching a reader to {subject}"))??)
    }

    async fn refresh(self: Arc<Self>, mut readers: Readers) {
        let mut tick = tokio::time::interval(self.inner.options.stream_refresh);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = self.inner.node.shutdown.wait() => break,
                () = self.tx.closed() => break,
            }
            if let Err(error) = self.discover(&mut readers, false).await {
                tracing::warn!(pattern = self.pattern.as_str(), %error, "stream topic discovery failed");
            }
        }
        for task in readers.running.values() {
            task.abort();
        }
    }

    async fn read(
        self: Arc<Self>,
        subject: String,
        mut consumer: pulsar::Consumer<Vec<u8>, pulsar::TokioExecutor>,
    ) {
        let topic: Arc<str> = Arc::from(subject.as_str());
        loop {
            let msg = tokio::select! {
                m = consumer.next() => m,
                () = self.tx.closed() => break,
                () = self.inner.node.shutdown.wait() => break,
            };
            let msg = match msg {
                Some(Ok(m)) => m,
                Some(Err(error)) => {
                    tracing::debug!(topic = %subject, %error, "stream reader error; re-attaching at the next refresh");
                    break;
                }
                None => break,
            };
            let _ = consumer.ack(&msg).await;
            if super::member::retry_group(&msg).is_some() {
                // A group's redelivery copy: the stream saw the original.
                continue;
            }
            let event = match Event::from_json(&msg.payload.data) {
                Ok(e) => Arc::new(e),
                Err(error) => {
                    tracing::debug!(topic = %subject, %error, "undecodable event skipped by stream");
                    continue;
                }
            };
            match self.tx.try_send(StreamEvent {
                topic: topic.clone(),
                event,
            }) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => break,
            }
        }
        let _ = consumer.close().await;
    }
}
