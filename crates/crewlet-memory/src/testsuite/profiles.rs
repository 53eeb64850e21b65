//! Conformance of [`CounterpartyProfiles`].

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use serde_json::json;

use super::{base_time, err, ok, too_wide};
use crate::error::MemoryError;
use crate::repos::CounterpartyProfiles;
use crate::types::{Page, ProfileObservation};

fn seen(observer: &str, subject: &str, platform: &str, at: DateTime<Utc>) -> ProfileObservation {
    ProfileObservation {
        observer: observer.to_owned(),
        subject: subject.to_owned(),
        platform: platform.to_owned(),
        display_name: None,
        summary: None,
        traits: serde_json::Map::new(),
        seen_at: at,
        embedding: None,
    }
}

fn traits(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

pub async fn observe_creates_then_updates_and_counts(repo: Arc<dyn CounterpartyProfiles>) {
    let t = base_time();
    assert!(ok(repo.get("eng", "alice", "slack").await, "get").is_none());
    let mut first = seen("eng", "alice", "slack", t);
    first.display_name = Some("Alice".to_owned());
    first.summary = Some("PM for billing".to_owned());
    first.traits = traits(json!({"style": "terse"}));
    first.embedding = Some(vec![1.0, 0.0]);
    let p = ok(repo.observe(first).await, "observe");
    assert_eq!(
        (p.observer.as_str(), p.subject.as_str(), p.platform.as_str()),
        ("eng", "alice", "slack")
    );
    assert_eq!(
        (p.display_name.as_deref(), p.summary.as_str()),
        (Some("Alice"), "PM for billing")
    );
    assert_eq!((p.interaction_count, p.last_seen_at), (1, Some(t)));
    assert_eq!(p.traits, json!({"style": "terse"}));
    assert_eq!(
        ok(repo.get("eng", "alice", "slack").await, "get"),
        Some(p.clone())
    );
    // None keeps the name and the summary.
    let q = ok(
        repo.observe(seen("eng", "alice", "slack", t + Duration::minutes(1)))
            .await,
        "observe",
    );
    assert_eq!(
        (q.display_name.as_deref(), q.summary.as_str()),
        (Some("Alice"), "PM for billing")
    );
    assert_eq!((q.interaction_count, q.created_at), (2, p.created_at));
    let mut renamed = seen("eng", "alice", "slack", t + Duration::minutes(2));
    renamed.display_name = Some("Alice B.".to_owned());
    renamed.summary = Some(String::new());
    let r = ok(repo.observe(renamed).await, "observe");
    assert_eq!(
        (
            r.display_name.as_deref(),
            r.summary.as_str(),
            r.interaction_count
        ),
        (Some("Alice B."), "", 3)
    );
    // A first observation without a summary starts empty.
    let bare = ok(
        repo.observe(seen("eng", "bob", "slack", t)).await,
        "observe",
    );
    assert_eq!(
        (
            bare.display_name,
            bare.summary.as_str(),
            bare.interaction_count
        ),
        (None, "", 1)
    );
    assert_eq!(bare.traits, json!({}));
    for (what, mut o) in [
        ("blank observer", seen(" ", "alice", "slack", t)),
        ("blank subject", seen("eng", "", "slack", t)),
        ("blank platform", seen("eng", "alice", "", t)),
        ("too wide vector", seen("eng", "alice", "slack", t)),
    ] {
        if what == "too wide vector" {
            o.embedding = Some(too_wide());
        }
        let e = err(repo.observe(o).await, what);
        assert!(matches!(e, MemoryError::Invalid(_)), "{what}: {e}");
    }
    let still = ok(repo.get("eng", "alice", "slack").await, "get").map(|p| p.interaction_count);
    assert_eq!(still, Some(3));
}

pub async fn traits_merge_and_null_removes_a_key(repo: Arc<dyn CounterpartyProfiles>) {
    let t = base_time();
    let mut o = seen("eng", "alice", "slack", t);
    o.traits = traits(json!({"style": "terse", "tz": "UTC", "topics": ["billing"], "gone": null}));
    let p = ok(repo.observe(o).await, "observe");
    assert_eq!(
        p.traits,
        json!({"style": "terse", "tz": "UTC", "topics": ["billing"]})
    );
    let mut o = seen("eng", "alice", "slack", t);
    o.traits = traits(json!({"style": "formal", "tz": null, "lang": "en", "nested": {"a": null}}));
    let p = ok(repo.observe(o).await, "observe");
    assert_eq!(
        p.traits,
        json!({"style": "formal", "topics": ["billing"], "lang": "en", "nested": {"a": null}})
    );
    // No traits observed: the stored ones stay.
    let p = ok(
        repo.observe(seen("eng", "alice", "slack", t)).await,
        "observe",
    );
    assert_eq!(p.traits["style"], json!("formal"));
    assert_eq!(p.interaction_count, 3);
}

pub async fn last_seen_never_moves_back(repo: Arc<dyn CounterpartyProfiles>) {
    let t = base_time();
    ok(
        repo.observe(seen("eng", "alice", "slack", t)).await,
        "observe",
    );
    let p = ok(
        repo.observe(seen("eng", "alice", "slack", t - Duration::hours(1)))
            .await,
        "observe older",
    );
    assert_eq!((p.last_seen_at, p.interaction_count), (Some(t), 2));
    let p = ok(
        repo.observe(seen("eng", "alice", "slack", t + Duration::hours(1)))
            .await,
        "observe newer",
    );
    assert_eq!(p.last_seen_at, Some(t + Duration::hours(1)));
}

pub async fn about_lists_every_platform_of_one_subject(repo: Arc<dyn CounterpartyProfiles>) {
    let t = base_time();
    for platform in ["slack", "github", "plane"] {
        ok(
            repo.observe(seen("eng", "alice", platform, t)).await,
            "observe",
        );
    }
    ok(
        repo.observe(seen("eng", "bob", "slack", t)).await,
        "observe",
    );
    ok(
        repo.observe(seen("pm", "alice", "jira", t)).await,
        "observe",
    );
    let about = ok(repo.about("eng", "alice").await, "about");
    let platforms: Vec<&str> = about.iter().map(|p| p.platform.as_str()).collect();
    assert_eq!(platforms, vec!["github", "plane", "slack"]);
    assert!(
        about
            .iter()
            .all(|p| p.observer == "eng" && p.subject == "alice")
    );
    let theirs = ok(repo.about("pm", "alice").await, "about");
    assert_eq!(theirs.len(), 1, "profiles are private to their observer");
    assert!(ok(repo.about("eng", "carol").await, "about").is_empty());
}

pub async fn list_is_most_recently_seen_first_and_pages(repo: Arc<dyn CounterpartyProfiles>) {
    let t = base_time();
    ok(
        repo.observe(seen("eng", "alice", "slack", t)).await,
        "observe",
    );
    ok(
        repo.observe(seen("eng", "bob", "slack", t + Duration::minutes(5)))
            .await,
        "observe",
    );
    ok(
        repo.observe(seen("eng", "carol", "github", t + Duration::minutes(1)))
            .await,
        "observe",
    );
    ok(
        repo.observe(seen("eng", "carol", "slack", t + Duration::minutes(1)))
            .await,
        "observe",
    );
    ok(
        repo.observe(seen("pm", "dave", "slack", t + Duration::hours(1)))
            .await,
        "observe",
    );
    // Seeing alice again moves her to the front.
    ok(
        repo.observe(seen("eng", "alice", "slack", t + Duration::minutes(9)))
            .await,
        "observe",
    );
    let keys = |rows: Vec<crate::types::CounterpartyProfile>| {
        rows.into_iter()
            .map(|p| format!("{}@{}", p.subject, p.platform))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys(ok(repo.list("eng", Page::first(10)).await, "list")),
        vec!["alice@slack", "bob@slack", "carol@github", "carol@slack"]
    );
    assert_eq!(
        keys(ok(
            repo.list(
                "eng",
                Page {
                    offset: 1,
                    limit: 2
                }
            )
            .await,
            "page"
        )),
        vec!["bob@slack", "carol@github"]
    );
    assert!(
        ok(
            repo.list(
                "eng",
                Page {
                    offset: 4,
                    limit: 2
                }
            )
            .await,
            "past the end"
        )
        .is_empty()
    );
    assert_eq!(
        keys(ok(repo.list("pm", Page::first(10)).await, "list")),
        vec!["dave@slack"]
    );
}

pub async fn concurrent_observations_each_count(repo: Arc<dyn CounterpartyProfiles>) {
    let t = base_time();
    let mut tasks = Vec::new();
    for i in 0..12 {
        let repo = Arc::clone(&repo);
        tasks.push(tokio::spawn(async move {
            let mut o = seen("eng", "alice", "slack", t + Duration::seconds(i));
            o.traits.insert(format!("k{i}"), json!(i));
            repo.observe(o).await
        }));
    }
    for task in tasks {
        ok(ok(task.await, "observe task"), "observe");
    }
    let p = ok(repo.get("eng", "alice", "slack").await, "get");
    let p = p.unwrap_or_else(|| panic!("no profile after 12 observations"));
    assert_eq!(p.interaction_count, 12);
    assert_eq!(p.last_seen_at, Some(t + Duration::seconds(11)));
    assert_eq!(p.traits.as_object().map(|m| m.len()), Some(12));
}
