//! Group commit for webhook delivery claims: concurrent
//! [`claim_at`](super::webhooks::WebhookDeliveries::claim_at) calls on the
//! PostgreSQL store share one `INSERT ... SELECT unnest(...)` statement.
//!
//! No fixed linger: a claim that arrives while every batch slot is busy
//! waits for a slot and goes out with everything else that arrived
//! meanwhile, so under load batches grow and at rest a claim is sent at
//! once. A claim waits at most for one batch in flight before its own.
//! Each caller still gets its own answer, and nothing is answered before
//! its statement has committed.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use chrono::{DateTime, Utc};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::webhooks::DUPLICATE_WINDOW;
use crate::db::Database;
use crate::error::{StoreError, query_err};

/// Inserted, or re-claimed because the last claim left the window: either
/// way the row comes back; a duplicate returns none.
const CLAIM_SQL: &str = "INSERT INTO webhook_deliveries (source, delivery_key, seen_at)
     SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[])
     ON CONFLICT (source, delivery_key) DO UPDATE SET seen_at = EXCLUDED.seen_at
     WHERE webhook_deliveries.seen_at <= EXCLUDED.seen_at - make_interval(secs => $4)
     RETURNING source, delivery_key";

/// Most claims in one statement.
const MAX_BATCH: usize = 512;
/// Batches in flight at once (each holds one pooled connection).
const IN_FLIGHT: usize = 4;

struct Pending {
    source: String,
    key: String,
    at: DateTime<Utc>,
    reply: oneshot::Sender<Result<bool, StoreError>>,
}

/// The batcher: a queue of pending claims and the task that drains it,
/// started on first use in the caller's runtime.
#[derive(Debug)]
pub(crate) struct ClaimBatcher {
    db: Database,
    tx: OnceLock<mpsc::UnboundedSender<Pending>>,
}

impl ClaimBatcher {
    pub(crate) fn new(db: Database) -> Self {
        Self {
            db,
            tx: OnceLock::new(),
        }
    }

    /// Claims `(source, key)` at `at` in the next batch: `true` when nobody
    /// held it within [`DUPLICATE_WINDOW`].
    pub(crate) async fn claim(
        &self,
        source: &str,
        key: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            source: source.to_owned(),
            key: key.to_owned(),
            at,
            reply,
        };
        let tx = self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(drain(self.db.clone(), rx));
            tx
        });
        if let Err(unsent) = tx.send(pending) {
            // The draining task is gone (its runtime shut down): claim alone.
            let p = unsent.0;
            return run(&self.db, &[(p.source, p.key, p.at)])
                .await
                .map(|claimed| claimed.first().copied().unwrap_or(false));
        }
        match answer.await {
            Ok(result) => result,
            // The batch was dropped with its runtime: the claim may or may
            // not have committed, so the caller must treat it as unknown.
            Err(_) => Err(StoreError::Unavailable {
                what: format!("claiming webhook delivery `{source}`/`{key}`"),
                reason: "the claim batch was cancelled".into(),
            }),
        }
    }
}

async fn drain(db: Database, mut rx: mpsc::UnboundedReceiver<Pending>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        // Waiting for a slot first lets the batch grow while all are busy.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let db = db.clone();
        tokio::spawn(async move {
            answer(&db, batch).await;
            drop(slot);
        });
    }
}

/// Runs one batch and answers each caller. The same key twice in a batch:
/// the first occurrence decides, the later ones are repeats (`false`).
async fn answer(db: &Database, batch: Vec<Pending>) {
    let mut rows = Vec::with_capacity(batch.len());
    let row_of: Vec<usize> = {
        let mut first_of: HashMap<(&str, &str), usize> = HashMap::with_capacity(batch.len());
        batch
            .iter()
            .map(|p| {
                *first_of
                    .entry((p.source.as_str(), p.key.as_str()))
                    .or_insert_with(|| {
                        rows.push((p.source.clone(), p.key.clone(), p.at));
                        rows.len() - 1
                    })
            })
            .collect()
    };
    let result = run(db, &rows).await;
    let mut answered = vec![false; rows.len()];
    for (p, row) in batch.into_iter().zip(row_of) {
        let reply = match &result {
            Ok(claimed) if !answered[row] => {
                answered[row] = true;
                Ok(claimed.get(row).copied().unwrap_or(false))
            }
            Ok(_) => Ok(false),
            Err(e) => Err(replicate(e)),
        };
        // A caller that went away (its request was cancelled) needs no answer.
        let _ = p.reply.send(reply);
    }
}

/// One statement for `rows` (distinct keys): which of them were claimed.
/// Rows are sent in key order so two batches holding the same keys take
/// their row locks in the same order and cannot deadlock.
async fn run(
    db: &Database,
    rows: &[(String, String, DateTime<Utc>)],
) -> Result<Vec<bool>, StoreError> {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| (&rows[a].0, &rows[a].1).cmp(&(&rows[b].0, &rows[b].1)));
    let sources: Vec<&str> = order.iter().map(|&i| rows[i].0.as_str()).collect();
    let keys: Vec<&str> = order.iter().map(|&i| rows[i].1.as_str()).collect();
    let ats: Vec<DateTime<Utc>> = order.iter().map(|&i| rows[i].2).collect();
    let window = DUPLICATE_WINDOW.num_milliseconds() as f64 / 1000.0;
    let client = db.client().await?;
    let what = || format!("claiming {} webhook deliveries", rows.len());
    let statement = client
        .prepare_cached(CLAIM_SQL)
        .await
        .map_err(query_err(what()))?;
    let returned = client
        .query(&statement, &[&sources, &keys, &ats, &window])
        .await
        .map_err(query_err(what()))?;
    let index: HashMap<(&str, &str), usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| ((r.0.as_str(), r.1.as_str()), i))
        .collect();
    let mut claimed = vec![false; rows.len()];
    for row in &returned {
        let (source, key): (&str, &str) = (row.get(0), row.get(1));
        if let Some(&i) = index.get(&(source, key)) {
            claimed[i] = true;
        }
    }
    Ok(claimed)
}

/// The batch's error for each of its callers (errors are not `Clone`);
/// an unavailable database stays unavailable, so callers' patience applies.
fn replicate(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable { what, reason } => StoreError::Unavailable {
            what: what.clone(),
            reason: reason.clone(),
        },
        StoreError::Unreachable { target, reason } => StoreError::Unreachable {
            target: target.clone(),
            reason: reason.clone(),
        },
        StoreError::Query { what, reason } => StoreError::Query {
            what: what.clone(),
            reason: reason.clone(),
        },
        other => StoreError::Query {
            what: "claiming webhook deliveries".into(),
            reason: other.to_string(),
        },
    }
}
