//! Following a run to its end: the wait that keeps a turn's boxes alive
//! and collects each run that ends (its report, transcript, question and
//! usage), parking the ones that ask a person.

use crewlet_core::EventType;
use crewlet_sandbox::{BoxId, RunId, RunState};
use crewlet_store::{SandboxRun, SandboxRunPatch, SandboxRunStatus};
use serde_json::json;
use tracing::warn;
use uuid::Uuid;

use super::escape::{self, Refusal};
use super::{SandboxService, Waited, agent};

/// How much of the end of a report or question file is read (the result
/// keeps less).
const REPORT_READ: usize = 64 * 1024;

impl SandboxService {
    /// Waits until no run of `handle`'s turn `turn_id` is running, keeping
    /// the boxes alive and collecting each run that ends: then the turn
    /// goes on, or parks when a run waits for a person's answer. `Err` when
    /// `stopping` says the engine stops first (the runs go on; the next
    /// start picks them up).
    pub async fn wait(
        &self,
        handle: &str,
        turn_id: Uuid,
        stopping: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<Waited, ()> {
        loop {
            let runs = match self.runs.for_turn(handle, turn_id).await {
                Ok(r) => r,
                Err(e) => {
                    warn!(agent = handle, error = %e, "cannot read the seat's sandbox runs; looking again");
                    if stopping() {
                        return Err(());
                    }
                    tokio::time::sleep(self.poll_every()).await;
                    continue;
                }
            };
            let running: Vec<&SandboxRun> = runs
                .iter()
                .filter(|r| r.status == SandboxRunStatus::Running)
                .collect();
            if running.is_empty() {
                let parked = runs
                    .iter()
                    .any(|r| r.status == SandboxRunStatus::AwaitingAnswer);
                return Ok(if parked { Waited::Parked } else { Waited::Done });
            }
            for run in running {
                self.check(run).await;
            }
            if stopping() {
                return Err(());
            }
            tokio::time::sleep(self.poll_every()).await;
        }
    }

    /// One look at a running run: keep its box alive, or collect it. A
    /// file of the box the backend refuses (a link the agent left in place
    /// of its output, report or question) is reported in the result and
    /// as `sandbox_escape_refused`, and the rest is collected as usual.
    async fn check(&self, run: &SandboxRun) {
        let id = BoxId(run.box_id.clone());
        let mut refused = Vec::new();
        let state = self.backend.poll(&id, &RunId(run.run_id.clone())).await;
        let exit = match state {
            Ok(RunState::Running) => {
                let _ = self.backend.keepalive(&id, self.keepalive()).await;
                return;
            }
            Ok(RunState::Exited { code }) => Some(code),
            Ok(RunState::Lost) => None,
            Err(e) => {
                match Refusal::of(&e, "poll") {
                    Some(r) => refused.push(r),
                    None => {
                        warn!(agent = %run.seat, sandbox = %id, error = %e, "the sandbox is gone; the run failed")
                    }
                }
                None
            }
        };
        let output = match self
            .backend
            .run_output(&id, &RunId(run.run_id.clone()))
            .await
        {
            Ok(o) => o,
            Err(e) => {
                refused.extend(Refusal::of(&e, "read"));
                Default::default()
            }
        };
        let findings = self
            .read_text(&id, agent::FINDINGS, REPORT_READ, &mut refused)
            .await;
        let question = match self
            .read_text(
                &id,
                "/home/user/.crewlet/ask/question",
                REPORT_READ,
                &mut refused,
            )
            .await
        {
            Some(q) if !q.trim().is_empty() => {
                let to = self
                    .read_text(&id, "/home/user/.crewlet/ask/to", 1024, &mut refused)
                    .await
                    .unwrap_or_else(|| "requester".into());
                Some((q, to))
            }
            _ => None,
        };
        let audience = question.as_ref().map(|(_, to)| to.trim().to_owned());
        let asked = question.is_some();
        let mut result = agent::result(exit, findings, &output.stdout, &output.stderr, question);
        escape::mark(&mut result, &refused);
        if let Some(to) = audience
            && exit.is_some()
            && let Some(request) = self.parks(run, &to)
            && self.park(run, &request, &result).await
        {
            self.escapes_refused(run, &refused).await;
            return;
        }
        let to = if exit.is_some() {
            SandboxRunStatus::Completed
        } else {
            SandboxRunStatus::Failed
        };
        let patch = SandboxRunPatch {
            result: Some(Some(result.clone())),
            ..SandboxRunPatch::default()
        };
        match self
            .runs
            .transition(run.id, &[SandboxRunStatus::Running], to, &patch)
            .await
        {
            Ok(Some(done)) => {
                self.escapes_refused(&done, &refused).await;
                self.charge(&done).await;
                let trace = crewlet_core::TraceContext::new_root();
                let verb = if asked { "asks a question" } else { "finished" };
                self.publish(
                    EventType::SandboxRunCompleted,
                    &done,
                    format!("{}'s coding agent {verb}", done.seat),
                    json!({"exit_code": exit, "asked": asked, "findings": result["findings"], "transcript": result["transcript"], "usage": result["usage"]}),
                    &trace,
                )
                .await;
            }
            Ok(None) => {} // collected elsewhere first
            Err(e) => {
                warn!(agent = %run.seat, error = %e, "cannot record the sandbox run's end; looking again")
            }
        }
    }

    /// The last `max` bytes of a text file of the box; `None` when it is
    /// not there or cannot be read, noting in `refused` when the backend
    /// refused it.
    async fn read_text(
        &self,
        id: &BoxId,
        path: &str,
        max: usize,
        refused: &mut Vec<Refusal>,
    ) -> Option<String> {
        match self.backend.read_file_tail(id, path, max).await {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) => {
                refused.extend(Refusal::of(&e, "read"));
                None
            }
        }
    }
}
