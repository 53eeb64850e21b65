//! `GET /agents/{id}/memory` over the in-memory stores, filled through the
//! memory traits as the learning layer fills them.

mod common;

use chrono::{DateTime, Duration, Utc};
use common::{Harness, Options};
use crewlet_core::AgentId;
use crewlet_memory::{
    DiaryKind, Episode, EpisodeKind, MemoryStores, NewDiaryEntry, NewEpisode, NewSkill,
    ProfileObservation, SkillChange, SkillLimits,
};
use serde_json::Value;
use uuid::Uuid;

fn eng() -> AgentId {
    AgentId::for_seat("Test Co", "eng")
}

fn episode(n: i64, ended_at: DateTime<Utc>) -> NewEpisode {
    NewEpisode {
        episode: Episode {
            id: Uuid::now_v7(),
            agent_handle: "eng".into(),
            agent_id: Some(eng()),
            task_id: Some(format!("task-{n}")),
            task_summary: format!("fix bug {n}"),
            plan_summary: "read, patch, test".into(),
            tool_sequence: vec!["read_file".into(), "run_tests".into()],
            skills_used: vec!["triage".into()],
            review_outcome: Some("done".into()),
            started_at: ended_at - Duration::seconds(30),
            ended_at,
            duration_ms: 30_000,
            kind: EpisodeKind::Raw,
            work_key: None,
        },
        embedding: Some(vec![0.25, 0.5, 0.75]),
    }
}

/// A diary row, a live short row, an expired short row, three episodes, a
/// skill at version 2, two profiles and an onboarding marker, all of `eng`;
/// one diary row of `cto` that `eng` must not see.
async fn filled() -> MemoryStores {
    let m = MemoryStores::in_memory();
    let now = Utc::now();
    let write = |agent: AgentId, kind, content: &str, ttl_until| NewDiaryEntry {
        agent_id: agent,
        kind,
        content: content.into(),
        ttl_until,
        embedding: Some(vec![1.0, 0.0]),
    };
    let long = write(eng(), DiaryKind::Long, "prefers small PRs", None);
    m.diary
        .write(long, now - Duration::minutes(1))
        .await
        .unwrap();
    let expired = write(
        eng(),
        DiaryKind::Short,
        "waiting on CI (expired)",
        Some(now - Duration::hours(1)),
    );
    m.diary
        .write(expired, now - Duration::hours(2))
        .await
        .unwrap();
    let short = write(
        eng(),
        DiaryKind::Short,
        "on call this week",
        Some(now + Duration::days(3)),
    );
    m.diary.write(short, now).await.unwrap();
    let other = write(
        AgentId::for_seat("Test Co", "cto"),
        DiaryKind::Long,
        "cto's",
        None,
    );
    m.diary.write(other, now).await.unwrap();

    for n in 0..3 {
        m.episodes
            .record(episode(n, now - Duration::minutes(10 - n)))
            .await
            .unwrap();
    }

    let limits = SkillLimits::default();
    m.skills
        .create(
            NewSkill {
                agent_handle: "eng".into(),
                name: "triage".into(),
                description: "triage a bug report".into(),
                body: "1. reproduce\n2. bisect".into(),
                tool_sequence: vec!["read_file".into()],
                embedding: Some(vec![0.0, 1.0]),
            },
            limits,
        )
        .await
        .unwrap();
    m.skills
        .update(
            "eng",
            "triage",
            SkillChange {
                description: None,
                body: "1. reproduce\n2. bisect\n3. write a test".into(),
                change_note: "add a test step".into(),
                embedding: None,
            },
            limits,
        )
        .await
        .unwrap();

    for (subject, minutes) in [("alice", 5), ("bob", 1)] {
        m.profiles
            .observe(ProfileObservation {
                observer: "eng".into(),
                subject: subject.into(),
                platform: "slack".into(),
                display_name: Some(subject.to_uppercase()),
                summary: Some(format!("{subject} reviews PRs")),
                traits: serde_json::Map::from_iter([("style".into(), "terse".into())]),
                seen_at: now - Duration::minutes(minutes),
                embedding: Some(vec![0.5, 0.5]),
            })
            .await
            .unwrap();
    }

    m.onboarding.mark(&eng(), "chain-abc").await.unwrap();
    m
}

async fn harness() -> Harness {
    Harness::with(Options {
        memory: Some(filled().await),
        ..Options::default()
    })
    .await
}

async fn get(h: &Harness, path: &str) -> (u16, Value) {
    let r = h.get(path).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

fn no_embedding(v: &Value) {
    let text = v.to_string();
    assert!(!text.contains("embedding"), "{text}");
}

#[tokio::test]
async fn memory_of_a_seat_by_handle_and_by_agent_id() {
    let h = harness().await;
    let (status, body) = get(&h, "/agents/eng/memory").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["agent_id"], eng().to_string());
    assert_eq!(body["handle"], "eng");

    // Live rows only, newest first; the expired short row and cto's are not there.
    let diary = &body["diary"];
    assert_eq!(diary["total"], 2, "{diary}");
    let items = diary["items"].as_array().unwrap();
    let contents: Vec<&str> = items
        .iter()
        .map(|i| i["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["on call this week", "prefers small PRs"]);
    assert_eq!(items[0]["kind"], "diary_short");
    assert!(items[0]["ttl_until"].is_string());
    assert_eq!(items[1]["kind"], "diary_long");
    assert!(items[1]["ttl_until"].is_null());
    let mut keys: Vec<&str> = items[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["content", "created_at", "id", "kind", "ttl_until"]);

    let episodes = &body["episodes"];
    assert_eq!(episodes["raw"], 3);
    assert_eq!(episodes["compacted"], 0);
    let items = episodes["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["task_id"], "task-2", "newest first");
    assert_eq!(items[0]["kind"], "raw");
    assert_eq!(items[0]["duration_ms"], 30_000);
    assert_eq!(items[0]["review_outcome"], "done");
    assert_eq!(
        items[0]["tool_sequence"],
        serde_json::json!(["read_file", "run_tests"])
    );
    assert_eq!(items[0]["skills_used"], serde_json::json!(["triage"]));
    for key in [
        "id",
        "task_summary",
        "plan_summary",
        "started_at",
        "ended_at",
    ] {
        assert!(!items[0][key].is_null(), "{key}");
    }

    let skills = body["skills"].as_array().unwrap();
    assert_eq!(skills.len(), 1);
    assert_eq!(skills[0]["name"], "triage");
    assert_eq!(skills[0]["version"], 2);
    assert_eq!(skills[0]["versions"], 1);
    assert_eq!(skills[0]["state"], "active");
    assert!(skills[0]["body"].as_str().unwrap().contains("write a test"));

    let profiles = body["profiles"].as_array().unwrap();
    let subjects: Vec<&str> = profiles
        .iter()
        .map(|p| p["subject"].as_str().unwrap())
        .collect();
    assert_eq!(subjects, ["bob", "alice"], "most recently seen first");
    assert_eq!(profiles[0]["platform"], "slack");
    assert_eq!(profiles[0]["traits"]["style"], "terse");
    assert_eq!(profiles[0]["interaction_count"], 1);

    assert_eq!(body["onboarding"]["onboarded"], true);
    assert_eq!(body["onboarding"]["chain_hash"], "chain-abc");
    assert!(body["onboarding"]["onboarded_at"].is_string());
    no_embedding(&body);

    // The agent id names the same seat.
    let (status, by_id) = get(&h, &format!("/agents/{}/memory", eng())).await;
    assert_eq!(status, 200);
    assert_eq!(by_id["handle"], "eng");
    assert_eq!(by_id["diary"]["total"], 2);

    // A seat with nothing remembered: empty sections, not onboarded.
    let (status, ceo) = get(&h, "/agents/ceo/memory").await;
    assert_eq!(status, 200);
    assert_eq!(ceo["diary"]["total"], 0);
    assert_eq!(ceo["diary"]["items"], serde_json::json!([]));
    assert_eq!(ceo["skills"], serde_json::json!([]));
    assert_eq!(
        ceo["onboarding"],
        serde_json::json!({"onboarded": false, "chain_hash": null, "onboarded_at": null})
    );
    h.stop().await;
}

#[tokio::test]
async fn limit_and_offset_page_diary_episodes_and_profiles() {
    let h = harness().await;
    let (status, body) = get(&h, "/agents/eng/memory?limit=1&offset=1").await;
    assert_eq!(status, 200, "{body}");
    let diary = body["diary"]["items"].as_array().unwrap();
    assert_eq!(diary.len(), 1);
    assert_eq!(diary[0]["content"], "prefers small PRs");
    assert_eq!(body["diary"]["total"], 2, "the total is not paged");
    let episodes = body["episodes"]["items"].as_array().unwrap();
    assert_eq!(episodes.len(), 1);
    assert_eq!(episodes[0]["task_id"], "task-1");
    assert_eq!(body["episodes"]["raw"], 3);
    let profiles = body["profiles"].as_array().unwrap();
    assert_eq!(profiles.len(), 1);
    assert_eq!(profiles[0]["subject"], "alice");
    // Skills are not paged.
    assert_eq!(body["skills"].as_array().unwrap().len(), 1);

    let (_, past_the_end) = get(&h, "/agents/eng/memory?offset=50&limit=100").await;
    assert_eq!(past_the_end["diary"]["items"], serde_json::json!([]));
    assert_eq!(past_the_end["episodes"]["items"], serde_json::json!([]));
    h.stop().await;
}

#[tokio::test]
async fn section_answers_only_that_section() {
    let h = harness().await;
    for section in ["diary", "episodes", "skills", "profiles", "onboarding"] {
        let (status, body) = get(&h, &format!("/agents/eng/memory?section={section}")).await;
        assert_eq!(status, 200, "{section}: {body}");
        let mut keys: Vec<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        let mut expected = vec!["agent_id", "handle", section];
        expected.sort_unstable();
        assert_eq!(keys, expected, "{section}");
    }
    let (_, body) = get(&h, "/agents/eng/memory?section=episodes&limit=2").await;
    assert_eq!(body["episodes"]["items"].as_array().unwrap().len(), 2);
    h.stop().await;
}

#[tokio::test]
async fn bad_query_values_are_400_with_a_reason() {
    let h = harness().await;
    for query in [
        "limit=0",
        "limit=abc",
        "limit=101",
        "limit=-1",
        "offset=-1",
        "offset=x",
        "offset=1000001",
        "section=secrets",
    ] {
        let (status, body) = get(&h, &format!("/agents/eng/memory?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"], "bad_request", "{query}");
        assert!(
            body["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "{query}: {body}"
        );
    }
    let (_, body) = get(&h, "/agents/eng/memory?limit=0").await;
    assert!(body["reason"].as_str().unwrap().contains("limit"), "{body}");
    for query in ["limit=1", "limit=100", "offset=0", "offset=1000000"] {
        let (status, body) = get(&h, &format!("/agents/eng/memory?{query}")).await;
        assert_eq!(status, 200, "{query}: {body}");
    }
    h.stop().await;
}

#[tokio::test]
async fn an_unknown_seat_is_404_like_agents_id() {
    let h = harness().await;
    for id in ["nobody", "00000000-0000-0000-0000-000000000000"] {
        let (status, body) = get(&h, &format!("/agents/{id}/memory")).await;
        assert_eq!(status, 404, "{id}");
        assert_eq!(body["error"], "Agent not found");
        let (status, _) = get(&h, &format!("/agents/{id}")).await;
        assert_eq!(status, 404, "{id}");
    }
    h.stop().await;

    // Before any company is active, as `/agents/{id}`.
    let h = Harness::with(Options {
        company: None,
        memory: Some(MemoryStores::in_memory()),
        ..Options::default()
    })
    .await;
    let (status, body) = get(&h, "/agents/eng/memory").await;
    assert_eq!(status, 404, "{body}");
    h.stop().await;
}

#[tokio::test]
async fn without_memory_stores_the_route_is_503_saying_why() {
    let h = Harness::start().await;
    let (status, body) = get(&h, "/agents/eng/memory").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "memory_not_configured");
    assert!(
        body["reason"].as_str().unwrap().contains("engine process"),
        "{body}"
    );
    // An unknown seat is still 404, and a bad query still 400.
    assert_eq!(get(&h, "/agents/nobody/memory").await.0, 404);
    assert_eq!(get(&h, "/agents/eng/memory?limit=0").await.0, 400);
    h.stop().await;
}

#[tokio::test]
async fn memory_is_a_read_behind_read_auth() {
    let h = Harness::with(Options {
        anonymous_read: false,
        memory: Some(filled().await),
        ..Options::default()
    })
    .await;
    let r = h.get("/agents/eng/memory").send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = h.authed(h.get("/agents/eng/memory")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    h.stop().await;
}
