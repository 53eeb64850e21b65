//! Conformance of the small operational repositories: webhook dedupe,
//! thread follows, schedule claims.

use std::sync::Arc;

use chrono::{Duration, Utc};

use super::ok;
use crate::repos::follows::{ThreadFollows, ThreadRef};
use crate::repos::schedules::{ScheduledFire, ScheduledRuns};
use crate::repos::webhooks::WebhookDeliveries;

pub async fn first_claim_wins_and_a_repeat_within_five_minutes_is_a_duplicate(
    repo: Arc<dyn WebhookDeliveries>,
) {
    let t = Utc::now();
    assert!(ok(repo.claim_at("github", "d-1", t).await, "claim"));
    assert!(!ok(repo.claim_at("github", "d-1", t).await, "claim"));
    assert!(!ok(
        repo.claim_at("github", "d-1", t + Duration::minutes(4))
            .await,
        "claim"
    ));
    // Keys are per source.
    assert!(ok(repo.claim_at("gitlab", "d-1", t).await, "claim"));
    assert!(ok(repo.claim("github", "d-2").await, "claim now"));
    assert!(!ok(repo.claim("github", "d-2").await, "claim now"));
}

pub async fn is_claimed_looks_without_claiming(repo: Arc<dyn WebhookDeliveries>) {
    let t = Utc::now();
    assert!(!ok(repo.is_claimed_at("github", "l-1", t).await, "look"));
    // Looking claims nothing: the first claim still wins.
    assert!(ok(repo.claim_at("github", "l-1", t).await, "claim"));
    assert!(ok(repo.is_claimed_at("github", "l-1", t).await, "look"));
    assert!(!ok(
        repo.is_claimed_at("gitlab", "l-1", t).await,
        "other source"
    ));
    // Out of the window it no longer counts.
    let later = t + chrono::Duration::minutes(6);
    assert!(!ok(
        repo.is_claimed_at("github", "l-1", later).await,
        "look later"
    ));
    ok(repo.release("github", "l-1").await, "release");
    assert!(!ok(
        repo.is_claimed_at("github", "l-1", t).await,
        "look after release"
    ));
}

pub async fn a_released_claim_lets_the_retry_through(repo: Arc<dyn WebhookDeliveries>) {
    let t = Utc::now();
    assert!(ok(repo.claim_at("github", "r-1", t).await, "claim"));
    assert!(ok(repo.claim_at("github", "r-2", t).await, "claim"));
    ok(repo.release("github", "r-1").await, "release");
    // Only the released key is claimable again; releasing twice is harmless.
    assert!(ok(
        repo.claim_at("github", "r-1", t).await,
        "claim after release"
    ));
    assert!(!ok(repo.claim_at("github", "r-2", t).await, "claim"));
    ok(
        repo.release("github", "never-claimed").await,
        "release unknown",
    );
}

pub async fn a_repeat_after_the_window_is_claimable_again(repo: Arc<dyn WebhookDeliveries>) {
    let t = Utc::now();
    assert!(ok(repo.claim_at("slack", "e-1", t).await, "claim"));
    assert!(ok(
        repo.claim_at("slack", "e-1", t + Duration::minutes(6))
            .await,
        "claim"
    ));
    // The re-claim restarts the window.
    assert!(!ok(
        repo.claim_at("slack", "e-1", t + Duration::minutes(8))
            .await,
        "claim"
    ));
}

pub async fn gc_removes_old_claims_and_the_key_is_claimable_again(
    repo: Arc<dyn WebhookDeliveries>,
) {
    let t = Utc::now() - Duration::hours(1);
    assert!(ok(repo.claim_at("plane", "p-1", t).await, "claim"));
    assert!(ok(
        repo.claim_at("plane", "p-2", t + Duration::minutes(15))
            .await,
        "claim"
    ));
    assert_eq!(ok(repo.gc_at(t + Duration::minutes(10)).await, "gc"), 0);
    assert_eq!(ok(repo.gc_at(t + Duration::minutes(21)).await, "gc"), 1);
    assert!(ok(
        repo.claim_at("plane", "p-1", t + Duration::minutes(21))
            .await,
        "claim"
    ));
    assert!(!ok(
        repo.claim_at("plane", "p-2", t + Duration::minutes(16))
            .await,
        "claim"
    ));
}

pub async fn concurrent_claims_of_one_delivery_let_exactly_one_win(
    repo: Arc<dyn WebhookDeliveries>,
) {
    let t = Utc::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let repo = Arc::clone(&repo);
        tasks.push(tokio::spawn(async move {
            repo.claim_at("jira", "j-1", t).await
        }));
    }
    let mut won = 0;
    for task in tasks {
        if ok(ok(task.await, "claim task"), "claim") {
            won += 1;
        }
    }
    assert_eq!(won, 1);
}

/// Many deliveries claimed at once (what a group-committing store turns
/// into shared statements): each key is won exactly once, the same key
/// under two sources is two claims, and keys claimed before stay claimed.
pub async fn concurrent_claims_of_many_deliveries_let_one_win_each(
    repo: Arc<dyn WebhookDeliveries>,
) {
    let t = Utc::now();
    assert!(ok(
        repo.claim_at("github", "many-0", t).await,
        "claim before"
    ));
    let mut tasks = Vec::new();
    for round in 0..4 {
        for key in 0..50 {
            for source in ["github", "gitlab"] {
                let repo = Arc::clone(&repo);
                tasks.push(tokio::spawn(async move {
                    let won = repo.claim_at(source, &format!("many-{key}"), t).await;
                    (source, key, round, won)
                }));
            }
        }
    }
    let mut wins = std::collections::BTreeMap::new();
    for task in tasks {
        let (source, key, _round, won) = ok(task.await, "claim task");
        if ok(won, "claim") {
            *wins.entry((source, key)).or_insert(0) += 1;
        }
    }
    for key in 0..50 {
        for source in ["github", "gitlab"] {
            let expected = usize::from(!(source == "github" && key == 0));
            assert_eq!(
                wins.get(&(source, key)).copied().unwrap_or(0),
                expected,
                "{source}/many-{key}"
            );
        }
    }
    assert!(!ok(
        repo.claim_at("gitlab", "many-7", t).await,
        "claim after"
    ));
}

pub async fn follow_unfollow_and_followers(repo: Arc<dyn ThreadFollows>) {
    let thread = ThreadRef::new("slack", "C1", "1700000000.0001");
    let other = ThreadRef::new("slack", "C1", "1700000000.0002");
    assert!(!ok(repo.is_following("eng", &thread).await, "is_following"));
    assert!(ok(repo.follow("eng", &thread).await, "follow"));
    assert!(
        !ok(repo.follow("eng", &thread).await, "follow again"),
        "already following"
    );
    assert!(ok(repo.follow("pm", &thread).await, "follow"));
    assert!(ok(repo.follow("eng", &other).await, "follow other"));
    assert!(ok(repo.is_following("eng", &thread).await, "is_following"));
    assert_eq!(
        ok(repo.followers(&thread).await, "followers"),
        vec!["eng".to_owned(), "pm".to_owned()]
    );
    assert!(ok(repo.unfollow("eng", &thread).await, "unfollow"));
    assert!(!ok(repo.unfollow("eng", &thread).await, "unfollow again"));
    assert!(!ok(repo.is_following("eng", &thread).await, "is_following"));
    assert_eq!(
        ok(repo.followers(&thread).await, "followers"),
        vec!["pm".to_owned()]
    );
    assert!(ok(
        repo.is_following("eng", &other).await,
        "other thread untouched"
    ));
    let elsewhere = ThreadRef::new("teams", "C1", "1700000000.0001");
    assert!(ok(repo.followers(&elsewhere).await, "followers").is_empty());
}

fn fire(target: &str) -> ScheduledFire {
    ScheduledFire {
        scope: "unit:platform".to_owned(),
        schedule_name: "standup".to_owned(),
        fire_label: "2026-03-12T09:00Z".to_owned(),
        target: target.to_owned(),
    }
}

pub async fn a_fire_is_claimed_at_most_once_across_claimers(repo: Arc<dyn ScheduledRuns>) {
    let mut tasks = Vec::new();
    for i in 0..16 {
        let repo = Arc::clone(&repo);
        tasks.push(tokio::spawn(async move {
            repo.claim(&fire("eng"), &format!("node-{i}")).await
        }));
    }
    let mut won = 0;
    for task in tasks {
        if ok(ok(task.await, "claim task"), "claim") {
            won += 1;
        }
    }
    assert_eq!(won, 1);
    assert!(ok(
        repo.claim(&fire("pm"), "node-0").await,
        "another target"
    ));
    let mut later = fire("eng");
    later.fire_label = "2026-03-13T09:00Z".to_owned();
    assert!(ok(repo.claim(&later, "node-0").await, "another fire"));
}

pub async fn prune_forgets_old_claims(repo: Arc<dyn ScheduledRuns>) {
    assert!(ok(repo.claim(&fire("eng"), "n").await, "claim"));
    assert_eq!(
        ok(repo.prune(Utc::now() - Duration::hours(1)).await, "prune"),
        0
    );
    assert!(!ok(repo.claim(&fire("eng"), "n").await, "claim"));
    assert_eq!(
        ok(repo.prune(Utc::now() + Duration::seconds(1)).await, "prune"),
        1
    );
    assert!(ok(repo.claim(&fire("eng"), "n").await, "claim after prune"));
}
