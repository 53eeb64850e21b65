//! A box that tries to point the engine outside it: a link (or a FIFO) in
//! place of a file the engine reads or writes. The backend refuses it
//! ([`SandboxError::Escape`]); here the refusal becomes part of the run's
//! result (the model is told, in a line, which file was refused and why)
//! and a `sandbox_escape_refused` event with the in-box path and the
//! operation. Never the file's content: nothing of it was read.

use crewlet_core::{Event, EventType, TraceContext};
use crewlet_sandbox::{BoxId, SandboxError};
use crewlet_store::SandboxRun;
use serde_json::{Value, json};
use tracing::warn;

use super::SandboxService;

/// One box file the engine refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    /// The in-box path.
    pub path: String,
    /// `read`, `write` or `poll` (the run's exit code).
    pub operation: &'static str,
    pub reason: &'static str,
}

impl Refusal {
    /// The refusal `e` is, if it is one.
    pub fn of(e: &SandboxError, operation: &'static str) -> Option<Self> {
        match e {
            SandboxError::Escape { path, reason } => Some(Self {
                path: path.clone(),
                operation,
                reason,
            }),
            _ => None,
        }
    }

    fn payload(&self) -> Value {
        json!({"path": self.path, "operation": self.operation, "reason": self.reason})
    }
}

/// What the model reads first in the run's report when files were refused.
pub(super) fn note(refused: &[Refusal]) -> String {
    let mut out = String::new();
    for r in refused {
        let verb = match r.operation {
            "write" => "write",
            _ => "read",
        };
        out.push_str(&format!(
            "[The engine refused to {verb} {} in the box ({}): a box cannot point the engine \
             at files outside it. Nothing of it is shown.]\n",
            r.path, r.reason
        ));
    }
    out
}

/// Adds the refusals to a collected run's `result`: the note ahead of its
/// report and the refused paths under `refused`.
pub(super) fn mark(result: &mut Value, refused: &[Refusal]) {
    if refused.is_empty() {
        return;
    }
    let findings = result["findings"].as_str().unwrap_or_default();
    result["findings"] = Value::String(format!("{}{findings}", note(refused)));
    result["refused"] = refused.iter().map(Refusal::payload).collect();
}

impl SandboxService {
    /// Publishes `sandbox_escape_refused` for each refusal of `run`.
    pub(super) async fn escapes_refused(&self, run: &SandboxRun, refused: &[Refusal]) {
        let trace = TraceContext::new_root();
        for r in refused {
            warn!(agent = %run.seat, sandbox = %run.box_id, path = %r.path, operation = r.operation, "sandbox_escape_refused");
            let mut extra = r.payload();
            extra["seat"] = json!(run.seat);
            self.publish(
                EventType::SandboxEscapeRefused,
                run,
                format!(
                    "{}'s sandbox put a link or special file at {}; the engine refused it",
                    run.seat, r.path
                ),
                extra,
                &trace,
            )
            .await;
        }
    }

    /// Publishes `sandbox_escape_refused` for a refusal before the run
    /// exists (a file written into a reused box at the run's start).
    pub(super) async fn escape_refused_at_start(
        &self,
        ctx: &crewlet_turn::ToolContext,
        box_id: &BoxId,
        e: &SandboxError,
    ) {
        let Some(r) = Refusal::of(e, "write") else {
            return;
        };
        let handle = ctx.agent_handle.as_str();
        warn!(agent = handle, sandbox = %box_id, path = %r.path, operation = r.operation, "sandbox_escape_refused");
        let mut payload = r.payload();
        let extra = json!({
            "run_id": null,
            "turn_id": ctx.turn_id,
            "seat": handle,
            "backend": self.backend.backend(),
            "sandbox_id": box_id.0,
        });
        if let (Some(p), Some(x)) = (payload.as_object_mut(), extra.as_object()) {
            p.extend(x.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let mut event = Event::new(EventType::SandboxEscapeRefused, "engine")
            .with_summary(format!(
                "{handle}'s sandbox put a link or special file at {}; the engine refused it",
                r.path
            ))
            .with_agent_handle(handle)
            .with_payload(payload)
            .with_trace(ctx.trace.child());
        event.task_id = Some(ctx.task_id.clone());
        crate::sink::publish_event(self.queue.as_ref(), event).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_lead_the_report_and_are_listed() {
        let e = SandboxError::Escape {
            path: "/home/user/.crewlet/findings.md".into(),
            reason: "a symbolic link is on its path",
        };
        let r = Refusal::of(&e, "read").unwrap_or_else(|| panic!("not a refusal"));
        assert!(Refusal::of(&SandboxError::Invalid("x".into()), "read").is_none());
        let mut result = json!({"findings": "did X", "transcript": ""});
        mark(&mut result, &[r]);
        let findings = result["findings"].as_str().unwrap_or_default();
        assert!(
            findings.starts_with("[The engine refused to read /home/user/.crewlet/findings.md"),
            "{findings}"
        );
        assert!(findings.ends_with("did X"), "{findings}");
        assert_eq!(
            result["refused"][0]["path"],
            "/home/user/.crewlet/findings.md"
        );
        assert_eq!(result["refused"][0]["operation"], "read");
        let mut clean = json!({"findings": "ok"});
        mark(&mut clean, &[]);
        assert_eq!(clean, json!({"findings": "ok"}));
    }
}
