//! Conformance of [`SandboxRuns`]: runs are stored once per call, moved by
//! compare-and-set, listed oldest first and pruned only once closed.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use uuid::Uuid;

use super::ok;
use crate::{SandboxRun, SandboxRunPatch, SandboxRunStatus, SandboxRuns};

/// A day ago, cut to the microsecond as PostgreSQL keeps it: old enough
/// that any write of the store's own clock is later, and a value every
/// backend gives back unchanged.
fn a_day_ago() -> DateTime<Utc> {
    let t = Utc::now() - Duration::days(1);
    match DateTime::from_timestamp_micros(t.timestamp_micros()) {
        Some(t) => t,
        None => panic!("{t} has no microsecond timestamp"),
    }
}

/// A running run of `seat` for `call`, created `age` seconds after a day ago.
fn run(seat: &str, turn_id: Uuid, call: &str, age: i64) -> SandboxRun {
    let at = a_day_ago() + Duration::seconds(age);
    SandboxRun {
        id: Uuid::now_v7(),
        seat: seat.into(),
        task_id: format!("task-{seat}"),
        turn_id,
        call_id: call.into(),
        trigger_event: json!({"id": call, "payload": {"text": "fix the build"}}),
        conversation: Some("slack|C1|1700000000.000100".into()),
        backend: "local".into(),
        box_id: format!("box-{call}"),
        run_id: format!("run-{call}"),
        coding_agent: "claude".into(),
        status: SandboxRunStatus::Running,
        question: None,
        answer: None,
        result: None,
        paused_at: None,
        created_at: at,
        updated_at: at,
    }
}

fn with(mut r: SandboxRun, status: SandboxRunStatus, conversation: Option<&str>) -> SandboxRun {
    r.status = status;
    r.conversation = conversation.map(Into::into);
    r
}

fn ids(runs: &[SandboxRun]) -> Vec<Uuid> {
    runs.iter().map(|r| r.id).collect()
}

async fn put(s: &Arc<dyn SandboxRuns>, r: &SandboxRun) -> SandboxRun {
    ok(s.insert(r).await, "insert")
}

pub async fn insert_is_idempotent_per_call(s: Arc<dyn SandboxRuns>) {
    let turn = Uuid::now_v7();
    let first = run("eng", turn, "call-1", 0);
    assert_eq!(put(&s, &first).await, first);
    // The call ran again after a restart: the stored run comes back.
    let mut again = run("eng", turn, "call-1", 5);
    again.box_id = "box-other".into();
    assert_eq!(put(&s, &again).await, first);
    assert_eq!(ok(s.get(again.id).await, "get"), None);
    assert_eq!(ok(s.get(first.id).await, "get"), Some(first.clone()));
    // Another call, another turn or another seat is another run.
    for other in [
        run("eng", turn, "call-2", 1),
        run("eng", Uuid::now_v7(), "call-1", 2),
        run("ops", turn, "call-1", 3),
    ] {
        assert_eq!(put(&s, &other).await, other);
    }
    let all = ok(
        s.with_status(None, &[SandboxRunStatus::Running]).await,
        "with_status",
    );
    assert_eq!(all.len(), 4, "{all:?}");
}

pub async fn by_call_finds_the_run_of_a_call(s: Arc<dyn SandboxRuns>) {
    let turn = Uuid::now_v7();
    let mine = put(&s, &run("eng", turn, "call-1", 0)).await;
    put(&s, &run("eng", turn, "call-2", 1)).await;
    assert_eq!(
        ok(s.by_call("eng", turn, "call-1").await, "by_call"),
        Some(mine)
    );
    assert_eq!(ok(s.by_call("eng", turn, "call-3").await, "by_call"), None);
    assert_eq!(ok(s.by_call("ops", turn, "call-1").await, "by_call"), None);
    assert_eq!(
        ok(s.by_call("eng", Uuid::now_v7(), "call-1").await, "by_call"),
        None
    );
}

pub async fn transition_is_compare_and_set(s: Arc<dyn SandboxRuns>) {
    let r = put(&s, &run("eng", Uuid::now_v7(), "call-1", 0)).await;
    let none = SandboxRunPatch::default();
    // Not in `from`: nothing moves.
    assert_eq!(
        ok(
            s.transition(
                r.id,
                &[SandboxRunStatus::AwaitingAnswer, SandboxRunStatus::Answered],
                SandboxRunStatus::Completed,
                &none,
            )
            .await,
            "transition"
        ),
        None
    );
    assert_eq!(ok(s.get(r.id).await, "get"), Some(r.clone()));
    // An unknown run is not there to move.
    assert_eq!(
        ok(
            s.transition(
                Uuid::now_v7(),
                &[SandboxRunStatus::Running],
                SandboxRunStatus::Failed,
                &none,
            )
            .await,
            "transition"
        ),
        None
    );
    let moved = ok(
        s.transition(
            r.id,
            &[SandboxRunStatus::Running, SandboxRunStatus::Answered],
            SandboxRunStatus::Failed,
            &none,
        )
        .await,
        "transition",
    );
    let Some(moved) = moved else {
        panic!("a running run did not move from running");
    };
    assert_eq!(moved.status, SandboxRunStatus::Failed);
    assert!(moved.updated_at > r.updated_at, "updated_at did not move");
    assert_eq!(moved.created_at, r.created_at);
    assert_eq!(ok(s.get(r.id).await, "get"), Some(moved));
    // Once moved, the same claim finds nothing.
    assert_eq!(
        ok(
            s.transition(
                r.id,
                &[SandboxRunStatus::Running],
                SandboxRunStatus::Completed,
                &none,
            )
            .await,
            "transition"
        ),
        None
    );
}

pub async fn concurrent_claims_let_exactly_one_win(s: Arc<dyn SandboxRuns>) {
    let turn = Uuid::now_v7();
    for i in 0..10 {
        let id = put(&s, &run("eng", turn, &format!("call-{i}"), i)).await.id;
        let claims: Vec<_> = (0..2)
            .map(|engine| {
                let s = s.clone();
                let patch = SandboxRunPatch {
                    result: Some(Some(json!({"claimed_by": engine}))),
                    ..SandboxRunPatch::default()
                };
                tokio::spawn(async move {
                    s.transition(
                        id,
                        &[SandboxRunStatus::Running],
                        SandboxRunStatus::Completed,
                        &patch,
                    )
                    .await
                })
            })
            .collect();
        let mut winners = Vec::new();
        for claim in claims {
            if let Some(won) = ok(ok(claim.await, "join"), "transition") {
                winners.push(won);
            }
        }
        assert_eq!(winners.len(), 1, "run {i}: {winners:?}");
        let stored = ok(s.get(id).await, "get");
        assert_eq!(stored.as_ref(), winners.first(), "run {i}");
        assert_eq!(winners[0].status, SandboxRunStatus::Completed);
    }
}

pub async fn a_patch_sets_only_what_it_says(s: Arc<dyn SandboxRuns>) {
    let r = put(&s, &run("eng", Uuid::now_v7(), "call-1", 0)).await;
    let paused = a_day_ago() + Duration::hours(2);
    let question = json!({"text": "which branch?", "audience": "requester"});
    let asked = ok(
        s.transition(
            r.id,
            &[SandboxRunStatus::Running],
            SandboxRunStatus::AwaitingAnswer,
            &SandboxRunPatch {
                question: Some(Some(question.clone())),
                paused_at: Some(Some(paused)),
                ..SandboxRunPatch::default()
            },
        )
        .await,
        "transition",
    );
    let Some(asked) = asked else {
        panic!("a running run did not move to awaiting_answer");
    };
    assert_eq!(asked.question, Some(question.clone()));
    assert_eq!(asked.paused_at, Some(paused));
    // Untouched by the patch.
    assert_eq!(asked.box_id, r.box_id);
    assert_eq!(asked.run_id, r.run_id);
    assert_eq!(asked.answer, None);
    assert_eq!(asked.result, None);
    assert_eq!(asked.trigger_event, r.trigger_event);
    assert_eq!(asked.conversation, r.conversation);

    // `Some(None)` clears; `Some(value)` replaces; `None` keeps.
    let answered = ok(
        s.transition(
            r.id,
            &[SandboxRunStatus::AwaitingAnswer],
            SandboxRunStatus::Answered,
            &SandboxRunPatch {
                box_id: Some(String::new()),
                answer: Some(Some("main".into())),
                paused_at: Some(None),
                ..SandboxRunPatch::default()
            },
        )
        .await,
        "transition",
    );
    let Some(answered) = answered else {
        panic!("an awaiting run did not move to answered");
    };
    assert_eq!(answered.status, SandboxRunStatus::Answered);
    assert_eq!(answered.box_id, "");
    assert_eq!(answered.run_id, r.run_id);
    assert_eq!(answered.question, Some(question));
    assert_eq!(answered.answer.as_deref(), Some("main"));
    assert_eq!(answered.paused_at, None);
    assert_eq!(answered.result, None);

    let done = ok(
        s.transition(
            r.id,
            &[SandboxRunStatus::Answered],
            SandboxRunStatus::Completed,
            &SandboxRunPatch {
                run_id: Some("run-2".into()),
                question: Some(None),
                answer: Some(None),
                result: Some(Some(json!({"exit_code": 0, "findings": ["green"]}))),
                ..SandboxRunPatch::default()
            },
        )
        .await,
        "transition",
    );
    let Some(done) = done else {
        panic!("an answered run did not move to completed");
    };
    assert_eq!(done.run_id, "run-2");
    assert_eq!(done.box_id, "");
    assert_eq!(done.question, None);
    assert_eq!(done.answer, None);
    assert_eq!(
        done.result,
        Some(json!({"exit_code": 0, "findings": ["green"]}))
    );
    assert_eq!(ok(s.get(r.id).await, "get"), Some(done));
}

pub async fn with_status_filters_by_status_and_seat_oldest_first(s: Arc<dyn SandboxRuns>) {
    use SandboxRunStatus::*;
    let turn = Uuid::now_v7();
    let conv = Some("slack|C1|1");
    // Inserted out of creation order.
    let a_run_late = put(&s, &run("a", turn, "1", 20)).await;
    let a_wait = put(&s, &with(run("a", turn, "2", 10), AwaitingAnswer, conv)).await;
    let b_run = put(&s, &run("b", turn, "3", 0)).await;
    let a_done = put(&s, &with(run("a", turn, "4", 5), Completed, conv)).await;
    let a_run_early = put(&s, &run("a", turn, "5", 1)).await;

    let running = ok(s.with_status(None, &[Running]).await, "with_status");
    assert_eq!(ids(&running), vec![b_run.id, a_run_early.id, a_run_late.id]);
    let a_open = ok(
        s.with_status(Some("a"), &[Running, AwaitingAnswer, Answered])
            .await,
        "with_status",
    );
    assert_eq!(ids(&a_open), vec![a_run_early.id, a_wait.id, a_run_late.id]);
    assert_eq!(a_open[1], a_wait);
    let closed = ok(
        s.with_status(Some("a"), &[Completed, Failed]).await,
        "with_status",
    );
    assert_eq!(closed, vec![a_done]);
    assert!(ok(s.with_status(Some("b"), &[Failed]).await, "with_status").is_empty());
    assert!(ok(s.with_status(Some("c"), &[Running]).await, "with_status").is_empty());
    assert!(ok(s.with_status(None, &[]).await, "with_status").is_empty());
}

pub async fn for_turn_lists_one_turns_runs_oldest_first(s: Arc<dyn SandboxRuns>) {
    use SandboxRunStatus::*;
    let (turn, other) = (Uuid::now_v7(), Uuid::now_v7());
    let late = put(&s, &with(run("a", turn, "1", 9), Completed, None)).await;
    let early = put(&s, &run("a", turn, "2", 3)).await;
    put(&s, &run("a", other, "3", 5)).await;
    put(&s, &run("b", turn, "4", 4)).await;
    let runs = ok(s.for_turn("a", turn).await, "for_turn");
    assert_eq!(ids(&runs), vec![early.id, late.id]);
    assert_eq!(runs[1], late);
    assert!(ok(s.for_turn("c", turn).await, "for_turn").is_empty());
}

pub async fn awaiting_answer_matches_seat_conversation_and_status(s: Arc<dyn SandboxRuns>) {
    use SandboxRunStatus::*;
    let turn = Uuid::now_v7();
    let (here, there) = ("slack|C1|1", "slack|C1|2");
    put(&s, &with(run("a", turn, "running", 0), Running, Some(here))).await;
    put(
        &s,
        &with(run("a", turn, "answered", 1), Answered, Some(here)),
    )
    .await;
    put(
        &s,
        &with(run("b", turn, "other-seat", 2), AwaitingAnswer, Some(here)),
    )
    .await;
    put(
        &s,
        &with(run("a", turn, "other-conv", 3), AwaitingAnswer, Some(there)),
    )
    .await;
    put(
        &s,
        &with(run("a", turn, "no-conv", 4), AwaitingAnswer, None),
    )
    .await;
    let newer = put(
        &s,
        &with(run("a", turn, "newer", 20), AwaitingAnswer, Some(here)),
    )
    .await;
    let older = put(
        &s,
        &with(run("a", turn, "older", 10), AwaitingAnswer, Some(here)),
    )
    .await;

    assert_eq!(
        ok(s.awaiting_answer("a", here).await, "awaiting_answer"),
        Some(older.clone())
    );
    // Once the older one is answered, the next one waits.
    ok(
        s.transition(
            older.id,
            &[AwaitingAnswer],
            Answered,
            &SandboxRunPatch::default(),
        )
        .await,
        "transition",
    );
    assert_eq!(
        ok(s.awaiting_answer("a", here).await, "awaiting_answer"),
        Some(newer)
    );
    assert_eq!(
        ok(
            s.awaiting_answer("a", "slack|C9|9").await,
            "awaiting_answer"
        ),
        None
    );
    assert_eq!(
        ok(s.awaiting_answer("c", here).await, "awaiting_answer").map(|r| r.call_id),
        None
    );
    assert_eq!(
        ok(s.awaiting_answer("b", here).await, "awaiting_answer").map(|r| r.call_id),
        Some("other-seat".to_owned())
    );
}

pub async fn prune_removes_only_closed_old_runs(s: Arc<dyn SandboxRuns>) {
    use SandboxRunStatus::*;
    let turn = Uuid::now_v7();
    // All last updated a day ago.
    let old_done = put(&s, &with(run("a", turn, "1", 0), Completed, None)).await;
    let old_failed = put(&s, &with(run("a", turn, "2", 1), Failed, None)).await;
    let old_open: Vec<SandboxRun> = [Running, AwaitingAnswer, Answered]
        .into_iter()
        .enumerate()
        .map(|(i, status)| with(run("b", turn, &format!("open-{i}"), 2), status, None))
        .collect();
    for r in &old_open {
        put(&s, r).await;
    }
    // Closed just now.
    let fresh = put(&s, &run("a", turn, "3", 3)).await;
    let fresh = ok(
        s.transition(fresh.id, &[Running], Completed, &SandboxRunPatch::default())
            .await,
        "transition",
    );
    let Some(fresh) = fresh else {
        panic!("a running run did not complete");
    };

    let before = Utc::now() - Duration::hours(1);
    assert_eq!(ok(s.prune(before).await, "prune"), 2);
    assert_eq!(ok(s.get(old_done.id).await, "get"), None);
    assert_eq!(ok(s.get(old_failed.id).await, "get"), None);
    for r in &old_open {
        assert_eq!(
            ok(s.get(r.id).await, "get").as_ref(),
            Some(r),
            "an open run was pruned"
        );
    }
    assert_eq!(ok(s.get(fresh.id).await, "get"), Some(fresh));
    assert_eq!(ok(s.prune(before).await, "prune"), 0);
}
