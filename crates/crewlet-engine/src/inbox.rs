//! Posting a task: the one way work reaches a seat. The `task_created`
//! event goes on the seat's durable inbox (`crewlet.agent.{handle}.inbox`)
//! and, with the same id, on the event stream, where the live view and
//! the event store see it (stored once: same id). The notification router,
//! the scheduler and [`Engine::assign`](crate::Engine::assign) all post here.

use std::sync::Arc;

use crewlet_config::Seat;
use crewlet_core::{Event, TraceContext};
use crewlet_queue::{EventQueue, QueueError, topics};

use crate::task::TaskRequest;

/// A seat's inbox on one queue node.
pub(crate) struct Inbox<'a> {
    queue: &'a dyn EventQueue,
}

/// Why a task was not posted: the inbox topic refused it.
#[derive(Debug, thiserror::Error)]
#[error("cannot publish the task to {topic}: {source}")]
pub(crate) struct PostError {
    pub topic: String,
    #[source]
    pub source: QueueError,
}

impl<'a> Inbox<'a> {
    pub fn new(queue: &'a dyn EventQueue) -> Self {
        Self { queue }
    }

    /// Posts `request` to `seat` as task `task_id`, emitted in `emitted_in`
    /// (see [`crate::task::task_event`]). Returns the `task_created` event
    /// once the inbox holds it; the stream mirror is best effort (a failure
    /// there is logged, the task is posted all the same).
    pub async fn post(
        &self,
        seat: &Seat,
        task_id: &str,
        request: &TaskRequest,
        source: &str,
        emitted_in: Option<TraceContext>,
    ) -> Result<Arc<Event>, PostError> {
        let task = Arc::new(crate::task::task_event(
            request, seat, task_id, source, emitted_in,
        ));
        if let Err(source) = topics::post_task(self.queue, &seat.handle, task.clone()).await {
            let topic = topics::agent_inbox(&seat.handle).topic;
            return Err(PostError { topic, source });
        }
        Ok(task)
    }
}
