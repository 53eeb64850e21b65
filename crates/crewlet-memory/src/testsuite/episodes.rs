//! Conformance of [`Episodes`].

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use crewlet_core::AgentId;
use uuid::Uuid;

use super::{base_time, close, err, ok, too_wide};
use crate::error::MemoryError;
use crate::repos::{EpisodeFilter, Episodes};
use crate::types::{Episode, EpisodeCounts, EpisodeKind, NewEpisode, Page};

fn episode(handle: &str, ended_at: DateTime<Utc>, outcome: &str) -> Episode {
    Episode {
        id: Uuid::now_v7(),
        agent_handle: handle.to_owned(),
        agent_id: Some(AgentId::for_seat("Conformance", handle)),
        task_id: Some("ENG-42".to_owned()),
        task_summary: "fix the flaky deploy".to_owned(),
        plan_summary: "read logs, patch retry".to_owned(),
        tool_sequence: vec!["read_file".to_owned(), "run_tests".to_owned()],
        skills_used: vec!["deploy-retry".to_owned()],
        review_outcome: Some(outcome.to_owned()),
        started_at: ended_at - Duration::seconds(90),
        ended_at,
        duration_ms: 90_000,
        kind: EpisodeKind::Raw,
        work_key: Some("plane:ENG-42".to_owned()),
    }
}

fn new(episode: Episode, embedding: Option<Vec<f32>>) -> NewEpisode {
    NewEpisode { episode, embedding }
}

fn compacted(handle: &str, ended_at: DateTime<Utc>) -> NewEpisode {
    let mut e = episode(handle, ended_at, "done");
    e.kind = EpisodeKind::Compacted;
    e.task_summary = "summary of old work".to_owned();
    new(e, Some(vec![0.0, 1.0]))
}

async fn record(repo: &Arc<dyn Episodes>, e: NewEpisode) -> bool {
    ok(repo.record(e).await, "record")
}

fn ids(rows: &[Episode]) -> Vec<Uuid> {
    rows.iter().map(|e| e.id).collect()
}

pub async fn record_round_trips_every_field_and_writes_a_turn_once(repo: Arc<dyn Episodes>) {
    let t = base_time();
    let full = episode("eng", t, "done");
    assert!(record(&repo, new(full.clone(), Some(vec![1.0, 0.0]))).await);
    assert!(
        !record(&repo, new(full.clone(), None)).await,
        "the same turn twice"
    );
    let mut bare = episode("eng", t - Duration::minutes(1), "skip");
    (
        bare.agent_id,
        bare.task_id,
        bare.review_outcome,
        bare.work_key,
    ) = (None, None, None, None);
    (bare.tool_sequence, bare.skills_used) = (Vec::new(), Vec::new());
    assert!(record(&repo, new(bare.clone(), None)).await);
    let rows = ok(
        repo.recent("eng", EpisodeFilter::default(), Page::first(10))
            .await,
        "recent",
    );
    assert_eq!(rows, vec![full.clone(), bare]);
    assert!(ok(repo.contains("eng", full.id).await, "contains"));
    assert!(!ok(
        repo.contains("pm", full.id).await,
        "contains for another agent"
    ));
    assert!(!ok(
        repo.contains("eng", Uuid::now_v7()).await,
        "contains unknown"
    ));
    let counts = ok(repo.counts("eng").await, "counts");
    assert_eq!(
        counts,
        EpisodeCounts {
            raw: 2,
            compacted: 0
        }
    );
}

pub async fn recent_filters_by_outcome_and_kind_newest_first_and_pages(repo: Arc<dyn Episodes>) {
    let t = base_time();
    let mut all = Vec::new();
    for (i, outcome) in ["done", "failed", "done", "direct", "done"]
        .iter()
        .enumerate()
    {
        let e = episode("eng", t + Duration::seconds(i as i64), outcome);
        record(&repo, new(e.clone(), None)).await;
        all.push(e);
    }
    let summary = compacted("eng", t - Duration::days(1));
    record(&repo, summary.clone()).await;
    record(&repo, new(episode("pm", t, "done"), None)).await;

    let everything = ok(
        repo.recent("eng", EpisodeFilter::default(), Page::first(10))
            .await,
        "recent",
    );
    let mut want: Vec<Uuid> = all.iter().rev().map(|e| e.id).collect();
    want.push(summary.episode.id);
    assert_eq!(ids(&everything), want);

    let done = EpisodeFilter {
        outcome: Some("done"),
        kind: None,
    };
    let got = ok(
        repo.recent("eng", done, Page::first(10)).await,
        "recent done",
    );
    assert_eq!(
        ids(&got),
        vec![all[4].id, all[2].id, all[0].id, summary.episode.id]
    );
    let raw_done = EpisodeFilter {
        outcome: Some("done"),
        kind: Some(EpisodeKind::Raw),
    };
    let got = ok(
        repo.recent(
            "eng",
            raw_done,
            Page {
                offset: 1,
                limit: 1,
            },
        )
        .await,
        "page",
    );
    assert_eq!(ids(&got), vec![all[2].id]);
    let only_compacted = EpisodeFilter {
        outcome: None,
        kind: Some(EpisodeKind::Compacted),
    };
    let got = ok(
        repo.recent("eng", only_compacted, Page::first(10)).await,
        "compacted",
    );
    assert_eq!(ids(&got), vec![summary.episode.id]);
    let failed = EpisodeFilter {
        outcome: Some("failed"),
        kind: None,
    };
    let got = ok(repo.recent("eng", failed, Page::first(10)).await, "failed");
    assert_eq!(ids(&got), vec![all[1].id]);
    assert!(
        ok(
            repo.recent(
                "eng",
                EpisodeFilter::default(),
                Page {
                    offset: 6,
                    limit: 5
                }
            )
            .await,
            "past the end"
        )
        .is_empty()
    );
    assert!(
        ok(
            repo.recent("nobody", EpisodeFilter::default(), Page::first(5))
                .await,
            "unknown agent"
        )
        .is_empty()
    );
}

pub async fn similar_orders_by_cosine_within_the_agent_and_filter(repo: Arc<dyn Episodes>) {
    let t = base_time();
    let same = episode("eng", t, "done");
    let near = episode("eng", t + Duration::seconds(1), "failed");
    let far = episode("eng", t + Duration::seconds(2), "done");
    let none = episode("eng", t + Duration::seconds(3), "done");
    let other = episode("pm", t, "done");
    record(&repo, new(same.clone(), Some(vec![1.0, 0.0]))).await;
    record(&repo, new(near.clone(), Some(vec![0.6, 0.8]))).await;
    record(&repo, new(far.clone(), Some(vec![0.0, 0.0, 1.0]))).await;
    record(&repo, new(none, None)).await;
    record(&repo, new(other, Some(vec![1.0, 0.0]))).await;

    let found = ok(
        repo.similar("eng", &[1.0, 0.0, 0.0], EpisodeFilter::default(), 10)
            .await,
        "similar",
    );
    assert_eq!(
        found.iter().map(|s| s.item.id).collect::<Vec<_>>(),
        vec![same.id, near.id, far.id]
    );
    for (s, want) in found.iter().zip([1.0, 0.6, 0.0]) {
        assert!(close(s.score, want), "{} != {want}", s.score);
    }
    assert_eq!(found[0].item, same);
    let done = EpisodeFilter {
        outcome: Some("done"),
        kind: None,
    };
    let found = ok(repo.similar("eng", &[1.0], done, 10).await, "similar done");
    assert_eq!(
        found.iter().map(|s| s.item.id).collect::<Vec<_>>(),
        vec![same.id, far.id]
    );
    let compacted_only = EpisodeFilter {
        outcome: None,
        kind: Some(EpisodeKind::Compacted),
    };
    assert!(
        ok(
            repo.similar("eng", &[1.0], compacted_only, 10).await,
            "none"
        )
        .is_empty()
    );
    let top = ok(
        repo.similar("eng", &[0.0, 1.0], EpisodeFilter::default(), 1)
            .await,
        "top 1",
    );
    assert_eq!(top.len(), 1);
    assert_eq!(top[0].item.id, near.id);
}

pub async fn counts_and_agents_over_the_raw_threshold(repo: Arc<dyn Episodes>) {
    let t = base_time();
    for i in 0..3 {
        record(
            &repo,
            new(episode("eng", t + Duration::seconds(i), "done"), None),
        )
        .await;
    }
    record(&repo, compacted("eng", t - Duration::days(2))).await;
    record(&repo, compacted("eng", t - Duration::days(1))).await;
    record(&repo, new(episode("Zed", t, "done"), None)).await;
    record(&repo, compacted("pm", t)).await;
    assert_eq!(
        ok(repo.counts("eng").await, "counts"),
        EpisodeCounts {
            raw: 3,
            compacted: 2
        }
    );
    assert_eq!(
        ok(repo.counts("pm").await, "counts"),
        EpisodeCounts {
            raw: 0,
            compacted: 1
        }
    );
    assert_eq!(
        ok(repo.counts("nobody").await, "counts"),
        EpisodeCounts::default()
    );
    let over = |n| {
        let repo = Arc::clone(&repo);
        async move { ok(repo.over_raw_threshold(n).await, "over_raw_threshold") }
    };
    // By handle, bytewise: "Zed" sorts before "eng".
    assert_eq!(
        over(0).await,
        vec![("Zed".to_owned(), 1), ("eng".to_owned(), 3)]
    );
    assert_eq!(over(1).await, vec![("eng".to_owned(), 3)]);
    assert!(over(3).await.is_empty(), "more than, not at least");
}

pub async fn oldest_raw_is_oldest_first_and_skips_compacted(repo: Arc<dyn Episodes>) {
    let t = base_time();
    let mut raw = Vec::new();
    for i in [3, 1, 2, 0] {
        let e = episode("eng", t + Duration::minutes(i), "done");
        record(&repo, new(e.clone(), None)).await;
        raw.push((i, e.id));
    }
    raw.sort();
    record(&repo, compacted("eng", t - Duration::days(1))).await;
    record(
        &repo,
        new(episode("pm", t - Duration::days(9), "done"), None),
    )
    .await;
    let got = ok(repo.oldest_raw("eng", 3).await, "oldest_raw");
    let want: Vec<Uuid> = raw.iter().take(3).map(|(_, id)| *id).collect();
    assert_eq!(ids(&got), want);
    assert!(got.iter().all(|e| e.kind == EpisodeKind::Raw));
    assert_eq!(ok(repo.oldest_raw("eng", 10).await, "oldest_raw").len(), 4);
    assert!(ok(repo.oldest_raw("eng", 0).await, "oldest_raw").is_empty());
}

pub async fn compact_replaces_raw_rows_once(repo: Arc<dyn Episodes>) {
    let t = base_time();
    let mut olds = Vec::new();
    for i in 0..4 {
        let e = episode("eng", t + Duration::minutes(i), "done");
        record(&repo, new(e.clone(), None)).await;
        olds.push(e.id);
    }
    let theirs = episode("pm", t, "done");
    record(&repo, new(theirs.clone(), None)).await;
    // Three of ours, one unknown id, one other agent's id.
    let replaced = vec![olds[0], olds[1], olds[2], Uuid::now_v7(), theirs.id];
    let summary = compacted("eng", t + Duration::minutes(2));
    let n = ok(
        repo.compact("eng", &replaced, summary.clone()).await,
        "compact",
    );
    assert_eq!(n, 3);
    assert_eq!(
        ok(repo.counts("eng").await, "counts"),
        EpisodeCounts {
            raw: 1,
            compacted: 1
        }
    );
    assert!(
        ok(repo.contains("pm", theirs.id).await, "contains"),
        "another agent's row stays"
    );
    assert!(ok(
        repo.contains("eng", summary.episode.id).await,
        "contains summary"
    ));
    assert!(!ok(
        repo.contains("eng", olds[0]).await,
        "contains replaced"
    ));
    assert_eq!(
        ids(&ok(repo.oldest_raw("eng", 10).await, "oldest_raw")),
        vec![olds[3]]
    );
    // Compacting the same rows again (a retried worker) writes nothing.
    let again = compacted("eng", t + Duration::minutes(3));
    assert_eq!(
        ok(
            repo.compact("eng", &replaced, again.clone()).await,
            "compact again"
        ),
        0
    );
    assert!(!ok(
        repo.contains("eng", again.episode.id).await,
        "second summary"
    ));
    assert_eq!(
        ok(repo.counts("eng").await, "counts"),
        EpisodeCounts {
            raw: 1,
            compacted: 1
        }
    );
    // A compacted row is never replaced by a compaction.
    let n = ok(
        repo.compact("eng", &[summary.episode.id], again).await,
        "compact a summary",
    );
    assert_eq!(n, 0);
    assert_eq!(
        ok(
            repo.compact("eng", &[], compacted("eng", t)).await,
            "compact nothing"
        ),
        0
    );
    assert_eq!(
        ok(repo.counts("eng").await, "counts"),
        EpisodeCounts {
            raw: 1,
            compacted: 1
        }
    );
}

pub async fn compact_refuses_a_summary_that_is_not_compacted_or_not_the_agents(
    repo: Arc<dyn Episodes>,
) {
    let t = base_time();
    let old = episode("eng", t, "done");
    record(&repo, new(old.clone(), None)).await;
    let raw_summary = new(episode("eng", t + Duration::minutes(1), "done"), None);
    let e = err(
        repo.compact("eng", &[old.id], raw_summary).await,
        "raw summary",
    );
    assert!(matches!(e, MemoryError::Invalid(_)), "{e}");
    let foreign = compacted("pm", t + Duration::minutes(1));
    let e = err(
        repo.compact("eng", &[old.id], foreign).await,
        "another agent's summary",
    );
    assert!(matches!(e, MemoryError::Invalid(_)), "{e}");
    let mut wide = compacted("eng", t + Duration::minutes(1));
    wide.embedding = Some(too_wide());
    let e = err(
        repo.compact("eng", &[old.id], wide).await,
        "too wide summary",
    );
    assert!(matches!(e, MemoryError::Invalid(_)), "{e}");
    assert!(
        ok(repo.contains("eng", old.id).await, "contains"),
        "nothing was deleted"
    );
    assert_eq!(
        ok(repo.counts("eng").await, "counts"),
        EpisodeCounts {
            raw: 1,
            compacted: 0
        }
    );
}

pub async fn wider_vectors_are_invalid(repo: Arc<dyn Episodes>) {
    let t = base_time();
    let e = err(
        repo.record(new(episode("eng", t, "done"), Some(too_wide())))
            .await,
        "record",
    );
    assert!(matches!(e, MemoryError::Invalid(_)), "{e}");
    assert_eq!(
        ok(repo.counts("eng").await, "counts"),
        EpisodeCounts::default()
    );
    let e = err(
        repo.similar("eng", &too_wide(), EpisodeFilter::default(), 5)
            .await,
        "similar",
    );
    assert!(matches!(e, MemoryError::Invalid(_)), "{e}");
}
