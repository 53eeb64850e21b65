//! A node on a broker ([`MemoryQueue`]): the [`EventQueue`] a process uses.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use async_trait::async_trait;
use crewlet_core::Event;
use tokio::sync::mpsc;

use super::group::Member;
use super::stream::StreamSink;
use super::{AbortOnDrop, Broker, MemoryBroker};
use crate::node::{Node, Signal};
use crate::pattern::TopicPattern;
use crate::topics;
use crate::{
    EventHandler, EventQueue, EventStream, PublishListener, QueueError, ShutdownReport,
    SubscribeOptions, Subscription,
};

/// A node on a [`MemoryBroker`].
#[derive(Clone)]
pub struct MemoryQueue {
    pub(super) broker: Arc<Broker>,
    pub(super) node: Arc<Node>,
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
            prefetch: options.member_prefetch(self.node.delivery.prefetch),
            batch: options.batch,
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
            let all = self.broker.topics.write();
            let mut streams = self.broker.streams.lock();
            streams.retain(|s| !s.tx.is_closed());
            streams.push(sink.clone());
            drop(streams);
            for topic in all.values() {
                if sink.pattern.matches(&topic.name) {
                    topic.state.lock().streams.push(sink.clone());
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
