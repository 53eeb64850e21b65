//! A run that stopped to ask a person: parked until the answer comes.
//!
//! The question is posted by the seat's own bot in the conversation the
//! task came from; the run waits as `awaiting_answer` with its box paused,
//! and the seat's turn ends unfinished (its journal kept), so the seat
//! takes other work meanwhile. The next message in that conversation is
//! the answer: it is claimed at most once, and the turn runs again from
//! its journal, where the `run_sandbox` call now answers with the question
//! and the answer. A box paused longer than the seat's pause TTL is
//! removed; the answer then goes to a fresh box, which starts from the
//! branch the agent pushed before it asked.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use crewlet_core::payload::TaskRequest;
use crewlet_core::{Event, EventType};
use crewlet_sandbox::BoxId;
use crewlet_store::{SandboxRun, SandboxRunPatch, SandboxRunStatus};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::SandboxService;

/// How a wait for a turn's runs ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// No run goes on: the turn runs again and its calls answer.
    Done,
    /// A run waits for a person's answer: the turn ends for now.
    Parked,
}

/// Whether a run of this status left its box to the turn's next run.
pub(super) fn box_reusable(status: SandboxRunStatus) -> bool {
    matches!(
        status,
        SandboxRunStatus::Completed | SandboxRunStatus::Failed | SandboxRunStatus::Answered
    )
}

/// The task request of the turn a run belongs to.
fn trigger_request(run: &SandboxRun) -> Option<TaskRequest> {
    let event: Event = serde_json::from_value(run.trigger_event.clone()).ok()?;
    TaskRequest::from_event(&event).ok()
}

/// What the seat posts for its coding agent's question.
fn question_post(question: &Value) -> String {
    let text = question["text"].as_str().unwrap_or("").trim();
    format!("{text}\n\n_My coding agent stopped to ask this. Reply here and it carries on._")
}

impl SandboxService {
    /// The task request of `run`'s turn when a question for `audience`
    /// parks the run: it is for a person (an agent seat is asked by the
    /// turn itself, with `a2a_ask`) and the seat can post in the
    /// conversation the task came from.
    pub(super) fn parks(&self, run: &SandboxRun, audience: &str) -> Option<TaskRequest> {
        let seat = self.seats.get(&run.seat);
        let target = match audience {
            "manager" => seat.and_then(|s| s.manager.clone()),
            "requester" | "team" | "" => None,
            named => Some(named.trim_start_matches('@').to_owned()),
        };
        if target.is_some_and(|t| self.agents.contains(&t)) || run.conversation.is_none() {
            return None;
        }
        trigger_request(run).filter(|r| self.surfaces.can_post(&run.seat, r))
    }

    /// Parks `run`, which ended with a question: posts it, then records
    /// the run as waiting and pauses its box (or removes it, with a zero
    /// pause TTL). `false` when the question could not be posted: the run
    /// then completes as usual and the turn asks the question itself.
    ///
    /// Posted first: an engine that stops in between posts it again when
    /// it collects the run after its restart, instead of leaving a run
    /// waiting on a question nobody saw.
    pub(super) async fn park(
        &self,
        run: &SandboxRun,
        request: &TaskRequest,
        result: &Value,
    ) -> bool {
        let text = question_post(&result["question"]);
        if let Err(e) = self.surfaces.post(&run.seat, request, &text).await {
            warn!(agent = %run.seat, error = %e, "cannot post the coding agent's question; the turn asks it instead");
            return false;
        }
        let patch = SandboxRunPatch {
            question: Some(Some(result["question"].clone())),
            result: Some(Some(result.clone())),
            paused_at: Some(Some(Utc::now())),
            ..SandboxRunPatch::default()
        };
        let parked = match self
            .runs
            .transition(
                run.id,
                &[SandboxRunStatus::Running],
                SandboxRunStatus::AwaitingAnswer,
                &patch,
            )
            .await
        {
            Ok(Some(r)) => {
                self.charge(&r).await;
                r
            }
            Ok(None) => return true, // collected elsewhere first
            Err(e) => {
                warn!(agent = %run.seat, error = %e, "cannot record the coding agent's question; looking again");
                return true;
            }
        };
        let ttl = self
            .seats
            .get(&parked.seat)
            .map_or(Duration::ZERO, |s| s.pause_ttl);
        let kept = if ttl.is_zero() {
            self.release_box(&parked).await;
            false
        } else {
            if let Err(e) = self.backend.pause(&BoxId(parked.box_id.clone())).await {
                warn!(agent = %parked.seat, sandbox = %parked.box_id, error = %e, "cannot pause the sandbox; it waits running");
            }
            true
        };
        info!(agent = %parked.seat, run = %parked.id, "the coding agent asked a person; the run waits for the answer and the seat takes other work");
        self.publish(
            EventType::SandboxClarificationRequested,
            &parked,
            format!("{}'s coding agent asks a question", parked.seat),
            json!({
                "question": result["question"]["text"],
                "audience": result["question"]["audience"],
                "conversation": parked.conversation,
                "findings": result["findings"],
                "box_kept": kept,
                "pause_ttl_seconds": ttl.as_secs_f64(),
            }),
            &crewlet_core::TraceContext::new_root(),
        )
        .await;
        true
    }

    /// Kills a parked run's box and forgets it on the row (the answer
    /// then starts a fresh box).
    async fn release_box(&self, run: &SandboxRun) {
        if run.box_id.is_empty() {
            return;
        }
        if let Err(e) = self.backend.kill(&BoxId(run.box_id.clone())).await {
            warn!(agent = %run.seat, sandbox = %run.box_id, error = %e, "cannot remove the parked run's sandbox");
        }
        let patch = SandboxRunPatch {
            box_id: Some(String::new()),
            paused_at: Some(None),
            ..SandboxRunPatch::default()
        };
        if let Err(e) = self
            .runs
            .transition(
                run.id,
                &[SandboxRunStatus::AwaitingAnswer],
                SandboxRunStatus::AwaitingAnswer,
                &patch,
            )
            .await
        {
            warn!(agent = %run.seat, error = %e, "cannot record the parked run's box as gone");
        }
    }

    /// The inbox event of the turn that `answer` (a task of `handle`)
    /// resumes: `handle` has a run waiting for an answer in the
    /// conversation `answer` came from. The run is claimed (at most once)
    /// with the answer.
    pub async fn claim_answer(&self, handle: &str, answer: &TaskRequest) -> Option<Event> {
        self.seats.get(handle)?;
        let key = crate::coalesce::request_key(answer)?;
        let waiting = match self
            .runs
            .with_status(
                Some(handle),
                &[SandboxRunStatus::AwaitingAnswer, SandboxRunStatus::Answered],
            )
            .await
        {
            Ok(w) => w,
            Err(e) => {
                warn!(agent = handle, error = %e, "cannot read the runs waiting for an answer; the message is a new task");
                return None;
            }
        };
        // A run still waiting wins over one answered before (an answer
        // whose turn did not finish, e.g. the engine stopped).
        let run = waiting
            .iter()
            .filter(|r| r.conversation.as_deref() == Some(key.as_str()))
            .min_by_key(|r| r.status != SandboxRunStatus::AwaitingAnswer)?;
        let original: Event = match serde_json::from_value(run.trigger_event.clone()) {
            Ok(e) => e,
            Err(e) => {
                warn!(agent = handle, run = %run.id, error = %e, "the parked run's trigger is unreadable; the run fails and the message is a new task");
                let _ = self
                    .runs
                    .transition(
                        run.id,
                        &[SandboxRunStatus::AwaitingAnswer],
                        SandboxRunStatus::Failed,
                        &SandboxRunPatch::default(),
                    )
                    .await;
                return None;
            }
        };
        let said = crewlet_turn::sanitize::redact_secrets(&format!(
            "{}: {}",
            answer.sender.as_deref().unwrap_or("someone"),
            answer.text()
        ));
        let claimed = self
            .runs
            .transition(
                run.id,
                &[SandboxRunStatus::AwaitingAnswer, SandboxRunStatus::Answered],
                SandboxRunStatus::Answered,
                &SandboxRunPatch {
                    answer: Some(Some(said)),
                    ..SandboxRunPatch::default()
                },
            )
            .await;
        match claimed {
            Ok(Some(r)) => {
                info!(agent = handle, run = %r.id, "the answer came; the parked turn goes on");
                Some(original)
            }
            Ok(None) => None,
            Err(e) => {
                warn!(agent = handle, error = %e, "cannot claim the parked run; the message is a new task");
                None
            }
        }
    }

    /// What the `run_sandbox` call of an answered run answers.
    pub(super) fn reply_answered(&self, run: &SandboxRun) -> String {
        let q = run.question.as_ref().unwrap_or(&Value::Null);
        let findings = run
            .result
            .as_ref()
            .and_then(|r| r["findings"].as_str())
            .unwrap_or("");
        let machine = if run.box_id.is_empty() {
            "Its box expired while the question waited, so the next run starts in a fresh box: \
             tell it to check out the branch it pushed."
        } else {
            "Its box and checkout are kept for the next run."
        };
        format!(
            "The coding agent asked {to}: {question}\nThe answer came in the conversation, from {answer}\n\
             Its work in progress is pushed. {machine}\nCall `run_sandbox` again now with a brief that \
             gives this answer and says to go on from where it stopped.\nWhat it reported so far:\n{findings}",
            to = q["audience"].as_str().unwrap_or("requester"),
            question = q["text"].as_str().unwrap_or(""),
            answer = run.answer.as_deref().unwrap_or("(no text)"),
        )
    }

    /// Removes the boxes of runs that waited longer than their seat's
    /// pause TTL; returns how many.
    pub async fn reap_parked(&self) -> usize {
        let waiting = match self
            .runs
            .with_status(None, &[SandboxRunStatus::AwaitingAnswer])
            .await
        {
            Ok(w) => w,
            Err(e) => {
                warn!(error = %e, "cannot read the parked sandbox runs");
                return 0;
            }
        };
        let now = Utc::now();
        let mut reaped = 0;
        for run in waiting.iter().filter(|r| !r.box_id.is_empty()) {
            let (Some(seat), Some(paused)) = (self.seats.get(&run.seat), run.paused_at) else {
                continue;
            };
            let ttl = chrono::Duration::from_std(seat.pause_ttl).unwrap_or(chrono::Duration::MAX);
            if paused + ttl <= now {
                info!(agent = %run.seat, run = %run.id, "the parked run's box outlived its pause TTL; removed");
                self.release_box(run).await;
                reaped += 1;
            }
        }
        reaped
    }

    /// Runs [`reap_parked`](Self::reap_parked) at a quarter of the
    /// shortest pause TTL (between the poll interval and a minute); `None`
    /// when no seat keeps a paused box.
    pub fn spawn_reaper(self: &Arc<Self>) -> Option<JoinHandle<()>> {
        let shortest = self
            .seats
            .values()
            .map(|s| s.pause_ttl)
            .filter(|t| !t.is_zero())
            .min()?;
        let every = (shortest / 4).clamp(self.poll_every(), Duration::from_secs(60));
        let me = self.clone();
        Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                me.reap_parked().await;
            }
        }))
    }
}
