//! `crewlet node list` and `crewlet node drain`: the fleet as the lease
//! table shows it, and asking one node to hand its seats over.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use chrono::Utc;
use crewlet_backends::Backends;
use crewlet_core::EventType;
use crewlet_store::{DUTY_PREFIX, Lease, NODE_PREFIX, SEAT_PREFIX, Stores};
use serde_json::json;

use crate::error::EngineError;

/// The live nodes, each with its seats and duties; JSON with `json`.
pub async fn node_list(stores: &Stores, json: bool) -> Result<String, EngineError> {
    let nodes = stores.leases.list(NODE_PREFIX).await?;
    let seats = stores.leases.list(SEAT_PREFIX).await?;
    let duties = stores.leases.list(DUTY_PREFIX).await?;
    let held = |rows: &[Lease], prefix: &str, node: &str| -> Vec<String> {
        rows.iter()
            .filter(|l| l.live && l.preferred == node)
            .filter_map(|l| l.resource.strip_prefix(prefix).map(str::to_owned))
            .collect()
    };
    let live: Vec<&Lease> = nodes.iter().filter(|n| n.live).collect();
    if json {
        let out: Vec<_> = live
            .iter()
            .map(|n| {
                json!({
                    "id": n.preferred,
                    "incarnation": n.owner,
                    "roles": n.meta["roles"],
                    "labels": n.meta["labels"],
                    "version": n.meta["version"],
                    "draining": n.meta["draining"],
                    "heartbeat_at": n.renewed_at,
                    "seats": held(&seats, SEAT_PREFIX, &n.preferred),
                    "duties": held(&duties, DUTY_PREFIX, &n.preferred),
                })
            })
            .collect();
        return Ok(format!(
            "{}\n",
            serde_json::to_string_pretty(&out).unwrap_or_default()
        ));
    }
    let mut text = String::new();
    if live.is_empty() {
        text.push_str("no live node\n");
    }
    let now = Utc::now();
    for n in live {
        let roles: Vec<&str> = n.meta["roles"]
            .as_array()
            .map(|r| r.iter().filter_map(|x| x.as_str()).collect())
            .unwrap_or_default();
        let mine = held(&seats, SEAT_PREFIX, &n.preferred);
        let _ = writeln!(
            text,
            "{}  roles={}  seats={}  duties={}  heartbeat {:.1} s ago{}",
            n.preferred,
            roles.join(","),
            mine.len(),
            held(&duties, DUTY_PREFIX, &n.preferred).join(","),
            (now - n.renewed_at).num_milliseconds() as f64 / 1000.0,
            if n.meta["draining"] == json!(true) {
                "  (draining)"
            } else {
                ""
            }
        );
    }
    Ok(text)
}

/// Asks node `id` to drain (it stops claiming seats and hands each back
/// after its running turn); with `wait`, returns once it holds none, or
/// fails after `timeout`.
pub async fn node_drain(
    backends: &Backends,
    id: &str,
    wait: Option<Duration>,
) -> Result<String, EngineError> {
    let leases = &backends.stores.leases;
    let presence = format!("{NODE_PREFIX}{id}");
    let rows = leases.list(&presence).await?;
    if !rows.iter().any(|l| l.live && l.resource == presence) {
        return Err(EngineError::NotFound {
            what: "live node",
            key: id.to_owned(),
        });
    }
    let event = crewlet_api::fleet_drain_event(id, &crate::company::local_author());
    backends
        .queue
        .publish(
            &crewlet_queue::topics::events(&EventType::FleetControl),
            &event,
        )
        .await?;
    let Some(timeout) = wait else {
        return Ok(format!("drain of node {id} requested\n"));
    };
    let started = Instant::now();
    loop {
        let held = leases
            .list(SEAT_PREFIX)
            .await?
            .iter()
            .filter(|l| l.live && l.preferred == id)
            .count();
        if held == 0 {
            return Ok(format!(
                "node {id} drained in {:.1} s: it holds no seat\n",
                started.elapsed().as_secs_f64()
            ));
        }
        if started.elapsed() >= timeout {
            return Err(EngineError::Other(format!(
                "node {id} did not drain within {} s ({held} seats still held)",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
