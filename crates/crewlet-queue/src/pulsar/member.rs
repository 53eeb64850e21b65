//! One member of a durable subscription on Pulsar, and its supervisor.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crewlet_core::Event;
use futures::{FutureExt, StreamExt};
use pulsar::TokioExecutor;
use pulsar::consumer::Message;
use pulsar::producer::Message as OutMessage;
use tokio::sync::watch;

use super::{
    ATTEMPT_PROPERTY, DLQ_ATTEMPTS_PROPERTY, DLQ_ERROR_PROPERTY, DLQ_GROUP_PROPERTY,
    DLQ_TOPIC_PROPERTY, Inner, Lane, RETRY_GROUP_PROPERTY, now_millis,
};
use crate::batch::{partition, run_batch_handler};
use crate::node::{Signal, Wake, run_handler, wait_while_paused};
use crate::topics;
use crate::{BatchOptions, DeadLetter, Delivery, EventHandler, QueueError};

/// A member's consumer: its group's Shared subscription of the topic, which
/// also carries the group's delayed redeliveries.
pub(crate) type Consumer = pulsar::Consumer<Vec<u8>, TokioExecutor>;
type Incoming = Message<Vec<u8>>;

/// How long [`attach`] tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Patience {
    /// One attempt (the supervisor has its own retry loop).
    Once,
    /// Until the broker is ready, within the startup window (`subscribe`).
    UntilReady,
}

/// Attaches to `(topic, group)`.
pub(crate) async fn attach(
    inner: &Inner,
    topic: &str,
    group: &str,
    prefetch: usize,
    patience: Patience,
) -> Result<Consumer, QueueError> {
    let failed = |source| QueueError::Subscribe {
        topic: topic.to_owned(),
        group: group.to_owned(),
        source,
    };
    consumer(inner, topic, group, prefetch, patience)
        .await
        .map_err(failed)
}

async fn consumer(
    inner: &Inner,
    subject: &str,
    group: &str,
    prefetch: usize,
    patience: Patience,
) -> Result<Consumer, crate::BoxError> {
    match patience {
        Patience::Once => inner.consumer(subject, group, prefetch).await,
        Patience::UntilReady => inner.consumer_until_ready(subject, group, prefetch).await,
    }
}

pub(crate) struct Member {
    pub(crate) inner: Arc<Inner>,
    pub(crate) topic: Arc<str>,
    pub(crate) group: Arc<str>,
    pub(crate) handler: Arc<dyn EventHandler>,
    pub(crate) stop: Arc<Signal>,
    pub(crate) paused: watch::Receiver<bool>,
    pub(crate) prefetch: usize,
    pub(crate) batch: Option<BatchOptions>,
}

/// A message of a batch, and its event.
struct Taken {
    msg: Incoming,
    attempt: u32,
    dead_letter: Option<Arc<DeadLetter>>,
    event: Arc<Event>,
}

/// Why a consuming session ended.
enum End {
    /// Closed, or the node shut down.
    Stop,
    /// Paused on this node.
    Paused,
    /// The client gave up on a consumer (broker gone longer than its retries).
    Lost,
}

impl Member {
    /// Consumes until stopped; re-creates the consumers after pauses and losses.
    pub(crate) async fn run(mut self, mut consumers: Option<Consumer>) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let mut c = match consumers.take() {
                Some(c) => c,
                None => {
                    if let Wake::Stop =
                        wait_while_paused(&mut self.paused, &self.stop, &self.inner.node.shutdown)
                            .await
                    {
                        return;
                    }
                    match attach(
                        &self.inner,
                        &self.topic,
                        &self.group,
                        self.prefetch,
                        Patience::Once,
                    )
                    .await
                    {
                        Ok(c) => {
                            tracing::info!(topic = %self.topic, group = %self.group, "consumer attached");
                            c
                        }
                        Err(error) => {
                            tracing::warn!(topic = %self.topic, group = %self.group, %error, "cannot attach; retrying in {backoff:?}");
                            if self.sleep_or_stop(backoff).await {
                                return;
                            }
                            backoff = (backoff * 2).min(self.inner.options.reconnect_max_backoff);
                            continue;
                        }
                    }
                }
            };
            backoff = Duration::from_millis(100);
            let end = self.consume(&mut c).await;
            match end {
                End::Stop | End::Paused => {
                    detach(c, self.inner.options.operation_timeout * 2).await
                }
                End::Lost => drop(c),
            }
            match end {
                End::Stop => return,
                End::Paused => {}
                End::Lost => {
                    tracing::warn!(topic = %self.topic, group = %self.group, "consumer lost; re-creating it");
                    if self.sleep_or_stop(backoff).await {
                        return;
                    }
                }
            }
        }
    }

    /// `true` when stopped during the wait.
    async fn sleep_or_stop(&self, wait: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(wait) => false,
            () = self.stop.wait() => true,
            () = self.inner.node.shutdown.wait() => true,
        }
    }

    fn should_stop(&self) -> Option<End> {
        if self.stop.is_set() || self.inner.node.shutdown.is_set() {
            Some(End::Stop)
        } else if *self.paused.borrow() {
            Some(End::Paused)
        } else {
            None
        }
    }

    async fn consume(&mut self, c: &mut Consumer) -> End {
        loop {
            if let Some(end) = self.should_stop() {
                return end;
            }
            let next = tokio::select! {
                biased;
                () = self.stop.wait() => return End::Stop,
                () = self.inner.node.shutdown.wait() => return End::Stop,
                r = self.paused.wait_for(|p| *p) => {
                    if r.is_err() { return End::Stop }
                    return End::Paused;
                }
                m = c.next() => m,
            };
            let msg = match next {
                Some(Ok(msg)) => msg,
                Some(Err(error)) => {
                    tracing::warn!(topic = %self.topic, group = %self.group, %error, "consumer error");
                    return End::Lost;
                }
                None => return End::Lost,
            };
            if !self.is_mine(&msg) {
                self.ack(c, &msg).await;
                continue;
            }
            if let Some(options) = self.batch.clone() {
                if let Some(end) = self.drain_in_parts(&options, c, msg).await {
                    return end;
                }
                continue;
            }
            self.handle(c, msg).await;
        }
    }

    /// Whether `msg` is for this group: any original, and the redelivery
    /// copies addressed to it (another group's copies are passed over).
    fn is_mine(&self, msg: &Incoming) -> bool {
        retry_group(msg).is_none_or(|g| g == &*self.group)
    }

    /// A batch member's drain: the first message, what is already waiting
    /// and what arrives within the linger, up to `max_drain`, handled part by
    /// part. Messages of parts not started when the member stops stay
    /// unacknowledged: the broker redelivers them.
    async fn drain_in_parts(
        &self,
        options: &BatchOptions,
        c: &mut Consumer,
        first: Incoming,
    ) -> Option<End> {
        let mut raw = vec![first];
        let mut lost = false;
        let deadline = tokio::time::Instant::now() + options.linger;
        while raw.len() < options.max_drain {
            let next = if options.linger.is_zero() || tokio::time::Instant::now() >= deadline {
                c.next().now_or_never()
            } else {
                tokio::time::timeout_at(deadline, c.next()).await.ok()
            };
            match next {
                Some(Some(Ok(msg))) if !self.is_mine(&msg) => self.ack(c, &msg).await,
                Some(Some(Ok(msg))) => raw.push(msg),
                Some(Some(Err(error))) => {
                    tracing::warn!(topic = %self.topic, group = %self.group, %error, "consumer error");
                    lost = true;
                    break;
                }
                Some(None) => {
                    lost = true;
                    break;
                }
                None => break,
            }
        }
        let mut taken = Vec::with_capacity(raw.len());
        for msg in raw {
            let (attempt, dead_letter) = delivery_props(&msg);
            match Event::from_json(&msg.payload.data) {
                Ok(e) => taken.push(Taken {
                    msg,
                    attempt,
                    dead_letter,
                    event: Arc::new(e),
                }),
                Err(error) => {
                    tracing::error!(topic = %self.topic, group = %self.group, %error, "undecodable message");
                    let error = format!("undecodable event: {error}");
                    self.dead_letter(c, &msg, attempt, &error).await;
                }
            }
        }
        for part in partition(taken, |t| Some(&*t.event), &options.key, options.max_batch) {
            if let Some(end) = self.should_stop() {
                return Some(end);
            }
            let deliveries = part
                .iter()
                .map(|t| Delivery {
                    event: t.event.clone(),
                    topic: self.topic.clone(),
                    group: self.group.clone(),
                    attempt: t.attempt,
                    dead_letter: t.dead_letter.clone(),
                })
                .collect();
            let result = run_batch_handler(&*self.handler, deliveries).await;
            for t in &part {
                match &result {
                    Ok(()) => self.ack(c, &t.msg).await,
                    Err(error) => {
                        self.failed(c, &t.msg, &t.event, t.attempt, &error.to_string())
                            .await;
                    }
                }
            }
        }
        lost.then_some(End::Lost)
    }

    async fn handle(&self, consumer: &mut Consumer, msg: Incoming) {
        let (attempt, dead_letter) = delivery_props(&msg);
        let event = match Event::from_json(&msg.payload.data) {
            Ok(e) => Arc::new(e),
            Err(error) => {
                // A message no handler can read: dead-letter it at once.
                tracing::error!(topic = %self.topic, group = %self.group, %error, "undecodable message");
                let error = format!("undecodable event: {error}");
                self.dead_letter(consumer, &msg, attempt, &error).await;
                return;
            }
        };
        let delivery = Delivery {
            event: event.clone(),
            topic: self.topic.clone(),
            group: self.group.clone(),
            attempt,
            dead_letter,
        };
        match run_handler(&*self.handler, delivery).await {
            Ok(()) => self.ack(consumer, &msg).await,
            Err(error) => {
                self.failed(consumer, &msg, &event, attempt, &error.to_string())
                    .await;
            }
        }
    }

    /// A handler failed on `msg`: redelivered later, or dead-lettered at
    /// the cap.
    async fn failed(
        &self,
        consumer: &mut Consumer,
        msg: &Incoming,
        event: &Event,
        attempt: u32,
        error: &str,
    ) {
        if attempt > self.inner.options.delivery.max_redeliveries {
            self.dead_letter(consumer, msg, attempt, error).await;
        } else {
            self.retry_later(consumer, msg, event, attempt, error).await;
        }
    }

    async fn ack(&self, consumer: &mut Consumer, msg: &Incoming) {
        if let Err(error) = consumer.ack(msg).await {
            tracing::warn!(topic = %self.topic, group = %self.group, %error, "ack failed; the message may be redelivered");
        }
    }

    /// Republishes to the topic, for this group only, with the next attempt
    /// number, delivered after the delay; then acks the original.
    async fn retry_later(
        &self,
        consumer: &mut Consumer,
        msg: &Incoming,
        event: &Event,
        attempt: u32,
        error: &str,
    ) {
        let delay = self.inner.options.delivery.redelivery_delay;
        tracing::debug!(topic = %self.topic, group = %self.group, event_id = %event.id, attempt, error, "handler failed; redelivering after {delay:?}");
        let mut out = copy_of(msg);
        out.properties
            .insert(ATTEMPT_PROPERTY.to_owned(), (attempt + 1).to_string());
        out.properties
            .insert(RETRY_GROUP_PROPERTY.to_owned(), self.group.to_string());
        let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        out.deliver_at_time = Some(now_millis().saturating_add(delay_ms));
        match self.inner.send_on(&self.topic, Lane::Unbatched, out).await {
            Ok(()) => self.ack(consumer, msg).await,
            Err(e) => {
                tracing::error!(topic = %self.topic, group = %self.group, error = %e, "cannot schedule the redelivery; asking the broker to redeliver now");
                let _ = consumer.nack(msg).await;
            }
        }
    }

    async fn dead_letter(
        &self,
        consumer: &mut Consumer,
        msg: &Incoming,
        attempt: u32,
        error: &str,
    ) {
        let dlq = topics::dlq(&self.topic, &self.group);
        if let Err(e) = self.inner.ensure_dead_letter_keeper(&dlq).await {
            tracing::warn!(dlq = %dlq, error = %e, "cannot create the dead-letter keeper subscription");
        }
        let mut out = copy_of(msg);
        out.properties.remove(ATTEMPT_PROPERTY);
        out.properties.remove(RETRY_GROUP_PROPERTY);
        out.properties
            .insert(DLQ_TOPIC_PROPERTY.to_owned(), self.topic.to_string());
        out.properties
            .insert(DLQ_GROUP_PROPERTY.to_owned(), self.group.to_string());
        out.properties
            .insert(DLQ_ATTEMPTS_PROPERTY.to_owned(), attempt.to_string());
        out.properties.insert(
            DLQ_ERROR_PROPERTY.to_owned(),
            error.chars().take(2000).collect(),
        );
        match self.inner.send(&dlq, out).await {
            Ok(()) => {
                tracing::warn!(topic = %self.topic, group = %self.group, attempts = attempt, dlq = %dlq, "message dead-lettered");
                self.ack(consumer, msg).await;
            }
            Err(e) => {
                tracing::error!(topic = %self.topic, group = %self.group, error = %e, "cannot dead-letter; asking the broker to redeliver");
                let _ = consumer.nack(msg).await;
            }
        }
    }
}

/// A message's attempt number (1 when unset) and, on a dead-letter topic,
/// where it came from.
fn delivery_props(msg: &Incoming) -> (u32, Option<Arc<DeadLetter>>) {
    let props: HashMap<&str, &str> = msg
        .payload
        .metadata
        .properties
        .iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_str()))
        .collect();
    let attempt = props
        .get(ATTEMPT_PROPERTY)
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    (attempt, dead_letter_of(&props))
}

/// The group a redelivery copy is addressed to; `None` for an original.
pub(crate) fn retry_group(msg: &Incoming) -> Option<&str> {
    msg.payload
        .metadata
        .properties
        .iter()
        .find(|kv| kv.key == RETRY_GROUP_PROPERTY)
        .map(|kv| kv.value.as_str())
}

/// The same payload and properties, to republish elsewhere.
fn copy_of(msg: &Incoming) -> OutMessage {
    OutMessage {
        payload: msg.payload.data.clone(),
        properties: msg
            .payload
            .metadata
            .properties
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect(),
        event_time: msg.payload.metadata.event_time,
        ..OutMessage::default()
    }
}

fn dead_letter_of(props: &HashMap<&str, &str>) -> Option<Arc<DeadLetter>> {
    let topic = props.get(DLQ_TOPIC_PROPERTY)?;
    Some(Arc::new(DeadLetter {
        topic: (*topic).to_owned(),
        group: props
            .get(DLQ_GROUP_PROPERTY)
            .copied()
            .unwrap_or_default()
            .to_owned(),
        attempts: props
            .get(DLQ_ATTEMPTS_PROPERTY)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        error: props
            .get(DLQ_ERROR_PROPERTY)
            .copied()
            .unwrap_or_default()
            .to_owned(),
    }))
}

/// Lets queued acks reach the broker, then closes the consumer. Messages
/// drained here are not acked: the broker redelivers them once we close.
async fn detach(c: Consumer, limit: Duration) {
    let _ = super::bounded(limit, drain_and_close(c)).await;
}

async fn drain_and_close(mut c: Consumer) {
    // The client's consumer engine may be blocked handing us a prefetched
    // message, with our last ack queued behind it: read until it is quiet.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while tokio::time::Instant::now() < deadline {
        let quiet = Duration::from_millis(50);
        match tokio::time::timeout(quiet, c.next()).await {
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    let _ = c.close().await;
}
