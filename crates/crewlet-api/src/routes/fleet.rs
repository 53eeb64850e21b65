//! `GET /fleet`: every node of the fleet, what it does and which seats and
//! duties it holds, read from the lease table (any node answers the same);
//! `POST /fleet/nodes/{id}/drain`: ask a node to hand its seats over.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chrono::Utc;
use crewlet_core::{Event, EventType};
use crewlet_store::{DUTY_PREFIX, Lease, NODE_PREFIX, SEAT_PREFIX};
use serde::Serialize;
use tracing::{info, warn};
use utoipa::ToSchema;

use crate::auth::{AdminAccess, ReadAccess};
use crate::error::{ErrorBody, HttpError, HttpResult};
use crate::state::ApiState;

/// One node of `GET /fleet`.
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetNode {
    /// The stable node id.
    pub id: String,
    /// The process holding the node's leases (`{id}:{random}`).
    pub incarnation: String,
    /// `ingress`, `seats`, `duties`.
    pub roles: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub version: String,
    /// The node's API, when it serves one.
    #[schema(value_type = Option<String>)]
    pub api: Option<String>,
    /// Handing its seats over (`crewlet node drain`).
    pub draining: bool,
    /// Its presence lease was renewed in time.
    pub live: bool,
    /// Last heartbeat (RFC 3339).
    pub heartbeat_at: String,
    /// Seats it holds.
    pub seats: Vec<String>,
    /// Seats whose inbox it has attached (as of its last heartbeat).
    pub seats_attached: u64,
    /// Duties it held last.
    pub duties: Vec<String>,
}

/// One seat of `GET /fleet`.
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetSeat {
    pub handle: String,
    /// The node holding it (or that held it last).
    pub node: String,
    /// The fencing token of the current (or last) hold.
    pub epoch: i64,
    pub live: bool,
    /// Seconds until the lease lapses without renewal (0 when not live).
    pub expires_in_secs: f64,
}

/// One duty of `GET /fleet`.
#[derive(Debug, Serialize, ToSchema)]
pub struct FleetDuty {
    pub name: String,
    pub node: String,
    pub live: bool,
}

/// `GET /fleet`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Fleet {
    pub nodes: Vec<FleetNode>,
    pub seats: Vec<FleetSeat>,
    pub duties: Vec<FleetDuty>,
    /// Agent seats of the active company no live node holds now.
    pub unheld: Vec<String>,
}

fn node_of(l: &Lease) -> String {
    l.preferred.clone()
}

#[utoipa::path(get, path = "/fleet", tag = "fleet",
    responses((status = 200, body = Fleet), (status = 401, body = ErrorBody),
        (status = 503, description = "the lease table cannot be read", body = ErrorBody)),
    security((), ("bearer" = [])))]
pub async fn fleet(_: ReadAccess, State(state): State<ApiState>) -> HttpResult<Json<Fleet>> {
    let leases = &state.inner().stores.leases;
    let (nodes, seats, duties) = match futures::try_join!(
        leases.list(NODE_PREFIX),
        leases.list(SEAT_PREFIX),
        leases.list(DUTY_PREFIX)
    ) {
        Ok(rows) => rows,
        Err(e) => {
            warn!(error = %e, "cannot read the lease table for GET /fleet");
            return Err(HttpError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "lease_store_unavailable",
                format!("the lease table cannot be read: {e}"),
            ));
        }
    };
    let now = Utc::now();
    let seats: Vec<FleetSeat> = seats
        .iter()
        .filter_map(|l| {
            Some(FleetSeat {
                handle: l.resource.strip_prefix(SEAT_PREFIX)?.to_owned(),
                node: node_of(l),
                epoch: l.epoch,
                live: l.live,
                expires_in_secs: if l.live {
                    (l.expires_at - now).num_milliseconds().max(0) as f64 / 1000.0
                } else {
                    0.0
                },
            })
        })
        .collect();
    let duties: Vec<FleetDuty> = duties
        .iter()
        .filter_map(|l| {
            Some(FleetDuty {
                name: l.resource.strip_prefix(DUTY_PREFIX)?.to_owned(),
                node: node_of(l),
                live: l.live,
            })
        })
        .collect();
    let nodes: Vec<FleetNode> = nodes
        .iter()
        .filter(|l| l.live || seats.iter().any(|s| s.live && s.node == node_of(l)))
        .map(|l| {
            let id = node_of(l);
            let meta = &l.meta;
            FleetNode {
                incarnation: meta["incarnation"].as_str().unwrap_or_default().to_owned(),
                roles: meta["roles"]
                    .as_array()
                    .map(|r| {
                        r.iter()
                            .filter_map(|x| x.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
                labels: serde_json::from_value(meta["labels"].clone()).unwrap_or_default(),
                version: meta["version"].as_str().unwrap_or_default().to_owned(),
                api: meta["api"].as_str().map(str::to_owned),
                draining: meta["draining"].as_bool().unwrap_or(false),
                live: l.live,
                heartbeat_at: l.renewed_at.to_rfc3339(),
                seats_attached: meta["seats_attached"].as_u64().unwrap_or(0),
                seats: seats
                    .iter()
                    .filter(|s| s.live && s.node == id)
                    .map(|s| s.handle.clone())
                    .collect(),
                duties: duties
                    .iter()
                    .filter(|d| d.node == id)
                    .map(|d| d.name.clone())
                    .collect(),
                id,
            }
        })
        .collect();
    let unheld = state
        .view()
        .and_then(|v| v.organization())
        .map(|org| {
            org.seats()
                .iter()
                .filter(|s| s.is_agent())
                .filter(|s| !seats.iter().any(|l| l.live && l.handle == s.handle))
                .map(|s| s.handle.clone())
                .collect()
        })
        .unwrap_or_default();
    Ok(Json(Fleet {
        nodes,
        seats,
        duties,
        unheld,
    }))
}

/// `POST /fleet/nodes/{id}/drain`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DrainRequested {
    pub node: String,
}

#[utoipa::path(post, path = "/fleet/nodes/{id}/drain", tag = "fleet",
    params(("id" = String, Path, description = "the node id")),
    responses((status = 202, body = DrainRequested),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "no live node has this id", body = ErrorBody),
        (status = 503, description = "the lease table or the queue cannot be reached", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn drain_node(
    AdminAccess(caller): AdminAccess,
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> HttpResult<(StatusCode, Json<DrainRequested>)> {
    let unavailable =
        |what: String| HttpError::new(StatusCode::SERVICE_UNAVAILABLE, "fleet_unavailable", what);
    let nodes = state
        .inner()
        .stores
        .leases
        .list(&format!("{NODE_PREFIX}{id}"))
        .await
        .map_err(|e| unavailable(format!("the lease table cannot be read: {e}")))?;
    if !nodes
        .iter()
        .any(|l| l.live && l.resource == format!("{NODE_PREFIX}{id}"))
    {
        return Err(HttpError::not_found(format!("no live node `{id}`")));
    }
    let event = drain_event(&id, &caller.name());
    state
        .inner()
        .queue
        .publish(
            &crewlet_queue::topics::events(&EventType::FleetControl),
            &event,
        )
        .await
        .map_err(|e| unavailable(format!("the drain could not be sent: {e}")))?;
    info!(node = %id, by = %caller.name(), "node drain requested");
    Ok((StatusCode::ACCEPTED, Json(DrainRequested { node: id })))
}

/// The `fleet_control` event asking node `id` to drain.
pub fn drain_event(id: &str, by: &str) -> Event {
    Event::new(EventType::FleetControl, "api")
        .with_summary(format!("drain node {id} (by {by})"))
        .with_payload(serde_json::json!({"node": id, "command": "drain", "by": by}))
}
