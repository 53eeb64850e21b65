//! The tool loop over an effect journal: recording, resuming without
//! asking or running again, unknown effects, fencing, divergence, replay.

use std::collections::VecDeque;
use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crewlet_core::{AgentId, TraceContext};
use crewlet_llm::{LlmError, ScriptedProvider, ToolCall};
use crewlet_store::{
    EffectJournal, LeaseClaim, LeaseStore, MemoryEffectJournal, MemoryLeases, MemoryTokenLedger,
};
use serde_json::json;
use uuid::Uuid;

use super::*;
use crate::journal::{JournalMode, StepObserver, StepSource, StepView, TurnJournal};
use crate::{BudgetLimits, ToolAnnotations, ToolError, ToolOutput, UsageTracker, Visibility};

/// Posts a comment somewhere: not idempotent, counts its calls.
struct Post {
    calls: Arc<AtomicUsize>,
    idempotent: bool,
}

#[async_trait]
impl Tool for Post {
    fn name(&self) -> &str {
        "post"
    }
    fn description(&self) -> &str {
        "Posts a comment."
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations {
            idempotent: self.idempotent,
            ..ToolAnnotations::default()
        }
    }
    async fn invoke(&self, _: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(ToolOutput::text(format!("posted #{n}: {args}")))
    }
}

/// A provider answering from a list, counting the calls it gets.
fn answers(list: Vec<Completion>, asked: Arc<AtomicUsize>) -> ScriptedProvider {
    let queue = StdMutex::new(VecDeque::from(list));
    ScriptedProvider::new("s", "m", move |_| {
        asked.fetch_add(1, Ordering::SeqCst);
        queue
            .lock()
            .ok()
            .and_then(|mut q| q.pop_front())
            .ok_or(LlmError::ScriptExhausted {
                provider: "s".into(),
            })
    })
}

fn post(body: &str) -> Completion {
    Completion {
        tool_calls: vec![ToolCall {
            id: "c0".into(),
            name: "post".into(),
            arguments: json!({"body": body}).to_string(),
        }],
        usage: Usage {
            input_tokens: 10,
            output_tokens: 2,
            cache_read_tokens: 0,
        },
        model: "m".into(),
        ..Completion::default()
    }
}

fn done(t: &str) -> Completion {
    Completion {
        content: t.into(),
        usage: Usage {
            input_tokens: 20,
            output_tokens: 3,
            cache_read_tokens: 0,
        },
        model: "m".into(),
        ..Completion::default()
    }
}

fn request() -> LoopRequest {
    LoopRequest {
        meta: super::MetaTools::NONE,
        system: vec![SystemBlock::stable("s")],
        messages: vec![Message::user("go")],
        tools: ToolSelection::All,
        slim_tools: false,
        terminators: Vec::new(),
        tool_choice: ToolChoice::Auto,
        round_cap: 8,
        grace_round: false,
        require_first_call: false,
    }
}

#[derive(Default)]
struct Seen {
    notices: StdMutex<Vec<LoopNotice>>,
    steps: StdMutex<Vec<StepView>>,
}

#[async_trait]
impl ProgressObserver for Seen {
    async fn progress(&self, _: &str, _: &[ToolExecution]) {}
    async fn notice(&self, notice: LoopNotice) {
        if let Ok(mut n) = self.notices.lock() {
            n.push(notice);
        }
    }
}

impl StepObserver for Seen {
    fn step(&self, step: &StepView) {
        if let Ok(mut s) = self.steps.lock() {
            s.push(step.clone());
        }
    }
}

struct Rig {
    leases: Arc<MemoryLeases>,
    store: Arc<MemoryEffectJournal>,
    posts: Arc<AtomicUsize>,
    ledger: MemoryTokenLedger,
    tracker: UsageTracker,
}

impl Rig {
    fn new() -> Self {
        let leases = Arc::new(MemoryLeases::new());
        Self {
            store: Arc::new(MemoryEffectJournal::new(leases.clone())),
            leases,
            posts: Arc::new(AtomicUsize::new(0)),
            ledger: MemoryTokenLedger::new(),
            tracker: UsageTracker::new(),
        }
    }

    async fn fence(&self, owner: &str) -> crewlet_store::Fence {
        match self
            .leases
            .acquire(
                &[LeaseClaim::new("seat:a", "n")],
                owner,
                std::time::Duration::from_secs(60),
            )
            .await
        {
            Ok(won) if !won.is_empty() => won[0].fence(),
            other => panic!("no lease: {other:?}"),
        }
    }

    async fn journal(&self, mode: JournalMode, fence: Option<crewlet_store::Fence>) -> TurnJournal {
        match TurnJournal::open(self.store.clone(), "task-1", "t-1", "a", "n:1", fence, mode).await
        {
            Ok(j) => j,
            Err(e) => panic!("open: {e}"),
        }
    }

    async fn run(
        &self,
        provider: &ScriptedProvider,
        journal: &TurnJournal,
        idempotent: bool,
        seen: &Seen,
    ) -> (Result<LoopOutcome, TurnError>, LoopStats) {
        let tool = Arc::new(Post {
            calls: self.posts.clone(),
            idempotent,
        });
        self.run_with(provider, journal, tool, seen).await
    }

    async fn run_with(
        &self,
        provider: &ScriptedProvider,
        journal: &TurnJournal,
        tool: Arc<dyn Tool>,
        seen: &Seen,
    ) -> (Result<LoopOutcome, TurnError>, LoopStats) {
        let registry = ToolRegistry::new();
        let _ = registry.register(tool, Visibility::All);
        let agent_id = AgentId::for_seat("T", "a");
        let ctx = ToolContext {
            agent_id,
            agent_handle: "a".into(),
            role_name: "A".into(),
            task_id: "task-1".into(),
            turn_id: Uuid::now_v7(),
            phase: crewlet_llm::Phase::Execute,
            iteration: 1,
            delegation_depth: 0,
            delegation_chain: Vec::new(),
            trace: TraceContext::new_root(),
        };
        let limits = BudgetLimits::default();
        let env = LoopEnv {
            provider,
            registry: &registry,
            skills: None,
            ctx: &ctx,
            budget: BudgetGate {
                ledger: &self.ledger,
                tracker: &self.tracker,
                agent_id,
                agent_handle: "a",
                limits: &limits,
                turn_usage: None,
                warnings: None,
                patience: crewlet_store::Patience::at_most(std::time::Duration::ZERO),
            },
            progress: Some(seen),
            stream: false,
            journal: Some(journal),
        };
        let mut stats = LoopStats::default();
        let out = run_tool_loop(&env, request(), &mut stats).await;
        (out, stats)
    }

    async fn kinds(&self) -> Vec<(i32, String)> {
        match self.store.load("task-1").await {
            Ok(entries) => entries.into_iter().map(|e| (e.step, e.kind)).collect(),
            Err(e) => panic!("load: {e}"),
        }
    }
}

fn last_tool_message(o: &LoopOutcome) -> String {
    o.messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn every_answer_and_tool_call_is_recorded_in_step_order() {
    let rig = Rig::new();
    let fence = rig.fence("n:1").await;
    let journal = rig.journal(JournalMode::Record, Some(fence)).await;
    let asked = Arc::new(AtomicUsize::new(0));
    let provider = answers(vec![post("hi"), done("ok")], asked.clone());
    let (out, _) = rig.run(&provider, &journal, false, &Seen::default()).await;
    assert!(out.is_ok(), "{out:?}");
    assert_eq!(
        rig.kinds().await,
        vec![
            (0, "model".to_owned()),
            (1, "tool_started".to_owned()),
            (1, "tool_result".to_owned()),
            (2, "model".to_owned()),
        ]
    );
    assert_eq!(rig.posts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_resumed_loop_asks_and_runs_nothing_it_already_has() {
    let rig = Rig::new();
    let fence = rig.fence("n:1").await;
    // The first run got as far as the tool's result, then "crashed" (its
    // provider had nothing more to say).
    let first = rig.journal(JournalMode::Record, Some(fence)).await;
    let asked = Arc::new(AtomicUsize::new(0));
    let provider = answers(vec![post("hi")], asked.clone());
    let (out, _) = rig.run(&provider, &first, false, &Seen::default()).await;
    assert!(out.is_err());
    assert_eq!(rig.posts.load(Ordering::SeqCst), 1);
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    let used_before = rig.ledger_total().await;

    // The next holder resumes: the answer and the result are read back.
    let fence = rig.fence("n:1").await;
    let second = rig.journal(JournalMode::Record, Some(fence)).await;
    let asked = Arc::new(AtomicUsize::new(0));
    let provider = answers(vec![done("finished")], asked.clone());
    let (out, stats) = rig.run(&provider, &second, false, &Seen::default()).await;
    let Ok(out) = out else { panic!("{out:?}") };
    assert_eq!(out.text, "finished");
    assert_eq!(
        asked.load(Ordering::SeqCst),
        1,
        "only the new step is asked"
    );
    assert_eq!(
        rig.posts.load(Ordering::SeqCst),
        1,
        "the comment posted once"
    );
    assert!(last_tool_message(&out).starts_with("posted #1"));
    let j = second.stats();
    assert_eq!((j.models_reused, j.tools_reused), (1, 1));
    // The recorded answer's tokens count in the turn, not in the budget.
    assert_eq!(stats.usage.input_tokens, 30);
    assert_eq!(rig.ledger_total().await - used_before, 23);
}

#[tokio::test]
async fn a_started_call_without_a_result_is_not_run_again_unless_idempotent() {
    for idempotent in [false, true] {
        let rig = Rig::new();
        let fence = rig.fence("n:1").await;
        let store: &dyn EffectJournal = rig.store.as_ref();
        let model = serde_json::to_value(post("hi")).unwrap_or_default();
        for (step, kind, payload) in [
            (0, "model", model),
            (
                1,
                "tool_started",
                json!({"call_id": "c0", "name": "post", "arguments": {"body": "hi"}}),
            ),
        ] {
            let entry = crewlet_store::NewJournalEntry {
                task_key: "task-1".into(),
                task_id: "t-1".into(),
                step,
                kind: kind.into(),
                seat: "a".into(),
                turn_id: Uuid::nil(),
                node: "old:1".into(),
                payload,
            };
            assert!(store.append(&entry, None).await.is_ok());
        }
        let journal = rig.journal(JournalMode::Record, Some(fence)).await;
        let asked = Arc::new(AtomicUsize::new(0));
        let provider = answers(vec![done("ok")], asked.clone());
        let seen = Seen::default();
        let (out, _) = rig.run(&provider, &journal, idempotent, &seen).await;
        let Ok(out) = out else { panic!("{out:?}") };
        let notices = seen.notices.lock().map(|n| n.clone()).unwrap_or_default();
        if idempotent {
            assert_eq!(rig.posts.load(Ordering::SeqCst), 1, "idempotent: run again");
            assert!(notices.is_empty());
        } else {
            assert_eq!(rig.posts.load(Ordering::SeqCst), 0, "not run again");
            assert!(last_tool_message(&out).contains("effect uncertain"));
            assert_eq!(
                notices,
                vec![LoopNotice::EffectUncertain {
                    tool: "post".into(),
                    step: 1
                }]
            );
            // Recorded, so a second interruption does not ask again.
            assert!(rig.kinds().await.contains(&(1, "tool_result".to_owned())));
        }
    }
}

#[tokio::test]
async fn a_holder_that_lost_the_seat_runs_no_tool() {
    let rig = Rig::new();
    let fence = rig.fence("n:1").await;
    let journal = rig.journal(JournalMode::Record, Some(fence)).await;
    // Another node takes the seat (here: the lease is released and taken).
    assert!(rig.leases.release(&["seat:a".into()], "n:1").await.is_ok());
    rig.fence("n:2").await;
    let asked = Arc::new(AtomicUsize::new(0));
    let provider = answers(vec![post("hi"), done("ok")], asked.clone());
    let (out, _) = rig.run(&provider, &journal, false, &Seen::default()).await;
    assert!(matches!(out, Err(TurnError::Fenced)), "{out:?}");
    assert_eq!(rig.posts.load(Ordering::SeqCst), 0);
    assert!(rig.kinds().await.is_empty());
}

#[tokio::test]
async fn a_turn_that_takes_another_path_drops_the_journals_rest() {
    let rig = Rig::new();
    let fence = rig.fence("n:1").await;
    // The journal says: the model asked to post `other`, but the call that
    // started at step 1 posted `hi` (as if the tools had changed since).
    let other = serde_json::to_value(post("other")).unwrap_or_default();
    for (step, kind, payload) in [
        (0, "model", other),
        (
            1,
            "tool_started",
            json!({"call_id": "c0", "name": "post", "arguments": {"body": "hi"}}),
        ),
        (
            1,
            "tool_result",
            json!({"call_id": "c0", "name": "post", "content": "posted", "is_error": false}),
        ),
        (
            2,
            "model",
            serde_json::to_value(done("stale")).unwrap_or_default(),
        ),
    ] {
        let entry = crewlet_store::NewJournalEntry {
            task_key: "task-1".into(),
            task_id: "t-1".into(),
            step,
            kind: kind.into(),
            seat: "a".into(),
            turn_id: Uuid::nil(),
            node: "old:1".into(),
            payload,
        };
        assert!(rig.store.append(&entry, None).await.is_ok());
    }
    let journal = rig.journal(JournalMode::Record, Some(fence)).await;
    let asked = Arc::new(AtomicUsize::new(0));
    let provider = answers(vec![done("again")], asked.clone());
    let (out, _) = rig.run(&provider, &journal, false, &Seen::default()).await;
    let Ok(out) = out else { panic!("{out:?}") };
    assert_eq!(
        out.text, "again",
        "the stale answer after the fork is not used"
    );
    assert_eq!(journal.stats().diverged_at, Some(1));
    assert_eq!(
        rig.posts.load(Ordering::SeqCst),
        1,
        "the call of `other` ran"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let entries = rig.store.load("task-1").await.unwrap_or_default();
    assert_eq!(entries.len(), 4, "{entries:?}");
    assert_eq!(entries[1].payload["arguments"]["body"], "other");
    assert_eq!(entries[3].payload["content"], "again");
}

#[tokio::test]
async fn a_replay_reads_every_step_back_and_runs_nothing() {
    let rig = Rig::new();
    let fence = rig.fence("n:1").await;
    let first = rig.journal(JournalMode::Record, Some(fence)).await;
    let provider = answers(vec![post("hi"), done("ok")], Arc::new(AtomicUsize::new(0)));
    let Ok(original) = rig.run(&provider, &first, false, &Seen::default()).await.0 else {
        panic!("the first run failed")
    };

    let replay = rig
        .journal(
            JournalMode::Replay {
                live_from: None,
                live_tools: false,
            },
            None,
        )
        .await;
    let seen = Arc::new(Seen::default());
    let replay = replay.with_observer(seen.clone());
    let asked = Arc::new(AtomicUsize::new(0));
    let provider = answers(Vec::new(), asked.clone());
    let (out, _) = rig.run(&provider, &replay, false, &seen).await;
    let Ok(out) = out else { panic!("{out:?}") };
    assert_eq!(out.messages, original.messages, "the replay is the turn");
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    assert_eq!(rig.posts.load(Ordering::SeqCst), 1);
    let steps = seen.steps.lock().map(|s| s.clone()).unwrap_or_default();
    let shape: Vec<(i32, &str, StepSource)> =
        steps.iter().map(|s| (s.step, s.kind, s.source)).collect();
    assert_eq!(
        shape,
        vec![
            (0, "model", StepSource::Journal),
            (1, "tool", StepSource::Journal),
            (2, "model", StepSource::Journal),
        ]
    );

    // From step 2 on, live against another model; tools stay dry.
    let partial = rig
        .journal(
            JournalMode::Replay {
                live_from: Some(2),
                live_tools: false,
            },
            None,
        )
        .await;
    let asked = Arc::new(AtomicUsize::new(0));
    let provider = answers(vec![post("again"), done("other")], asked.clone());
    let (out, _) = rig.run(&provider, &partial, false, &Seen::default()).await;
    let Ok(out) = out else { panic!("{out:?}") };
    assert_eq!(out.text, "other");
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    assert_eq!(
        rig.posts.load(Ordering::SeqCst),
        1,
        "a dry run posts nothing"
    );
    assert!(last_tool_message(&out).starts_with("[dry run]"));
    assert_eq!(rig.kinds().await.len(), 4, "a replay writes nothing");
}

impl Rig {
    /// Tokens the budget gate charged (the engine's totals).
    async fn ledger_total(&self) -> u64 {
        self.tracker.summary().engine.total_tokens
    }
}

/// Works outside the turn: the first call of an id suspends, the call of
/// the same id once `done` is set answers.
struct Outside {
    done: std::sync::atomic::AtomicBool,
    seen_ids: StdMutex<Vec<Option<String>>>,
}

#[async_trait]
impl Tool for Outside {
    fn name(&self) -> &str {
        "post"
    }
    fn description(&self) -> &str {
        "Works outside the turn."
    }
    fn schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations {
            idempotent: true,
            ..ToolAnnotations::default()
        }
    }
    async fn invoke(&self, _: &ToolContext, _: Value) -> Result<ToolOutput, ToolError> {
        if let Ok(mut ids) = self.seen_ids.lock() {
            ids.push(crate::current_call_id());
        }
        if self.done.load(Ordering::SeqCst) {
            Ok(ToolOutput::text("the work is done"))
        } else {
            Ok(ToolOutput::suspending("started outside"))
        }
    }
}

#[tokio::test]
async fn a_suspending_call_ends_the_turn_unanswered_and_answers_when_it_runs_again() {
    let rig = Rig::new();
    let outside = Arc::new(Outside {
        done: std::sync::atomic::AtomicBool::new(false),
        seen_ids: StdMutex::new(Vec::new()),
    });
    let asked = Arc::new(AtomicUsize::new(0));
    let provider = answers(vec![post("code it"), done("reported")], asked.clone());

    let journal = rig.journal(JournalMode::Record, None).await;
    let (out, _) = rig
        .run_with(&provider, &journal, outside.clone(), &Seen::default())
        .await;
    assert!(
        matches!(&out, Err(TurnError::Suspended { tool }) if tool == "post"),
        "{out:?}"
    );
    // Started, not answered: nothing the next run could take for a result.
    assert_eq!(
        rig.kinds().await,
        vec![(0, "model".to_owned()), (1, "tool_started".to_owned())]
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1);

    // The work finishes; the turn runs again from its journal.
    outside.done.store(true, Ordering::SeqCst);
    let journal = rig.journal(JournalMode::Record, None).await;
    let (out, _) = rig
        .run_with(&provider, &journal, outside.clone(), &Seen::default())
        .await;
    let out = out.unwrap_or_else(|e| panic!("resumed: {e}"));
    assert_eq!(out.text, "reported");
    assert_eq!(last_tool_message(&out), "the work is done");
    // The first answer came from the journal: one more model call only.
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // Both runs of the call knew its id, the same one.
    let ids = outside
        .seen_ids
        .lock()
        .map(|v| v.clone())
        .unwrap_or_default();
    assert_eq!(ids, vec![Some("c0".to_owned()), Some("c0".to_owned())]);
    assert_eq!(
        rig.kinds().await,
        vec![
            (0, "model".to_owned()),
            (1, "tool_started".to_owned()),
            (1, "tool_result".to_owned()),
            (2, "model".to_owned()),
        ]
    );
}
