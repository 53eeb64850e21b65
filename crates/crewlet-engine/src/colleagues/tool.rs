//! The `a2a_ask` tool.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use crewlet_turn::{Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};

use super::{Asked, Asks, DEFAULT_WAIT, MAX_WAIT};

pub(crate) struct AskColleague(pub Arc<Asks>);

#[async_trait]
impl Tool for AskColleague {
    fn name(&self) -> &str {
        "a2a_ask"
    }

    fn description(&self) -> &str {
        "Ask a colleague (an agent seat, or a person on chat) a question and wait for the answer. \
         Use lookup_colleague to find who knows. If no answer comes within `wait_seconds`, it \
         reaches you later as a new message; unanswered questions go up the colleague's manager chain."
    }

    fn schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "handle": {"type": "string", "description": "The colleague's handle, e.g. `cto`."},
                "question": {"type": "string", "description": "The question, with the context they need to answer it."},
                "wait_seconds": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT.as_secs(),
                                 "description": "How long to wait in this turn (default 120)."}
            },
            "required": ["handle", "question"]
        })
    }

    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let text = |k: &str| match args.get(k) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
            _ => Err(ToolError::InvalidArguments(format!(
                "`{k}` must be a non-empty string"
            ))),
        };
        let handle = text("handle")?;
        let question = text("question")?;
        let wait = match args.get("wait_seconds") {
            None | Some(Value::Null) => DEFAULT_WAIT,
            Some(v) => Duration::from_secs(v.as_u64().ok_or_else(|| {
                ToolError::InvalidArguments("`wait_seconds` must be a whole number".into())
            })?),
        };
        let asked = self
            .0
            .ask(
                &ctx.agent_handle,
                &handle,
                &question,
                ctx.delegation_depth,
                &ctx.delegation_chain,
                wait,
                ctx.trace,
            )
            .await
            .map_err(ToolError::Failed)?;
        Ok(ToolOutput::text(match asked {
            Asked::Answered(a) => format!("@{} answered:\n\n{}", a.from, a.text),
            Asked::Waiting { target, waited } => format!(
                "No answer from @{target} within {} s. Their answer will reach you as a new message; carry on with what you can do now.",
                waited.as_secs()
            ),
            Asked::OnChat { target, channel } => {
                format!("Asked {target} in {channel}. Their reply will reach you as a message.")
            }
        }))
    }
}
