//! Conformance of the fleet's shared state: leases, the completion ledger
//! and the effect journal (one subject, since the journal is fenced by
//! the leases of the same backend).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use uuid::Uuid;

use super::ok;
use crate::{
    Appended, CompletionLedger, EffectJournal, LeaseClaim, LeaseStore, NewJournalEntry,
    TurnCompletion,
};

/// The three stores of one backend.
#[derive(Clone)]
pub struct Fleet {
    pub leases: Arc<dyn LeaseStore>,
    pub completions: Arc<dyn CompletionLedger>,
    pub journal: Arc<dyn EffectJournal>,
}

const LONG: Duration = Duration::from_secs(60);
/// A lease short enough to lapse within a test: the tests wait well past
/// it (a lower bound on elapsed time always holds; no upper bound is ever
/// assumed).
const SHORT: Duration = Duration::from_millis(150);
const PAST_SHORT: Duration = Duration::from_millis(400);

fn claim(resource: &str) -> LeaseClaim {
    LeaseClaim::new(resource, "node-a")
}

pub async fn a_free_resource_is_acquired_once_and_held_against_others(f: Fleet) {
    let won = ok(
        f.leases.acquire(&[claim("seat:ceo")], "a:1", LONG).await,
        "acquire",
    );
    assert_eq!(won.len(), 1);
    assert_eq!(won[0].epoch, 1);
    assert!(won[0].live);
    let other = ok(
        f.leases.acquire(&[claim("seat:ceo")], "b:1", LONG).await,
        "acquire by another",
    );
    assert!(other.is_empty(), "a live lease was taken: {other:?}");
    // Its own holder acquiring again keeps the tenure and the epoch.
    let again = ok(
        f.leases.acquire(&[claim("seat:ceo")], "a:1", LONG).await,
        "re-acquire",
    );
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].epoch, 1);
}

pub async fn a_lapsed_lease_moves_with_a_greater_epoch(f: Fleet) {
    ok(
        f.leases.acquire(&[claim("seat:eng")], "a:1", SHORT).await,
        "acquire",
    );
    tokio::time::sleep(PAST_SHORT).await;
    let listed = ok(f.leases.list("seat:").await, "list");
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].live, "a lapsed lease reads as live");
    // The lapsed holder cannot renew it.
    let renewed = ok(
        f.leases.renew(&["seat:eng".into()], "a:1", LONG).await,
        "renew",
    );
    assert!(renewed.is_empty(), "a lapsed lease was renewed");
    let won = ok(
        f.leases.acquire(&[claim("seat:eng")], "b:1", LONG).await,
        "take over",
    );
    assert_eq!(won.len(), 1);
    assert_eq!(won[0].epoch, 2);
    assert_eq!(won[0].owner, "b:1");
}

pub async fn the_same_owner_after_a_lapse_gets_a_new_epoch(f: Fleet) {
    ok(
        f.leases.acquire(&[claim("seat:ops")], "a:1", SHORT).await,
        "acquire",
    );
    tokio::time::sleep(PAST_SHORT).await;
    let won = ok(
        f.leases.acquire(&[claim("seat:ops")], "a:1", LONG).await,
        "re-acquire after the lapse",
    );
    assert_eq!(won.len(), 1);
    assert_eq!(won[0].epoch, 2, "its own gap must fence its past self");
}

pub async fn renew_extends_only_the_callers_live_leases(f: Fleet) {
    ok(
        f.leases
            .acquire(&[claim("seat:a"), claim("seat:b")], "a:1", LONG)
            .await,
        "acquire",
    );
    ok(
        f.leases.acquire(&[claim("seat:c")], "b:1", LONG).await,
        "acquire",
    );
    let mut renewed = ok(
        f.leases
            .renew(
                &["seat:a".into(), "seat:b".into(), "seat:c".into()],
                "a:1",
                LONG,
            )
            .await,
        "renew",
    );
    renewed.sort();
    assert_eq!(renewed, vec![("seat:a".into(), 1), ("seat:b".into(), 1)]);
}

pub async fn release_frees_at_once_and_keeps_the_epoch_growing(f: Fleet) {
    ok(
        f.leases.acquire(&[claim("seat:x")], "a:1", LONG).await,
        "acquire",
    );
    // Someone else's release does nothing.
    assert_eq!(
        ok(f.leases.release(&["seat:x".into()], "b:1").await, "release"),
        0
    );
    assert_eq!(
        ok(f.leases.release(&["seat:x".into()], "a:1").await, "release"),
        1
    );
    let listed = ok(f.leases.list("seat:x").await, "list");
    assert!(!listed[0].live);
    assert_eq!(listed[0].epoch, 1, "release must not reset the epoch");
    assert_eq!(listed[0].preferred, "node-a", "the hint survives a release");
    let won = ok(
        f.leases.acquire(&[claim("seat:x")], "b:1", LONG).await,
        "acquire after the release",
    );
    assert_eq!(won[0].epoch, 2);
}

pub async fn list_is_by_prefix_and_carries_meta(f: Fleet) {
    ok(
        f.leases
            .acquire(
                &[LeaseClaim::new("node:n1", "n1").with_meta(json!({"roles": ["seats"]}))],
                "n1:1",
                LONG,
            )
            .await,
        "acquire",
    );
    ok(
        f.leases.acquire(&[claim("seat:z")], "n1:1", LONG).await,
        "acquire",
    );
    let nodes = ok(f.leases.list("node:").await, "list");
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].meta["roles"][0], "seats");
    // `_` and `%` in a prefix are literal.
    assert!(ok(f.leases.list("node_").await, "list").is_empty());
}

pub async fn concurrent_acquires_let_exactly_one_owner_win_each_resource(f: Fleet) {
    let resources: Vec<LeaseClaim> = (0..40).map(|i| claim(&format!("seat:s{i:02}"))).collect();
    let mut tasks = Vec::new();
    for n in 0..4 {
        let leases = f.leases.clone();
        let mut claims = resources.clone();
        // Each contender walks the resources in its own order.
        claims.rotate_left(n * 10);
        tasks.push(tokio::spawn(async move {
            leases.acquire(&claims, &format!("n{n}:1"), LONG).await
        }));
    }
    let mut owners = std::collections::HashMap::new();
    for t in tasks {
        let won = ok(ok(t.await, "join"), "acquire");
        for l in won {
            assert!(
                owners.insert(l.resource.clone(), l.owner.clone()).is_none(),
                "{} won twice",
                l.resource
            );
        }
    }
    assert_eq!(owners.len(), 40);
}

pub async fn holds_checks_owner_epoch_and_expiry(f: Fleet) {
    let won = ok(
        f.leases.acquire(&[claim("seat:h")], "a:1", SHORT).await,
        "acquire",
    );
    let fence = won[0].fence();
    assert!(ok(f.leases.holds(&fence).await, "holds"));
    let mut wrong = fence.clone();
    wrong.epoch += 1;
    assert!(!ok(f.leases.holds(&wrong).await, "holds"));
    tokio::time::sleep(PAST_SHORT).await;
    assert!(!ok(f.leases.holds(&fence).await, "holds after the lapse"));
}

fn completion(seat: &str, ids: &[Uuid], task: &str) -> TurnCompletion {
    TurnCompletion {
        seat: seat.into(),
        trigger_ids: ids.to_vec(),
        task_id: task.into(),
        turn_id: Some(Uuid::now_v7()),
        outcome: "completed".into(),
        node: "a:1".into(),
        epoch: 3,
    }
}

pub async fn a_completed_trigger_is_found_and_recorded_once(f: Fleet) {
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    assert!(ok(f.completions.completed("ceo", &[a, b]).await, "completed").is_empty());
    assert_eq!(
        ok(
            f.completions
                .record(&completion("ceo", &[a, b], "t1"))
                .await,
            "record"
        ),
        2
    );
    // A merge that overlaps: only the new trigger is new.
    assert_eq!(
        ok(
            f.completions
                .record(&completion("ceo", &[a, b, c], "t2"))
                .await,
            "record"
        ),
        1
    );
    let done = ok(f.completions.completed("ceo", &[a, c]).await, "completed");
    assert!(done.contains(&a) && done.contains(&c));
    // Per seat.
    assert!(ok(f.completions.completed("eng", &[a]).await, "completed").is_empty());
    let rows = ok(f.completions.for_task("t1").await, "for_task");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].epoch, 3);
    assert_eq!(
        ok(
            f.completions
                .prune(chrono::Utc::now() + chrono::Duration::seconds(1))
                .await,
            "prune"
        ),
        3
    );
}

fn entry(task: &str, step: i32, kind: &str) -> NewJournalEntry {
    NewJournalEntry {
        task_key: task.into(),
        task_id: format!("task-of-{task}"),
        step,
        kind: kind.into(),
        seat: "ceo".into(),
        turn_id: Uuid::nil(),
        node: "a:1".into(),
        payload: json!({"step": step, "kind": kind}),
    }
}

pub async fn the_journal_keeps_entries_in_step_order_once(f: Fleet) {
    for (step, kind) in [(1, "tool_result"), (0, "model"), (1, "tool_started")] {
        assert_eq!(
            ok(
                f.journal.append(&entry("t", step, kind), None).await,
                "append"
            ),
            Appended::Written
        );
    }
    assert_eq!(
        ok(
            f.journal.append(&entry("t", 0, "model"), None).await,
            "append"
        ),
        Appended::Exists
    );
    let got = ok(f.journal.load("t").await, "load");
    let order: Vec<(i32, &str)> = got.iter().map(|e| (e.step, e.kind.as_str())).collect();
    assert_eq!(
        order,
        vec![(0, "model"), (1, "tool_started"), (1, "tool_result")]
    );
    assert_eq!(got[2].payload["kind"], "tool_result");
    assert_eq!(got[2].task_id, "task-of-t");
    assert_eq!(
        ok(f.journal.keys_for_task("task-of-t").await, "keys"),
        vec!["t".to_owned()]
    );
    assert!(ok(f.journal.load("other").await, "load").is_empty());
}

pub async fn a_stale_holder_cannot_write_the_journal(f: Fleet) {
    let won = ok(
        f.leases.acquire(&[claim("seat:ceo")], "a:1", SHORT).await,
        "acquire",
    );
    let old = won[0].fence();
    assert_eq!(
        ok(
            f.journal.append(&entry("t", 0, "model"), Some(&old)).await,
            "append"
        ),
        Appended::Written
    );
    tokio::time::sleep(PAST_SHORT).await;
    let new = ok(
        f.leases.acquire(&[claim("seat:ceo")], "b:1", LONG).await,
        "take over",
    )[0]
    .fence();
    assert_eq!(
        ok(
            f.journal
                .append(&entry("t", 1, "tool_started"), Some(&old))
                .await,
            "append"
        ),
        Appended::Fenced
    );
    assert_eq!(
        ok(f.journal.truncate("t", 0, Some(&old)).await, "truncate"),
        None
    );
    assert_eq!(
        ok(
            f.journal
                .append(&entry("t", 1, "tool_started"), Some(&new))
                .await,
            "append"
        ),
        Appended::Written
    );
    let got = ok(f.journal.load("t").await, "load");
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].epoch, new.epoch);
    // The new holder may cut the tail where its turn took another path.
    assert_eq!(
        ok(f.journal.truncate("t", 1, Some(&new)).await, "truncate"),
        Some(1)
    );
    assert_eq!(ok(f.journal.load("t").await, "load").len(), 1);
    assert_eq!(
        ok(
            f.journal
                .prune(chrono::Utc::now() + chrono::Duration::seconds(1))
                .await,
            "prune"
        ),
        1
    );
}

pub async fn a_dead_incarnations_leases_are_taken_over_with_new_epochs(f: Fleet) {
    ok(
        f.leases
            .acquire(
                &[claim("node:a"), claim("seat:p"), claim("seat:q")],
                "a:old",
                LONG,
            )
            .await,
        "acquire",
    );
    ok(
        f.leases.acquire(&[claim("seat:r")], "b:1", LONG).await,
        "acquire",
    );
    let mut taken = ok(
        f.leases.take_over("a:old", "a:new", LONG).await,
        "take over",
    );
    taken.sort_by(|x, y| x.resource.cmp(&y.resource));
    let got: Vec<(&str, &str, i64)> = taken
        .iter()
        .map(|l| (l.resource.as_str(), l.owner.as_str(), l.epoch))
        .collect();
    assert_eq!(
        got,
        vec![
            ("node:a", "a:new", 2),
            ("seat:p", "a:new", 2),
            ("seat:q", "a:new", 2)
        ]
    );
    // Another owner's lease is untouched.
    let r = ok(f.leases.list("seat:r").await, "list");
    assert_eq!(r[0].owner, "b:1");
    assert!(ok(f.leases.take_over("a:new", "a:new", LONG).await, "noop").is_empty());
}
