//! What an agent can do besides talk: the [`Tool`] trait.

use async_trait::async_trait;
use crewlet_core::{AgentId, TraceContext};
use crewlet_llm::{Phase, ToolSpec};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Hints about a tool's effects (the MCP tool annotations). The loop runs a
/// round's calls concurrently only when every one of them is `read_only`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolAnnotations {
    /// Does not change anything outside the call.
    pub read_only: bool,
    /// May destroy or overwrite something (meaningful when not read-only).
    pub destructive: bool,
    /// Calling twice with the same arguments does no more than once.
    pub idempotent: bool,
    /// Reaches beyond the company's own systems (the web, third parties).
    pub open_world: bool,
}

impl Default for ToolAnnotations {
    /// The MCP defaults: assume the worst.
    fn default() -> Self {
        Self {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        }
    }
}

impl ToolAnnotations {
    /// A read-only, idempotent, closed-world tool.
    pub fn read_only() -> Self {
        Self {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        }
    }

    /// A tool that writes only the calling seat's own records (its
    /// memory): not read-only, but it overwrites nothing, repeats harmlessly
    /// and stays inside the company.
    pub fn own_records() -> Self {
        Self {
            read_only: false,
            destructive: false,
            idempotent: true,
            open_world: false,
        }
    }
}

/// Who is calling a tool, and within which turn: tools act with the calling
/// seat's identity and credentials, never another's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolContext {
    pub agent_id: AgentId,
    pub agent_handle: String,
    pub role_name: String,
    pub task_id: String,
    pub turn_id: Uuid,
    pub phase: Phase,
    pub iteration: u32,
    pub delegation_depth: u32,
    /// The seats waiting on this work (see `Trigger::delegation_chain`).
    pub delegation_chain: Vec<String>,
    /// The phase's span; a tool that emits events or calls out continues it.
    pub trace: TraceContext,
}

/// A tool's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    /// Ends the tool loop after this round (e.g. a "hand off" tool).
    pub terminate: bool,
    /// The call's work goes on outside the turn (a coding agent in a
    /// sandbox): the turn stops here without an answer to this call, and is
    /// run again from its journal once the work is done, when the tool is
    /// called again with the same call id and answers for real. Only
    /// idempotent tools may suspend; see [`current_call_id`].
    pub suspend: bool,
}

impl ToolOutput {
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            ..Self::default()
        }
    }

    pub fn terminating(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            terminate: true,
            ..Self::default()
        }
    }

    /// Suspends the turn (see [`ToolOutput::suspend`]); `content` says why,
    /// for the logs.
    pub fn suspending(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            suspend: true,
            ..Self::default()
        }
    }
}

tokio::task_local! {
    static CALL_ID: String;
}

/// The id of the tool call being run (the model's call id, the same when a
/// resumed turn reads the call back from its journal), for a tool that keys
/// its own records by call. `None` outside a tool loop's call.
pub fn current_call_id() -> Option<String> {
    CALL_ID.try_with(Clone::clone).ok()
}

/// Runs `f` with [`current_call_id`] answering `call_id`.
pub async fn with_call_id<F: std::future::Future>(call_id: String, f: F) -> F::Output {
    CALL_ID.scope(call_id, f).await
}

/// A failed call; the message is shown to the model, which may retry.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("{0}")]
    Failed(String),
}

/// One tool an agent may call.
#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;

    fn description(&self) -> &str;

    /// JSON Schema of the arguments object.
    fn schema(&self) -> serde_json::Value;

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::default()
    }

    /// For a tool served by an MCP server: the server's name and the tool's
    /// name there. `None` for built-in tools.
    fn mcp_origin(&self) -> Option<(&str, &str)> {
        None
    }

    async fn invoke(
        &self,
        ctx: &ToolContext,
        arguments: serde_json::Value,
    ) -> Result<ToolOutput, ToolError>;
}

/// The tool as offered to a model.
pub fn tool_spec(tool: &dyn Tool) -> ToolSpec {
    ToolSpec {
        name: tool.name().to_owned(),
        description: tool.description().to_owned(),
        parameters: tool.schema(),
    }
}

/// The tool as offered in Plan's slim catalogue: the first sentence of its
/// description (at most 160 characters).
pub fn slim_tool_spec(tool: &dyn Tool) -> ToolSpec {
    ToolSpec {
        name: tool.name().to_owned(),
        description: first_sentence(tool.description(), 160),
        parameters: tool.schema(),
    }
}

pub(crate) fn first_sentence(text: &str, max_chars: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let sentence = match line.find(". ") {
        Some(i) => &line[..=i],
        None => line,
    };
    if sentence.chars().count() <= max_chars {
        return sentence.to_owned();
    }
    let mut out: String = sentence.chars().take(max_chars.saturating_sub(3)).collect();
    out.push_str("...");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slim_descriptions_keep_the_first_sentence() {
        assert_eq!(
            first_sentence("Looks up a colleague. Returns their handle and role.", 160),
            "Looks up a colleague."
        );
        assert_eq!(first_sentence("\n  One line\nsecond", 160), "One line");
        assert_eq!(first_sentence(&"x".repeat(200), 10), "xxxxxxx...");
    }

    #[test]
    fn default_annotations_assume_the_worst() {
        let a = ToolAnnotations::default();
        assert!(!a.read_only && a.destructive && !a.idempotent && a.open_world);
        assert!(ToolAnnotations::read_only().read_only);
    }
}
