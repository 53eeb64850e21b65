//! The `run_sandbox` tool.

use std::sync::Arc;

use async_trait::async_trait;
use crewlet_store::SandboxRunStatus;
use crewlet_turn::{Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};

use super::SandboxService;

pub(crate) const NAME: &str = "run_sandbox";

/// Starts a coding agent on a code task in the seat's sandbox, detached.
pub(crate) struct RunSandboxTool(pub Arc<SandboxService>);

#[async_trait]
impl Tool for RunSandboxTool {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Has a coding agent do a code task in an isolated sandbox with a shell and git: implement a \
         change, make tests pass, reproduce a bug, run a script. Give a concrete brief naming the \
         repository and the exact change or investigation. Your turn waits while it works; this \
         call then answers with its report, and you report and act on it with your own tools."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "brief": {"type": "string", "description": "The code task: repository, change or investigation, how to check it, where to push."}
            },
            "required": ["brief"],
            "additionalProperties": false
        })
    }

    /// Idempotent per call: a call run again (its turn resumed) finds its
    /// run instead of starting another.
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations {
            read_only: false,
            destructive: false,
            idempotent: true,
            open_world: true,
        }
    }

    async fn invoke(&self, ctx: &ToolContext, arguments: Value) -> Result<ToolOutput, ToolError> {
        let brief = arguments
            .get("brief")
            .and_then(Value::as_str)
            .filter(|b| !b.trim().is_empty())
            .ok_or_else(|| ToolError::InvalidArguments("`brief` is required".into()))?;
        let call_id = crewlet_turn::current_call_id().ok_or_else(|| {
            ToolError::Failed("run_sandbox runs only inside a turn's tool loop".into())
        })?;
        let service = &self.0;
        let existing = service
            .runs
            .by_call(&ctx.agent_handle, ctx.turn_id, &call_id)
            .await
            .map_err(|e| ToolError::Failed(format!("cannot read the sandbox runs: {e}")))?;
        let run = match existing {
            Some(run) => run,
            None => service
                .launch(ctx, &call_id, brief)
                .await
                .map_err(ToolError::Failed)?,
        };
        match run.status {
            SandboxRunStatus::Running | SandboxRunStatus::AwaitingAnswer => Ok(
                ToolOutput::suspending(format!("sandbox run {} is going", run.id)),
            ),
            SandboxRunStatus::Answered => Ok(ToolOutput::text(service.reply_answered(&run))),
            SandboxRunStatus::Completed => Ok(ToolOutput::text(service.reply(&run))),
            SandboxRunStatus::Failed => Err(ToolError::Failed(service.reply(&run))),
        }
    }
}
