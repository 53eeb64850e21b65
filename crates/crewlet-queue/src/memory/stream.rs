//! Live wildcard streams: the sinks a topic offers each event to, and their
//! removal when the streaming node shuts down.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crewlet_core::Event;
use tokio::sync::mpsc;

use super::Broker;
use crate::StreamEvent;
use crate::pattern::TopicPattern;

pub(super) struct StreamSink {
    pub(super) pattern: TopicPattern,
    pub(super) tx: mpsc::Sender<StreamEvent>,
    pub(super) dropped: Arc<AtomicU64>,
}

impl StreamSink {
    /// Offers an event; `false` once the subscriber is gone.
    pub(super) fn offer(&self, topic: &Arc<str>, event: &Arc<Event>) -> bool {
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

impl Broker {
    pub(super) fn remove_stream(&self, sink: &Arc<StreamSink>) {
        let all = self.topics.read();
        self.streams.lock().retain(|s| !Arc::ptr_eq(s, sink));
        for topic in all.values() {
            topic.state.lock().streams.retain(|s| !Arc::ptr_eq(s, sink));
        }
    }
}

/// Aborts a helper task when the value owning it is dropped.
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
