//! Conformance of [`Diary`].

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use crewlet_core::AgentId;

use super::{base_time, close, err, ok, too_wide};
use crate::error::MemoryError;
use crate::repos::Diary;
use crate::types::{DiaryKind, DiaryWrite, NewDiaryEntry, Page};

fn agent(handle: &str) -> AgentId {
    AgentId::for_seat("Conformance", handle)
}

fn long(a: AgentId, content: &str, embedding: Option<Vec<f32>>) -> NewDiaryEntry {
    NewDiaryEntry {
        agent_id: a,
        kind: DiaryKind::Long,
        content: content.to_owned(),
        ttl_until: None,
        embedding,
    }
}

fn short(a: AgentId, content: &str, ttl_until: DateTime<Utc>) -> NewDiaryEntry {
    NewDiaryEntry {
        agent_id: a,
        kind: DiaryKind::Short,
        content: content.to_owned(),
        ttl_until: Some(ttl_until),
        embedding: Some(vec![0.0, 1.0]),
    }
}

async fn write(repo: &Arc<dyn Diary>, e: NewDiaryEntry, now: DateTime<Utc>) -> DiaryWrite {
    ok(repo.write(e, now).await, "diary write")
}

fn contents(rows: &[crate::types::DiaryEntry]) -> Vec<&str> {
    rows.iter().map(|r| r.content.as_str()).collect()
}

pub async fn writes_are_verbatim_and_recent_is_newest_first(repo: Arc<dyn Diary>) {
    let (a, t) = (agent("eng"), base_time());
    let big = format!("  leading space kept; {}\nend", "x".repeat(10_000));
    let w = write(&repo, long(a, "first", None), t).await;
    assert!(w.is_new());
    assert_eq!(w.entry().created_at, t);
    assert_eq!(w.entry().kind, DiaryKind::Long);
    write(&repo, long(a, &big, None), t + Duration::seconds(1)).await;
    let exp = t + Duration::hours(1);
    let third = write(&repo, short(a, "third", exp), t + Duration::seconds(2)).await;
    assert_eq!(third.entry().ttl_until, Some(exp));
    let rows = ok(
        repo.recent(&a, Page::first(10), t + Duration::seconds(3))
            .await,
        "recent",
    );
    assert_eq!(contents(&rows), vec!["third", big.as_str(), "first"]);
    assert_eq!(rows[0], third.entry().clone());
    assert_eq!(rows[2], w.entry().clone());
}

pub async fn an_exact_duplicate_of_a_live_row_is_not_written(repo: Arc<dyn Diary>) {
    let (a, t) = (agent("eng"), base_time());
    let first = write(&repo, long(a, "prefers terse replies", None), t).await;
    let again = write(
        &repo,
        long(a, "prefers terse replies", Some(vec![1.0])),
        t + Duration::minutes(1),
    )
    .await;
    match &again {
        DiaryWrite::Duplicate(e) => assert_eq!(e, first.entry()),
        DiaryWrite::Written(e) => panic!("duplicate written: {e:?}"),
    }
    // Only exactly the same content, and only within the agent.
    assert!(
        write(&repo, long(a, "prefers terse replies.", None), t)
            .await
            .is_new()
    );
    assert!(
        write(&repo, long(a, "Prefers terse replies", None), t)
            .await
            .is_new()
    );
    assert!(
        write(&repo, long(agent("pm"), "prefers terse replies", None), t)
            .await
            .is_new()
    );
    // A short row duplicates a long one too: the guard is on content.
    let dup = write(
        &repo,
        short(a, "prefers terse replies", t + Duration::hours(1)),
        t,
    )
    .await;
    assert!(!dup.is_new());
    assert_eq!(ok(repo.count(&a, t).await, "count"), 3);
}

pub async fn an_expired_row_does_not_block_the_same_content(repo: Arc<dyn Diary>) {
    let (a, t) = (agent("eng"), base_time());
    let first = write(
        &repo,
        short(a, "deploy freeze", t + Duration::minutes(10)),
        t,
    )
    .await;
    let live = write(
        &repo,
        short(a, "deploy freeze", t + Duration::hours(1)),
        t + Duration::minutes(5),
    )
    .await;
    assert!(!live.is_new());
    let later = t + Duration::minutes(10);
    let second = write(
        &repo,
        short(a, "deploy freeze", t + Duration::hours(1)),
        later,
    )
    .await;
    assert!(second.is_new(), "the first row expired at {later}");
    assert_ne!(second.entry().id, first.entry().id);
    assert_eq!(ok(repo.count(&a, later).await, "count"), 1);
}

pub async fn concurrent_writes_of_one_content_write_once(repo: Arc<dyn Diary>) {
    let (a, t) = (agent("eng"), base_time());
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let repo = Arc::clone(&repo);
        tasks.push(tokio::spawn(async move {
            repo.write(long(a, "the same fact", None), t).await
        }));
    }
    let mut new = 0;
    for task in tasks {
        if ok(ok(task.await, "write task"), "write").is_new() {
            new += 1;
        }
    }
    assert_eq!(new, 1);
    assert_eq!(ok(repo.count(&a, t).await, "count"), 1);
}

pub async fn ttl_hides_rows_from_every_read(repo: Arc<dyn Diary>) {
    let (a, t) = (agent("eng"), base_time());
    let exp = t + Duration::minutes(10);
    write(&repo, short(a, "on call this week", exp), t).await;
    write(&repo, long(a, "owns billing", Some(vec![0.0, 1.0])), t).await;
    let before = exp - Duration::seconds(1);
    assert_eq!(ok(repo.count(&a, before).await, "count"), 2);
    assert_eq!(
        ok(repo.recent(&a, Page::first(10), before).await, "recent").len(),
        2
    );
    assert_eq!(
        ok(repo.similar(&a, &[0.0, 1.0], 10, before).await, "similar").len(),
        2
    );
    // At the TTL the row is gone from every read (live means ttl > now).
    assert_eq!(ok(repo.count(&a, exp).await, "count"), 1);
    let rows = ok(repo.recent(&a, Page::first(10), exp).await, "recent");
    assert_eq!(contents(&rows), vec!["owns billing"]);
    let found = ok(repo.similar(&a, &[0.0, 1.0], 10, exp).await, "similar");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].item.content, "owns billing");
    // Expired rows are hidden, not deleted: an earlier `now` still sees them.
    assert_eq!(ok(repo.count(&a, t).await, "count"), 2);
}

pub async fn delete_expired_removes_rows_due_at_or_before_now(repo: Arc<dyn Diary>) {
    let (a, b, t) = (agent("eng"), agent("pm"), base_time());
    write(&repo, short(a, "a1", t + Duration::minutes(1)), t).await;
    write(&repo, short(a, "a5", t + Duration::minutes(5)), t).await;
    write(&repo, long(a, "forever", None), t).await;
    write(&repo, short(b, "b1", t + Duration::minutes(1)), t).await;
    assert_eq!(ok(repo.delete_expired(t).await, "delete_expired"), 0);
    assert_eq!(
        ok(
            repo.delete_expired(t + Duration::minutes(1)).await,
            "delete_expired"
        ),
        2
    );
    assert_eq!(
        ok(
            repo.delete_expired(t + Duration::minutes(1)).await,
            "delete_expired"
        ),
        0
    );
    // Deleted for good: an earlier `now` no longer sees them.
    assert_eq!(ok(repo.count(&a, t).await, "count"), 2);
    assert_eq!(ok(repo.count(&b, t).await, "count"), 0);
    assert_eq!(
        ok(
            repo.delete_expired(t + Duration::days(365)).await,
            "delete_expired"
        ),
        1
    );
    let rows = ok(repo.recent(&a, Page::first(10), t).await, "recent");
    assert_eq!(contents(&rows), vec!["forever"]);
}

pub async fn similar_orders_by_cosine_and_scores_it(repo: Arc<dyn Diary>) {
    let (a, t) = (agent("eng"), base_time());
    let rows = [
        ("opposite", Some(vec![-1.0, 0.0, 0.0])),
        ("same", Some(vec![2.0, 0.0, 0.0])),
        ("orthogonal", Some(vec![0.0, 3.0, 0.0])),
        ("close", Some(vec![0.8, 0.6, 0.0])),
        ("no vector", None),
    ];
    for (i, (content, v)) in rows.into_iter().enumerate() {
        write(&repo, long(a, content, v), t + Duration::seconds(i as i64)).await;
    }
    let now = t + Duration::minutes(1);
    let found = ok(repo.similar(&a, &[1.0, 0.0, 0.0], 10, now).await, "similar");
    let got: Vec<(&str, f32)> = found
        .iter()
        .map(|s| (s.item.content.as_str(), s.score))
        .collect();
    let want = [
        ("same", 1.0),
        ("close", 0.8),
        ("orthogonal", 0.0),
        ("opposite", -1.0),
    ];
    assert_eq!(got.len(), want.len(), "{got:?}");
    for ((content, score), (w_content, w_score)) in got.iter().zip(want) {
        assert_eq!(*content, w_content, "{got:?}");
        assert!(close(*score, w_score), "{content}: {score} != {w_score}");
    }
    let top = ok(repo.similar(&a, &[1.0, 0.0, 0.0], 2, now).await, "similar");
    assert_eq!(
        top.iter()
            .map(|s| s.item.content.as_str())
            .collect::<Vec<_>>(),
        vec!["same", "close"]
    );
    assert!(ok(repo.similar(&a, &[1.0, 0.0, 0.0], 0, now).await, "similar").is_empty());
}

pub async fn narrower_vectors_are_zero_padded(repo: Arc<dyn Diary>) {
    let (a, t) = (agent("eng"), base_time());
    write(&repo, long(a, "two", Some(vec![1.0, 1.0])), t).await;
    write(&repo, long(a, "four", Some(vec![0.0, 0.0, 0.0, 2.0])), t).await;
    // A one-dimensional query against rows of two and four dimensions.
    let found = ok(repo.similar(&a, &[3.0], 10, t).await, "similar");
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].item.content, "two");
    assert!(
        close(found[0].score, std::f32::consts::FRAC_1_SQRT_2),
        "{}",
        found[0].score
    );
    assert!(close(found[1].score, 0.0), "{}", found[1].score);
    let found = ok(
        repo.similar(&a, &[0.0, 0.0, 0.0, 1.0, 0.0, 0.0], 1, t)
            .await,
        "similar",
    );
    assert_eq!(found[0].item.content, "four");
    assert!(close(found[0].score, 1.0));
}

pub async fn unusable_input_is_invalid_and_writes_nothing(repo: Arc<dyn Diary>) {
    let (a, t) = (agent("eng"), base_time());
    for (what, entry) in [
        ("empty content", long(a, "", None)),
        ("blank content", long(a, " \n\t", None)),
        ("a too wide vector", long(a, "wide", Some(too_wide()))),
        ("an all-zero vector", long(a, "zero", Some(vec![0.0, 0.0]))),
        ("an empty vector", long(a, "empty", Some(Vec::new()))),
    ] {
        let e = err(repo.write(entry, t).await, what);
        assert!(matches!(e, MemoryError::Invalid(_)), "{what}: {e}");
    }
    assert_eq!(ok(repo.count(&a, t).await, "count"), 0);
    let e = err(repo.similar(&a, &too_wide(), 5, t).await, "too wide query");
    assert!(matches!(e, MemoryError::Invalid(_)), "{e}");
    let e = err(repo.similar(&a, &[0.0], 5, t).await, "zero query");
    assert!(matches!(e, MemoryError::Invalid(_)), "{e}");
}

pub async fn rows_are_private_to_their_agent(repo: Arc<dyn Diary>) {
    let (a, b, t) = (agent("eng"), agent("pm"), base_time());
    let mine = write(&repo, long(a, "mine", Some(vec![1.0, 0.0])), t).await;
    write(&repo, long(b, "theirs", Some(vec![1.0, 0.0])), t).await;
    let rows = ok(repo.recent(&a, Page::first(10), t).await, "recent");
    assert_eq!(contents(&rows), vec!["mine"]);
    let found = ok(repo.similar(&b, &[1.0, 0.0], 10, t).await, "similar");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].item.content, "theirs");
    let id = mine.entry().id;
    assert!(!ok(repo.delete(&b, id).await, "delete as another agent"));
    assert_eq!(ok(repo.count(&a, t).await, "count"), 1);
    assert!(ok(repo.delete(&a, id).await, "delete"));
    assert!(!ok(repo.delete(&a, id).await, "delete again"));
    assert_eq!(ok(repo.count(&a, t).await, "count"), 0);
    assert_eq!(ok(repo.count(&b, t).await, "count"), 1);
    assert_eq!(ok(repo.count(&agent("nobody"), t).await, "count"), 0);
}

pub async fn recent_pages_with_offset_and_limit(repo: Arc<dyn Diary>) {
    let (a, t) = (agent("eng"), base_time());
    for i in 0..5 {
        write(
            &repo,
            long(a, &format!("row {i}"), None),
            t + Duration::seconds(i),
        )
        .await;
    }
    let page = |offset, limit| Page { offset, limit };
    let got = ok(repo.recent(&a, page(1, 2), t).await, "recent");
    assert_eq!(contents(&got), vec!["row 3", "row 2"]);
    let got = ok(repo.recent(&a, page(4, 10), t).await, "recent");
    assert_eq!(contents(&got), vec!["row 0"]);
    assert!(ok(repo.recent(&a, page(5, 10), t).await, "recent").is_empty());
    assert!(ok(repo.recent(&a, page(0, 0), t).await, "recent").is_empty());
}
