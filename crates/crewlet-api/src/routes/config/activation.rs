//! What follows a revision becoming active: the company is reloaded, the
//! engine told, and a `config_revision_activated` event published.

use crewlet_core::{Event, EventType, TraceContext};
use crewlet_queue::topics;
use crewlet_store::ConfigRevision;
use tracing::{info, warn};

use crate::auth::Caller;
use crate::state::ApiState;

/// After a revision became active: reload, tell the engine, publish an event.
pub(super) async fn activated(state: &ApiState, revision: &ConfigRevision, caller: &Caller) {
    state.reload_company().await;
    if let Some(engine) = &state.inner().engine {
        engine.config_activated(revision.revision_id);
    }
    info!(
        revision_id = revision.revision_id,
        by = %caller.name(),
        source = %revision.source,
        "company revision activated"
    );
    let event = Event::new(EventType::ConfigRevisionActivated, "api.config")
        .with_summary(format!(
            "company revision {} activated ({})",
            revision.revision_id, revision.summary
        ))
        .with_sender(caller.name())
        .with_trace(TraceContext::new_root())
        .with_payload(serde_json::json!({
            "revision_id": revision.revision_id,
            "parent_revision_id": revision.parent_revision_id,
            "revision_uuid": revision.uuid,
            "parent_revision_uuid": revision.parent_uuid,
            "created_by": revision.created_by,
            "source": revision.source,
            "summary": revision.summary,
        }));
    let topic = topics::events(&event.event_type);
    if let Err(e) = state.inner().queue.publish(&topic, &event).await {
        warn!(error = %e, topic, "cannot publish config_revision_activated");
    }
}
