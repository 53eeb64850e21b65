//! Conformance of [`Skills`].

use std::sync::Arc;

use chrono::Duration;

use super::{base_time, close, err, ok, too_wide};
use crate::error::MemoryError;
use crate::repos::Skills;
use crate::types::{NewSkill, SkillChange, SkillLimits, SkillState};

fn skill(handle: &str, name: &str, embedding: Option<Vec<f32>>) -> NewSkill {
    NewSkill {
        agent_handle: handle.to_owned(),
        name: name.to_owned(),
        description: format!("how to {name}"),
        body: format!("# {name}\n\n1. step one\n2. step two\n"),
        tool_sequence: vec!["search".to_owned(), "comment".to_owned()],
        embedding,
    }
}

fn change(body: &str, note: &str) -> SkillChange {
    SkillChange {
        description: None,
        body: body.to_owned(),
        change_note: note.to_owned(),
        embedding: None,
    }
}

fn limits() -> SkillLimits {
    SkillLimits::default()
}

pub async fn create_starts_at_version_one_and_names_are_unique(repo: Arc<dyn Skills>) {
    let new = skill("eng", "triage-bug", Some(vec![1.0, 0.0]));
    let created = ok(repo.create(new.clone(), limits()).await, "create");
    assert_eq!(
        (created.version, created.use_count, created.state),
        (1, 0, SkillState::Active)
    );
    assert_eq!(
        (created.name.as_str(), created.body.as_str()),
        ("triage-bug", new.body.as_str())
    );
    assert_eq!(created.tool_sequence, new.tool_sequence);
    assert_eq!(created.last_used_at, None);
    assert_eq!(
        ok(repo.get("eng", "triage-bug").await, "get"),
        Some(created.clone())
    );
    let e = err(
        repo.create(skill("eng", "triage-bug", None), limits())
            .await,
        "same name",
    );
    assert!(matches!(e, MemoryError::Conflict(_)), "{e}");
    // Archived names stay taken; other agents have their own names.
    ok(
        repo.set_state("eng", "triage-bug", SkillState::Archived)
            .await,
        "archive",
    );
    let e = err(
        repo.create(skill("eng", "triage-bug", None), limits())
            .await,
        "archived name",
    );
    assert!(matches!(e, MemoryError::Conflict(_)), "{e}");
    ok(
        repo.create(skill("pm", "triage-bug", None), limits()).await,
        "other agent",
    );
    assert!(ok(repo.get("eng", "nope").await, "get unknown").is_none());
    let e = err(
        repo.create(skill("eng", " ", None), limits()).await,
        "blank name",
    );
    assert!(matches!(e, MemoryError::Invalid(_)), "{e}");
    let e = err(
        repo.create(skill("eng", "wide", Some(too_wide())), limits())
            .await,
        "wide",
    );
    assert!(matches!(e, MemoryError::Invalid(_)), "{e}");
}

pub async fn create_enforces_the_live_skill_cap(repo: Arc<dyn Skills>) {
    let cap = SkillLimits {
        max_per_agent: 2,
        ..limits()
    };
    ok(repo.create(skill("eng", "a", None), cap).await, "create a");
    ok(repo.create(skill("eng", "b", None), cap).await, "create b");
    let e = err(repo.create(skill("eng", "c", None), cap).await, "third");
    assert!(matches!(e, MemoryError::Limit(_)), "{e}");
    // Stale still counts; archived does not.
    ok(repo.set_state("eng", "a", SkillState::Stale).await, "stale");
    let e = err(
        repo.create(skill("eng", "c", None), cap).await,
        "third with a stale",
    );
    assert!(matches!(e, MemoryError::Limit(_)), "{e}");
    ok(
        repo.set_state("eng", "a", SkillState::Archived).await,
        "archive",
    );
    ok(
        repo.create(skill("eng", "c", None), cap).await,
        "third after archiving",
    );
    // The cap is per agent.
    ok(
        repo.create(skill("pm", "a", None), cap).await,
        "another agent",
    );
    assert_eq!(ok(repo.list("eng", &[]).await, "list").len(), 3);
}

pub async fn bodies_over_the_cap_are_refused(repo: Arc<dyn Skills>) {
    let cap = SkillLimits {
        max_body_chars: 10,
        ..limits()
    };
    let mut at_cap = skill("eng", "short", None);
    at_cap.body = "é".repeat(10); // 10 characters, 20 bytes: characters count
    ok(repo.create(at_cap, cap).await, "body at the cap");
    let mut over = skill("eng", "long", None);
    over.body = "x".repeat(11);
    let e = err(repo.create(over, cap).await, "body over the cap");
    assert!(matches!(e, MemoryError::Limit(_)), "{e}");
    assert!(ok(repo.get("eng", "long").await, "get").is_none());
    let e = err(
        repo.update("eng", "short", change(&"y".repeat(11), "grow"), cap)
            .await,
        "update",
    );
    assert!(matches!(e, MemoryError::Limit(_)), "{e}");
    let kept = ok(repo.get("eng", "short").await, "get").map(|s| (s.version, s.body));
    assert_eq!(kept, Some((1, "é".repeat(10))), "nothing changed");
    assert!(ok(repo.versions("eng", "short").await, "versions").is_empty());
}

pub async fn update_archives_the_prior_state_and_bumps_the_version(repo: Arc<dyn Skills>) {
    let created = ok(
        repo.create(skill("eng", "deploy", Some(vec![1.0, 0.0])), limits())
            .await,
        "create",
    );
    let updated = ok(
        repo.update("eng", "deploy", change("v2 body", "retry twice"), limits())
            .await,
        "update",
    );
    assert_eq!(updated.version, 2);
    assert_eq!(updated.body, "v2 body");
    assert_eq!(
        updated.description, created.description,
        "None keeps the description"
    );
    assert_eq!(
        (updated.id, updated.created_at),
        (created.id, created.created_at)
    );
    assert!(updated.updated_at >= created.updated_at);
    let mut with_description = change("v3 body", "rename");
    with_description.description = Some("deploy safely".to_owned());
    let v3 = ok(
        repo.update("eng", "deploy", with_description, limits())
            .await,
        "update",
    );
    assert_eq!((v3.version, v3.description.as_str()), (3, "deploy safely"));
    assert_eq!(ok(repo.get("eng", "deploy").await, "get"), Some(v3));
    let versions = ok(repo.versions("eng", "deploy").await, "versions");
    let got: Vec<(i32, &str, &str, &str)> = versions
        .iter()
        .map(|v| {
            (
                v.version,
                v.body.as_str(),
                v.description.as_str(),
                v.change_note.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (2, "v2 body", created.description.as_str(), "rename"),
            (
                1,
                created.body.as_str(),
                created.description.as_str(),
                "retry twice"
            ),
        ]
    );
    assert!(versions.iter().all(|v| v.skill_id == created.id));
    // The vector is kept when the change has none.
    assert_eq!(
        ok(repo.similar("eng", &[1.0, 0.0], 5).await, "similar").len(),
        1
    );
}

pub async fn update_keeps_only_the_newest_versions(repo: Arc<dyn Skills>) {
    let cap = SkillLimits {
        max_versions: 2,
        ..limits()
    };
    ok(
        repo.create(skill("eng", "deploy", None), cap).await,
        "create",
    );
    for i in 2..=5 {
        let s = ok(
            repo.update(
                "eng",
                "deploy",
                change(&format!("v{i}"), &format!("to v{i}")),
                cap,
            )
            .await,
            "update",
        );
        assert_eq!(s.version, i);
    }
    let versions = ok(repo.versions("eng", "deploy").await, "versions");
    let got: Vec<(i32, &str)> = versions
        .iter()
        .map(|v| (v.version, v.body.as_str()))
        .collect();
    assert_eq!(got, vec![(4, "v4"), (3, "v3")]);
    let none = SkillLimits {
        max_versions: 0,
        ..limits()
    };
    ok(
        repo.update("eng", "deploy", change("v6", "no history"), none)
            .await,
        "update",
    );
    assert!(ok(repo.versions("eng", "deploy").await, "versions").is_empty());
}

pub async fn update_of_an_unknown_skill_is_not_found(repo: Arc<dyn Skills>) {
    ok(
        repo.create(skill("pm", "deploy", None), limits()).await,
        "create",
    );
    let e = err(
        repo.update("eng", "deploy", change("x", "y"), limits())
            .await,
        "update",
    );
    assert!(matches!(e, MemoryError::NotFound(_)), "{e}");
    let e = err(repo.versions("eng", "deploy").await, "versions");
    assert!(matches!(e, MemoryError::NotFound(_)), "{e}");
    let e = err(
        repo.set_state("eng", "deploy", SkillState::Stale).await,
        "set_state",
    );
    assert!(matches!(e, MemoryError::NotFound(_)), "{e}");
    let e = err(
        repo.record_use("eng", "deploy", base_time()).await,
        "record_use",
    );
    assert!(matches!(e, MemoryError::NotFound(_)), "{e}");
}

pub async fn record_use_counts_and_keeps_the_latest_time(repo: Arc<dyn Skills>) {
    let t = base_time();
    ok(
        repo.create(skill("eng", "deploy", None), limits()).await,
        "create",
    );
    let s = ok(
        repo.record_use("eng", "deploy", t + Duration::minutes(10))
            .await,
        "use",
    );
    assert_eq!(
        (s.use_count, s.last_used_at),
        (1, Some(t + Duration::minutes(10)))
    );
    let s = ok(repo.record_use("eng", "deploy", t).await, "an older use");
    assert_eq!(
        (s.use_count, s.last_used_at),
        (2, Some(t + Duration::minutes(10)))
    );
    let s = ok(
        repo.record_use("eng", "deploy", t + Duration::hours(1))
            .await,
        "use",
    );
    assert_eq!(
        (s.use_count, s.last_used_at),
        (3, Some(t + Duration::hours(1)))
    );
    assert_eq!(ok(repo.get("eng", "deploy").await, "get"), Some(s));
}

pub async fn set_state_and_list_by_state_sorted_by_name(repo: Arc<dyn Skills>) {
    for name in ["merge", "Deploy", "audit", "bisect"] {
        ok(
            repo.create(skill("eng", name, None), limits()).await,
            "create",
        );
    }
    ok(
        repo.create(skill("pm", "plan", None), limits()).await,
        "create",
    );
    let s = ok(
        repo.set_state("eng", "merge", SkillState::Stale).await,
        "stale",
    );
    assert_eq!((s.state, s.version), (SkillState::Stale, 1));
    ok(
        repo.set_state("eng", "audit", SkillState::Archived).await,
        "archive",
    );
    let names =
        |skills: Vec<crate::types::Skill>| skills.into_iter().map(|s| s.name).collect::<Vec<_>>();
    // Bytewise by name: upper case first.
    assert_eq!(
        names(ok(repo.list("eng", &[]).await, "all")),
        vec!["Deploy", "audit", "bisect", "merge"]
    );
    assert_eq!(
        names(ok(repo.list("eng", &[SkillState::Active]).await, "active")),
        vec!["Deploy", "bisect"]
    );
    let live = [SkillState::Active, SkillState::Stale];
    assert_eq!(
        names(ok(repo.list("eng", &live).await, "live")),
        vec!["Deploy", "bisect", "merge"]
    );
    assert_eq!(
        names(ok(
            repo.list("eng", &[SkillState::Archived]).await,
            "archived"
        )),
        vec!["audit"]
    );
    ok(
        repo.set_state("eng", "audit", SkillState::Active).await,
        "reactivate",
    );
    assert_eq!(
        ok(repo.list("eng", &[SkillState::Active]).await, "active").len(),
        3
    );
    assert!(ok(repo.list("nobody", &[]).await, "unknown agent").is_empty());
}

pub async fn similar_returns_only_active_skills_with_a_vector(repo: Arc<dyn Skills>) {
    ok(
        repo.create(skill("eng", "same", Some(vec![1.0, 0.0])), limits())
            .await,
        "create",
    );
    ok(
        repo.create(skill("eng", "near", Some(vec![0.8, 0.6, 0.0])), limits())
            .await,
        "create",
    );
    ok(
        repo.create(skill("eng", "stale", Some(vec![1.0, 0.0])), limits())
            .await,
        "create",
    );
    ok(
        repo.create(skill("eng", "archived", Some(vec![1.0, 0.0])), limits())
            .await,
        "create",
    );
    ok(
        repo.create(skill("eng", "blind", None), limits()).await,
        "create",
    );
    ok(
        repo.create(skill("pm", "theirs", Some(vec![1.0, 0.0])), limits())
            .await,
        "create",
    );
    ok(
        repo.set_state("eng", "stale", SkillState::Stale).await,
        "stale",
    );
    ok(
        repo.set_state("eng", "archived", SkillState::Archived)
            .await,
        "archive",
    );
    let found = ok(repo.similar("eng", &[1.0], 10).await, "similar");
    let got: Vec<(&str, f32)> = found
        .iter()
        .map(|s| (s.item.name.as_str(), s.score))
        .collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!((got[0].0, got[1].0), ("same", "near"));
    assert!(close(got[0].1, 1.0) && close(got[1].1, 0.8), "{got:?}");
    // A new vector moves the skill.
    let mut moved = change("new body", "re-embedded");
    moved.embedding = Some(vec![0.0, 1.0]);
    ok(repo.update("eng", "same", moved, limits()).await, "update");
    let found = ok(repo.similar("eng", &[1.0], 1).await, "similar");
    assert_eq!(found[0].item.name, "near");
    let e = err(repo.similar("eng", &too_wide(), 1).await, "wide query");
    assert!(matches!(e, MemoryError::Invalid(_)), "{e}");
}
