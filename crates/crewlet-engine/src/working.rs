//! Working status: what a chat shows while a seat works on something said
//! there ("is typing..." on Mattermost). The seat runtime asks every
//! [`WorkingStatus`] when a turn starts and holds the [`StatusGuard`]s until
//! it ends; dropping a guard stops its heartbeat.

use std::sync::Arc;

use crate::seat::SeatRuntime;
use crate::task::TaskRequest;

/// Shows a seat at work on a chat backend.
pub(crate) trait WorkingStatus: Send + Sync {
    /// Starts showing `seat` at work on `request`, when this backend and
    /// its mode say so. The seat's current phase
    /// (`seat.current_task()?.phase`) is there to read while it runs.
    fn begin(&self, seat: &Arc<SeatRuntime>, request: &TaskRequest) -> Option<StatusGuard>;
}

/// Stops a working status when dropped.
pub(crate) struct StatusGuard(tokio::task::JoinHandle<()>);

impl StatusGuard {
    pub fn new(heartbeat: tokio::task::JoinHandle<()>) -> Self {
        Self(heartbeat)
    }
}

impl Drop for StatusGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}
