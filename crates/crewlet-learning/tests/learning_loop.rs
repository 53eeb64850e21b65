//! The learning loop over the in-memory twins, a deterministic embedder and
//! a scripted auxiliary model: reflection writes what it should once, opts
//! out and budget exhaustion are honoured, skills are drafted and merged by
//! tool-set similarity, the memory tools keep their limits, and compaction
//! folds old episodes.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewlet_core::payload::ToolExecution;
use crewlet_core::{AgentId, EventType, TraceContext};
use crewlet_learning::{AuxModel, Learning, LearningParts, LearningSettings};
use crewlet_llm::{MemoryEmbedder, Phase, Usage};
use crewlet_memory::{DiaryKind, EpisodeFilter, MemoryStores, Page, SkillState};
use crewlet_store::{BudgetRefusal, BudgetType};
use crewlet_turn::{
    AuxCall, FailureReason, MemoryEventSink, MemorySection, PhaseRecord, Plan, PlanDecision,
    PlanStep, Recall, RecallRequest, Review, ReviewDecision, SeatProfile, ToolContext, Trigger,
    TurnDecision, TurnError, TurnFailure, TurnOutcome,
};
use parking_lot::Mutex;
use serde_json::json;
use uuid::Uuid;

/// Answers by worker; records every call.
#[derive(Default)]
struct ScriptedAux {
    answers: Mutex<Vec<(String, String)>>,
    calls: Mutex<Vec<(String, String)>>,
}

impl ScriptedAux {
    fn answer(&self, worker: &str, text: &str) {
        self.answers
            .lock()
            .push((worker.to_owned(), text.to_owned()));
    }

    fn calls_of(&self, worker: &str) -> Vec<String> {
        self.calls
            .lock()
            .iter()
            .filter(|(w, _)| w == worker)
            .map(|(_, u)| u.clone())
            .collect()
    }
}

#[async_trait]
impl AuxModel for ScriptedAux {
    async fn complete(&self, call: AuxCall<'_>) -> Result<String, TurnError> {
        self.calls
            .lock()
            .push((call.worker.to_owned(), call.user.clone()));
        let answers = self.answers.lock();
        answers
            .iter()
            .rev()
            .find(|(w, _)| w == call.worker)
            .map(|(_, a)| a.clone())
            .ok_or(TurnError::Llm(crewlet_llm::LlmError::NoProviders))
    }
}

struct Rig {
    learning: Arc<Learning>,
    aux: Arc<ScriptedAux>,
    sink: Arc<MemoryEventSink>,
    stores: MemoryStores,
    seat: SeatProfile,
}

fn rig(settings: LearningSettings) -> Rig {
    let stores = MemoryStores::in_memory();
    let aux = Arc::new(ScriptedAux::default());
    let sink = Arc::new(MemoryEventSink::new());
    let learning = Arc::new(Learning::new(LearningParts {
        stores: stores.clone(),
        embedder: Arc::new(MemoryEmbedder::new(384)),
        aux: aux.clone(),
        sink: sink.clone(),
        settings,
        company: "Acme".into(),
        source: "test".into(),
    }));
    let mut seat = SeatProfile::new("Acme", "eng", "Engineer");
    seat.unit_path = vec!["Engineering".into()];
    learning.register_seat(&seat, true);
    Rig {
        learning,
        aux,
        sink,
        stores,
        seat,
    }
}

fn trigger(task: &str, content: &str) -> Trigger {
    let mut t = Trigger::new(task, "slack", content);
    t.sender = Some("U42".into());
    t
}

fn outcome(decision: TurnDecision, tools: &[&str]) -> TurnOutcome {
    TurnOutcome {
        turn_id: Uuid::now_v7(),
        task_id: "task-1".into(),
        decision,
        failure: None,
        iterations: 1,
        models: vec!["m".into()],
        usage: Usage::default(),
        phases: vec![PhaseRecord {
            phase: Phase::Execute,
            iteration: 1,
            provider: "p".into(),
            model: "m".into(),
            models: vec!["m".into()],
            usage: Usage::default(),
            calls: 1,
            duration: Duration::from_millis(5),
            tool_executions: tools
                .iter()
                .map(|t| ToolExecution {
                    name: (*t).to_owned(),
                    ok: true,
                    duration_ms: 1,
                })
                .collect(),
            ok: true,
        }],
        plan: Some(Plan {
            decision: PlanDecision::Plan,
            reasoning: "ship the fix".into(),
            steps: vec![PlanStep {
                intent: "open a merge request".into(),
                approach: String::new(),
                tools: Vec::new(),
                on_failure: String::new(),
            }],
            tools_needed: Vec::new(),
            success_criteria: Vec::new(),
        }),
        review: Some(Review {
            decision: ReviewDecision::Done,
            notes: "fine".into(),
            completed_work: "opened the merge request".into(),
            final_artifact: "MR !12".into(),
        }),
        final_artifact: "MR !12".into(),
        duration: Duration::from_millis(50),
    }
}

fn ctx(seat: &SeatProfile, turn_id: Uuid) -> ToolContext {
    ToolContext {
        agent_id: seat.agent_id,
        agent_handle: seat.handle.clone(),
        role_name: seat.role_name.clone(),
        task_id: "task-1".into(),
        turn_id,
        phase: Phase::Execute,
        iteration: 1,
        delegation_depth: 0,
        delegation_chain: Vec::new(),
        trace: TraceContext::new_root(),
    }
}

async fn diary(r: &Rig) -> Vec<crewlet_memory::DiaryEntry> {
    r.stores
        .diary
        .recent(&r.seat.agent_id, Page::first(100), chrono::Utc::now())
        .await
        .unwrap_or_default()
}

fn tool(r: &Rig, name: &str) -> Arc<dyn crewlet_turn::Tool> {
    r.learning
        .tools()
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no tool {name}"))
}

#[tokio::test]
async fn the_same_turn_reflected_twice_writes_once() {
    let r = rig(LearningSettings::default());
    r.aux.answer(
        "persist_decider",
        r#"{"tier":"LONG","content":"Ada prefers merge requests under 200 lines."}"#,
    );
    r.aux.answer(
        "counterparty_profiler",
        r#"{"summary":"Asks for small MRs","traits":{"style":"terse"}}"#,
    );
    let t = trigger("task-1", "Ada asks for a fix to the login bug");
    let o = outcome(TurnDecision::Done, &["gitlab__create_mr"]);
    let first = r.learning.reflect(&r.seat, &t, &o).await;
    assert!(
        first.skipped.is_none() && first.episode_recorded,
        "{first:?}"
    );
    let again = r.learning.reflect(&r.seat, &t, &o).await;
    assert_eq!(again.skipped, Some("already reflected"));

    // A second engine (no in-process memory of the turn) finds the episode.
    let other = Learning::new(LearningParts {
        stores: r.stores.clone(),
        embedder: Arc::new(MemoryEmbedder::new(384)),
        aux: r.aux.clone(),
        sink: r.sink.clone(),
        settings: LearningSettings::default(),
        company: "Acme".into(),
        source: "test".into(),
    });
    other.register_seat(&r.seat, true);
    let third = other.reflect(&r.seat, &t, &o).await;
    assert_eq!(third.skipped, Some("already reflected"));

    assert_eq!(diary(&r).await.len(), 1);
    assert_eq!(
        r.stores
            .episodes
            .counts("eng")
            .await
            .map(|c| c.raw)
            .unwrap_or(0),
        1
    );
    assert_eq!(r.aux.calls_of("persist_decider").len(), 1);
    let profile = r
        .stores
        .profiles
        .get("eng", "U42", "slack")
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no profile"));
    assert_eq!(profile.interaction_count, 1);
    assert_eq!(profile.traits["style"], "terse");
    assert_eq!(r.sink.of_type(&EventType::DiaryWritten).len(), 1);
    assert_eq!(r.sink.of_type(&EventType::EpisodeRecorded).len(), 1);
    assert_eq!(r.sink.of_type(&EventType::ProfileUpdated).len(), 1);
}

#[tokio::test]
async fn opted_out_seats_skipped_turns_and_exhausted_budgets_learn_nothing() {
    let r = rig(LearningSettings::default());
    r.aux
        .answer("persist_decider", r#"{"tier":"LONG","content":"x is y"}"#);
    let t = trigger("task-1", "something");

    let skipped = r
        .learning
        .reflect(&r.seat, &t, &outcome(TurnDecision::Skip, &[]))
        .await;
    assert_eq!(skipped.skipped, Some("the turn was skipped"));

    let mut broke = outcome(TurnDecision::Failed, &[]);
    broke.failure = Some(TurnFailure {
        reason: FailureReason::BudgetExhausted(BudgetRefusal {
            budget_type: BudgetType::Agent,
            used_tokens: 10,
            max_tokens: 10,
            reserved_tokens: 0,
            unit: None,
        }),
        detail: "out of tokens".into(),
    });
    let out = r.learning.reflect(&r.seat, &t, &broke).await;
    assert_eq!(out.skipped, Some("the seat's budget is exhausted"));

    r.learning.register_seat(&r.seat, false);
    let off = r
        .learning
        .reflect(&r.seat, &t, &outcome(TurnDecision::Done, &[]))
        .await;
    assert_eq!(off.skipped, Some("the role opted out of learning"));
    let sections = r
        .learning
        .prefetch(RecallRequest {
            seat: &r.seat,
            trigger: &t,
            turn_id: Uuid::now_v7(),
            trace: TraceContext::new_root(),
        })
        .await;
    assert!(sections.is_empty());
    assert!(
        r.aux.calls.lock().is_empty(),
        "no model call for a seat that does not learn"
    );
    assert_eq!(
        r.stores
            .episodes
            .counts("eng")
            .await
            .map(|c| c.raw)
            .unwrap_or(9),
        0
    );
}

#[tokio::test]
async fn a_failed_turn_is_reflected_and_the_decider_is_skipped_after_reflect_and_persist() {
    let r = rig(LearningSettings::default());
    r.aux.answer(
        "persist_decider",
        r#"{"tier":"SHORT","content":"The staging cluster is down until Friday.","ttl_days":3}"#,
    );
    let t = trigger("task-1", "deploy to staging");
    let mut failed = outcome(TurnDecision::Failed, &["deploy"]);
    failed.failure = Some(TurnFailure {
        reason: FailureReason::Guard(crewlet_turn::GuardKind::Stall),
        detail: "stalled".into(),
    });
    r.learning.reflect(&r.seat, &t, &failed).await;
    let rows = diary(&r).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].kind, DiaryKind::Short);
    let ttl = rows[0].ttl_until.unwrap_or_else(chrono::Utc::now) - chrono::Utc::now();
    assert!(ttl > chrono::Duration::days(2) && ttl <= chrono::Duration::days(3));
    let ep = r
        .stores
        .episodes
        .recent("eng", EpisodeFilter::default(), Page::first(5))
        .await
        .unwrap_or_default();
    assert_eq!(ep[0].review_outcome.as_deref(), Some("failed"));

    // A turn that persisted in flight does not run the decider.
    let o = outcome(TurnDecision::Done, &["reflect_and_persist"]);
    let out = tool(&r, "reflect_and_persist")
        .invoke(
            &ctx(&r.seat, o.turn_id),
            json!({"content": "Bob owns the billing service."}),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.content, "Saved to your memory.");
    let again = tool(&r, "reflect_and_persist")
        .invoke(
            &ctx(&r.seat, o.turn_id),
            json!({"content": "Bob owns the billing service."}),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        again.content.contains("already remember"),
        "{}",
        again.content
    );
    let before = r.aux.calls_of("persist_decider").len();
    r.learning.reflect(&r.seat, &t, &o).await;
    assert_eq!(r.aux.calls_of("persist_decider").len(), before);
    assert_eq!(diary(&r).await.len(), 2);
}

#[tokio::test]
async fn skills_are_drafted_from_long_done_turns_and_merged_by_tool_set() {
    let r = rig(LearningSettings::default());
    r.aux.answer("persist_decider", "NOOP");
    r.aux.answer(
        "skill_synthesizer",
        &json!({"name": "Ship a Hotfix", "description": "When a production bug needs a fix fast.",
                "body": "## When to use\nProduction bugs.\n## Steps\n1. branch\n2. fix\n3. MR"})
        .to_string(),
    );
    let t = trigger("task-1", "hotfix the login bug");
    let five = [
        "git__branch",
        "git__commit",
        "git__push",
        "gitlab__create_mr",
        "chat__post",
    ];
    // Four tool calls are not enough.
    r.learning
        .reflect(&r.seat, &t, &outcome(TurnDecision::Done, &five[..4]))
        .await;
    assert!(r.aux.calls_of("skill_synthesizer").is_empty());
    // Five are; the name is normalised.
    r.learning
        .reflect(&r.seat, &t, &outcome(TurnDecision::Done, &five))
        .await;
    let skills = r.stores.skills.list("eng", &[]).await.unwrap_or_default();
    assert_eq!(skills.len(), 1);
    assert_eq!(skills[0].name, "ship-a-hotfix");
    assert_eq!(skills[0].state, SkillState::Active);
    // A similar tool set (Jaccard 5/6 >= 0.7) refines it instead.
    let similar = [
        "git__branch",
        "git__commit",
        "git__push",
        "gitlab__create_mr",
        "chat__post",
        "ci__status",
    ];
    r.learning
        .reflect(&r.seat, &t, &outcome(TurnDecision::Done, &similar))
        .await;
    let skills = r.stores.skills.list("eng", &[]).await.unwrap_or_default();
    assert_eq!(skills.len(), 1);
    assert_eq!(skills[0].version, 2);
    assert!(skills[0].body.contains("Observed in practice"));
    assert_eq!(r.aux.calls_of("skill_synthesizer").len(), 1);
    // A direct turn never drafts.
    r.learning
        .reflect(
            &r.seat,
            &t,
            &outcome(TurnDecision::Direct, &["a", "b", "c", "d", "e"]),
        )
        .await;
    assert_eq!(r.aux.calls_of("skill_synthesizer").len(), 1);

    // use_skill counts the use and the refiner learns from the turn.
    let o = outcome(TurnDecision::Failed, &["git__push"]);
    let body = tool(&r, "use_skill")
        .invoke(&ctx(&r.seat, o.turn_id), json!({"name": "ship-a-hotfix"}))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(body.content.contains("## Steps"), "{}", body.content);
    r.aux
        .answer("skill_refiner", "Run the tests before pushing.");
    r.learning.reflect(&r.seat, &t, &o).await;
    let skill = r
        .stores
        .skills
        .get("eng", "ship-a-hotfix")
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("skill gone"));
    assert_eq!(skill.use_count, 1);
    assert!(
        skill
            .body
            .contains("Counter-example: Run the tests before pushing."),
        "{}",
        skill.body
    );
    let episode = r
        .stores
        .episodes
        .recent("eng", EpisodeFilter::default(), Page::first(1))
        .await
        .unwrap_or_default();
    assert_eq!(episode[0].skills_used, vec!["ship-a-hotfix".to_owned()]);
    assert!(r.sink.of_type(&EventType::SkillSynthesized).len() == 1);
    assert!(r.sink.of_type(&EventType::SkillRefined).len() >= 2);

    // refine_skill: replace the body, the old one is a version.
    let out = tool(&r, "refine_skill")
        .invoke(
            &ctx(&r.seat, Uuid::now_v7()),
            json!({"name": "ship-a-hotfix", "action": "replace_body", "content": "## Steps\n1. test\n2. ship"}),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.content.contains("version 4"), "{}", out.content);
    let versions = r
        .stores
        .skills
        .versions("eng", "ship-a-hotfix")
        .await
        .unwrap_or_default();
    assert_eq!(versions.len(), 3);
    assert!(
        tool(&r, "refine_skill")
            .invoke(
                &ctx(&r.seat, Uuid::now_v7()),
                json!({"name": "nope", "action": "append", "content": "x"})
            )
            .await
            .is_err()
    );
}

#[tokio::test]
async fn the_plan_prefetch_renders_memory_people_work_skills_and_onboarding() {
    let r = rig(LearningSettings::default());
    // Some history: a diary row, an episode, a skill, a profile.
    r.aux.answer(
        "persist_decider",
        r#"{"tier":"LONG","content":"The deploy window is Tuesday."}"#,
    );
    r.aux.answer(
        "counterparty_profiler",
        r#"{"display_name":"Ada","summary":"Release manager.","traits":{"prefers":"digests"}}"#,
    );
    r.aux.answer(
        "skill_synthesizer",
        &json!({"name": "release", "description": "Cutting a release.", "body": "## Steps\n1. tag"}).to_string(),
    );
    let t = trigger("task-1", "cut the 2.4 release of billing");
    r.learning
        .reflect(
            &r.seat,
            &t,
            &outcome(TurnDecision::Done, &["a", "b", "c", "d", "e"]),
        )
        .await;

    r.aux.answer("memory_filter", "[0]");
    r.aux
        .answer("episode_summarizer", "- You cut 2.3 last week; tag first.");
    let turn_id = Uuid::now_v7();
    let t2 = trigger("task-2", "when can billing 2.4 be deployed?");
    let sections = r
        .learning
        .prefetch(RecallRequest {
            seat: &r.seat,
            trigger: &t2,
            turn_id,
            trace: TraceContext::new_root(),
        })
        .await;
    let headings: Vec<&str> = sections.iter().map(|s| s.heading.as_str()).collect();
    assert_eq!(
        headings,
        [
            "## Personal memory",
            "## People in this conversation",
            "## Similar prior work",
            "## Synthesized skills you've learned",
            "## First-turn onboarding"
        ]
    );
    let body = |h: &str| -> String {
        sections
            .iter()
            .find(|s: &&MemorySection| s.heading == h)
            .map(|s| s.body.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        body("## Personal memory"),
        "- The deploy window is Tuesday."
    );
    assert!(body("## People in this conversation").contains("Ada"));
    assert!(body("## Similar prior work").contains("tag first"));
    assert!(body("## Synthesized skills you've learned").contains("- release: Cutting a release."));
    let filter_prompt = r.aux.calls_of("memory_filter").pop().unwrap_or_default();
    assert!(
        filter_prompt.contains("Current sender: U42"),
        "{filter_prompt}"
    );
    assert!(filter_prompt.contains("when can billing 2.4 be deployed?"));

    // mark_onboarded closes onboarding for this place in the org...
    tool(&r, "mark_onboarded")
        .invoke(&ctx(&r.seat, turn_id), json!({}))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let again = r
        .learning
        .prefetch(RecallRequest {
            seat: &r.seat,
            trigger: &t2,
            turn_id: Uuid::now_v7(),
            trace: TraceContext::new_root(),
        })
        .await;
    assert!(
        again
            .iter()
            .all(|s| s.heading != "## First-turn onboarding")
    );
    // ...and a move to another unit opens it again.
    let mut moved = r.seat.clone();
    moved.unit_path = vec!["Platform".into()];
    r.learning.register_seat(&moved, true);
    let after_move = r
        .learning
        .prefetch(RecallRequest {
            seat: &moved,
            trigger: &t2,
            turn_id: Uuid::now_v7(),
            trace: TraceContext::new_root(),
        })
        .await;
    assert!(
        after_move
            .iter()
            .any(|s| s.heading == "## First-turn onboarding")
    );

    // The filter choosing nothing leaves a hint; a failing filter, nothing.
    r.aux.answer("memory_filter", "[]");
    let hint = r
        .learning
        .prefetch(RecallRequest {
            seat: &r.seat,
            trigger: &t2,
            turn_id: Uuid::now_v7(),
            trace: TraceContext::new_root(),
        })
        .await;
    assert!(
        hint.iter()
            .any(|s| s.heading == "## Personal memory" && s.body.contains("refresh_memory"))
    );
    assert_eq!(r.sink.of_type(&EventType::MemoryPrefetched).len(), 4);
}

#[tokio::test]
async fn refresh_memory_and_query_episodes_keep_their_limits() {
    let r = rig(LearningSettings::default());
    let _ = AgentId::for_seat("Acme", "eng");
    r.aux.answer(
        "persist_decider",
        r#"{"tier":"LONG","content":"Payments run on Postgres 16."}"#,
    );
    let t = trigger("task-1", "payments database upgrade");
    r.learning
        .reflect(&r.seat, &t, &outcome(TurnDecision::Done, &["db__query"]))
        .await;
    r.aux.answer("memory_filter", "[0]");
    let turn = Uuid::now_v7();
    let refresh = tool(&r, "refresh_memory");
    let first = refresh
        .invoke(
            &ctx(&r.seat, turn),
            json!({"context_hint": "the payments database"}),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first.content, "- Payments run on Postgres 16.");
    // The same hint is answered from the turn's cache.
    let calls = r.aux.calls_of("memory_filter").len();
    let cached = refresh
        .invoke(
            &ctx(&r.seat, turn),
            json!({"context_hint": "The payments database"}),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cached.content, first.content);
    assert_eq!(r.aux.calls_of("memory_filter").len(), calls);
    for hint in ["two", "three"] {
        refresh
            .invoke(&ctx(&r.seat, turn), json!({"context_hint": hint}))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let fourth = refresh
        .invoke(&ctx(&r.seat, turn), json!({"context_hint": "four"}))
        .await;
    assert!(fourth.is_err(), "a fourth distinct hint is refused");
    assert!(
        refresh
            .invoke(&ctx(&r.seat, turn), json!({}))
            .await
            .is_err()
    );

    let q = tool(&r, "query_episodes");
    let out = q
        .invoke(
            &ctx(&r.seat, turn),
            json!({"query": "payments database upgrade", "limit": 50}),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let v: serde_json::Value = serde_json::from_str(&out.content).unwrap_or_default();
    assert_eq!(v["episodes"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["episodes"][0]["outcome"], "done");
    let none = q
        .invoke(
            &ctx(&r.seat, turn),
            json!({"query": "payments", "outcome": "failed"}),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(none.content.contains("\"episodes\":[]"), "{}", none.content);
    assert!(
        q.invoke(&ctx(&r.seat, turn), json!({"query": "x", "limit": "many"}))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn old_raw_episodes_are_compacted_and_expired_diary_rows_deleted() {
    let settings = LearningSettings {
        compaction_threshold: 10,
        compaction_batch: 4,
        persist_decider: false,
        counterparty: false,
        ..LearningSettings::default()
    };
    let r = rig(settings);
    let t = trigger("task-1", "routine check");
    for _ in 0..13 {
        r.learning
            .reflect(&r.seat, &t, &outcome(TurnDecision::Done, &["check"]))
            .await;
    }
    assert_eq!(
        r.stores
            .episodes
            .counts("eng")
            .await
            .map(|c| c.raw)
            .unwrap_or(0),
        13
    );
    r.aux
        .answer("episode_compactor", "Routine checks, all fine.");
    let (_, compacted) = r.learning.maintain().await;
    let counts = r.stores.episodes.counts("eng").await.unwrap_or_default();
    assert!(counts.raw <= 10, "{counts:?}");
    assert_eq!(counts.raw + compacted, 13);
    assert!(counts.compacted >= 1);
    let compacted_rows = r
        .stores
        .episodes
        .recent(
            "eng",
            EpisodeFilter {
                outcome: None,
                kind: Some(crewlet_memory::EpisodeKind::Compacted),
            },
            Page::first(5),
        )
        .await
        .unwrap_or_default();
    assert!(compacted_rows[0].plan_summary.contains("Routine checks"));
    // A second tick has nothing left to do.
    assert_eq!(r.learning.maintain().await.1, 0);

    // Expired short rows: hidden at read, deleted by maintenance.
    let past = chrono::Utc::now() - chrono::Duration::days(1);
    r.stores
        .diary
        .write(
            crewlet_memory::NewDiaryEntry {
                agent_id: r.seat.agent_id,
                kind: DiaryKind::Short,
                content: "the freeze ended yesterday".into(),
                ttl_until: Some(past),
                embedding: None,
            },
            past - chrono::Duration::days(2),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(diary(&r).await.is_empty());
    assert_eq!(r.learning.maintain().await.0, 1);
}
