//! [`ConfigRevisions`] conformance.

use std::sync::Arc;

use serde_json::json;

use super::ok;
use crate::StoreError;
use crate::repos::config_revisions::{ConfigRevision, ConfigRevisions, NewRevision};

fn rev(parent: Option<i64>, name: &str, activate: bool) -> NewRevision {
    NewRevision {
        parent_revision_id: parent,
        created_by: "founder".to_owned(),
        source: "test".to_owned(),
        summary: format!("set name to {name}"),
        payload: json!({"name": name}),
        activate,
    }
}

async fn create(repo: &dyn ConfigRevisions, new: NewRevision) -> ConfigRevision {
    ok(repo.create(new).await, "creating a revision")
}

async fn active_count(repo: &dyn ConfigRevisions) -> usize {
    ok(repo.list(100).await, "listing")
        .iter()
        .filter(|r| r.is_active)
        .count()
}

pub async fn first_revision_has_no_parent_and_can_be_activated(repo: Arc<dyn ConfigRevisions>) {
    assert!(ok(repo.active().await, "active").is_none());
    let first = create(&*repo, rev(None, "Acme", true)).await;
    assert_eq!(first.parent_revision_id, None);
    assert!(first.is_active);
    assert!(first.activated_at.is_some());
    assert_eq!(first.payload, json!({"name": "Acme"}));
    assert_eq!(first.created_by, "founder");
    assert_eq!(first.source, "test");
    let active = ok(repo.active().await, "active");
    assert_eq!(active.map(|r| r.revision_id), Some(first.revision_id));
}

pub async fn active_key_follows_activation_without_the_payload(repo: Arc<dyn ConfigRevisions>) {
    assert_eq!(ok(repo.active_key().await, "active key"), None);
    let first = create(&*repo, rev(None, "Acme", true)).await;
    assert_eq!(ok(repo.active_key().await, "active key"), Some(first.key()));
    let draft = create(&*repo, rev(Some(first.revision_id), "Draft", false)).await;
    // A draft does not move it.
    assert_eq!(ok(repo.active_key().await, "active key"), Some(first.key()));
    let activated = ok(repo.activate(draft.revision_id).await, "activate");
    let key = ok(repo.active_key().await, "active key");
    assert_eq!(key, Some(activated.key()));
    assert_ne!(key, Some(first.key()));
    assert!(key.is_some_and(|k| k.activated_at.is_some()));
    let active = ok(repo.active().await, "active");
    assert_eq!(active.map(|r| r.key()), key);
}

pub async fn stale_parent_is_a_conflict(repo: Arc<dyn ConfigRevisions>) {
    let first = create(&*repo, rev(None, "A", true)).await;
    let second = create(&*repo, rev(Some(first.revision_id), "B", true)).await;
    // Someone still editing from `first` is told the config moved on.
    let stale = repo.create(rev(Some(first.revision_id), "C", true)).await;
    assert!(
        matches!(&stale, Err(StoreError::Conflict { .. })),
        "{stale:?}"
    );
    let msg = stale.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains(&first.revision_id.to_string())
            && msg.contains(&second.revision_id.to_string()),
        "{msg}"
    );
    // No parent while one is active is stale too.
    assert!(matches!(
        repo.create(rev(None, "D", true)).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(
        ok(repo.list(10).await, "list").len(),
        2,
        "nothing was appended"
    );
}

pub async fn exactly_one_revision_is_active(repo: Arc<dyn ConfigRevisions>) {
    let a = create(&*repo, rev(None, "A", true)).await;
    let b = create(&*repo, rev(Some(a.revision_id), "B", true)).await;
    assert_eq!(active_count(&*repo).await, 1);
    let back = ok(repo.activate(a.revision_id).await, "activate");
    assert!(back.is_active);
    assert_eq!(active_count(&*repo).await, 1);
    assert!(!ok(repo.get(b.revision_id).await, "get").is_some_and(|r| r.is_active));
    // Activating the active one again is harmless.
    ok(repo.activate(a.revision_id).await, "activate again");
    assert_eq!(active_count(&*repo).await, 1);
}

pub async fn revert_appends_a_copy_and_activates_it(repo: Arc<dyn ConfigRevisions>) {
    let a = create(&*repo, rev(None, "A", true)).await;
    let b = create(&*repo, rev(Some(a.revision_id), "B", true)).await;
    let reverted = ok(
        repo.revert(a.revision_id, "ops", "back to A", "api.revert")
            .await,
        "revert",
    );
    assert!(
        reverted.revision_id > b.revision_id,
        "appended, not rewritten"
    );
    assert_eq!(reverted.parent_revision_id, Some(b.revision_id));
    assert_eq!(reverted.payload, a.payload);
    assert_eq!(reverted.created_by, "ops");
    assert_eq!(reverted.summary, "back to A");
    assert_eq!(reverted.source, "api.revert");
    assert_eq!(reverted.parent_uuid, Some(b.uuid));
    assert_ne!(reverted.uuid, a.uuid, "a revert is a new revision");
    assert!(reverted.is_active);
    assert_eq!(active_count(&*repo).await, 1);
    assert_eq!(ok(repo.list(10).await, "list").len(), 3);
    assert!(matches!(
        repo.revert(9_999, "ops", "x", "api.revert").await,
        Err(StoreError::NotFound { .. })
    ));
}

pub async fn list_is_newest_first_and_unknown_ids_are_not_found(repo: Arc<dyn ConfigRevisions>) {
    let a = create(&*repo, rev(None, "A", true)).await;
    let b = create(&*repo, rev(Some(a.revision_id), "B", true)).await;
    let c = create(&*repo, rev(Some(b.revision_id), "C", true)).await;
    let ids: Vec<i64> = ok(repo.list(10).await, "list")
        .iter()
        .map(|r| r.revision_id)
        .collect();
    assert_eq!(ids, vec![c.revision_id, b.revision_id, a.revision_id]);
    assert_eq!(ok(repo.list(2).await, "list").len(), 2);
    assert_eq!(
        ok(repo.get(b.revision_id).await, "get").map(|r| r.payload),
        Some(json!({"name": "B"}))
    );
    assert!(ok(repo.get(9_999).await, "get").is_none());
    assert!(matches!(
        repo.activate(9_999).await,
        Err(StoreError::NotFound { .. })
    ));
}

pub async fn concurrent_edits_of_one_parent_let_exactly_one_win(repo: Arc<dyn ConfigRevisions>) {
    let base = create(&*repo, rev(None, "base", true)).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let repo = Arc::clone(&repo);
        let parent = base.revision_id;
        tasks.push(tokio::spawn(async move {
            repo.create(rev(Some(parent), &format!("edit{i}"), true))
                .await
        }));
    }
    let mut won = 0;
    for t in tasks {
        match ok(t.await, "edit task") {
            Ok(_) => won += 1,
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(won, 1);
    assert_eq!(active_count(&*repo).await, 1);
}

pub async fn inactive_drafts_do_not_move_the_parent(repo: Arc<dyn ConfigRevisions>) {
    let a = create(&*repo, rev(None, "A", true)).await;
    let draft = create(&*repo, rev(Some(a.revision_id), "draft", false)).await;
    assert!(!draft.is_active);
    assert_eq!(
        ok(repo.active().await, "active").map(|r| r.revision_id),
        Some(a.revision_id)
    );
    // Another edit from the active revision still succeeds.
    let b = create(&*repo, rev(Some(a.revision_id), "B", true)).await;
    assert!(b.is_active);
}

pub async fn every_revision_has_its_own_uuid_and_its_parents(repo: Arc<dyn ConfigRevisions>) {
    let a = create(&*repo, rev(None, "A", true)).await;
    let b = create(&*repo, rev(Some(a.revision_id), "B", true)).await;
    assert_ne!(a.uuid, b.uuid);
    assert_eq!(a.parent_uuid, None);
    assert_eq!(b.parent_uuid, Some(a.uuid));
    let by_uuid = ok(repo.get_by_uuid(b.uuid).await, "get_by_uuid");
    assert_eq!(by_uuid.as_ref().map(|r| r.revision_id), Some(b.revision_id));
    assert_eq!(by_uuid.and_then(|r| r.parent_uuid), Some(a.uuid));
    let active = ok(repo.active().await, "active");
    assert_eq!(
        active.map(|r| (r.uuid, r.parent_uuid)),
        Some((b.uuid, Some(a.uuid)))
    );
    let listed = ok(repo.list(10).await, "list");
    assert_eq!(
        listed.iter().map(|r| r.uuid).collect::<Vec<_>>(),
        vec![b.uuid, a.uuid]
    );
    assert!(ok(repo.get_by_uuid(uuid::Uuid::new_v4()).await, "get_by_uuid").is_none());
    // Re-activating an old revision keeps its uuid.
    let back = ok(repo.activate(a.revision_id).await, "activate");
    assert_eq!(back.uuid, a.uuid);
}

pub async fn pages_are_newest_first_with_an_offset(repo: Arc<dyn ConfigRevisions>) {
    let mut parent = None;
    let mut ids = Vec::new();
    for i in 0..5 {
        let r = create(&*repo, rev(parent, &format!("r{i}"), true)).await;
        parent = Some(r.revision_id);
        ids.push(r.revision_id);
    }
    ids.reverse();
    let page = |limit, offset| {
        let repo = Arc::clone(&repo);
        async move {
            ok(repo.list_page(limit, offset).await, "list_page")
                .iter()
                .map(|r| r.revision_id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(page(2, 0).await, ids[0..2].to_vec());
    assert_eq!(page(2, 2).await, ids[2..4].to_vec());
    assert_eq!(page(2, 4).await, ids[4..5].to_vec());
    assert!(page(2, 5).await.is_empty());
    assert!(page(2, u64::MAX).await.is_empty());
    assert!(page(0, 0).await.is_empty());
}
