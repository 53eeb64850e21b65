//! What the turn engine's integration tests share: a read-only look-up tool
//! and a scripted tool call.

// Each test binary uses its own part of this.
#![allow(dead_code)]

use std::sync::Mutex;

use async_trait::async_trait;
use crewlet_llm::{Completion, ToolCall};
use crewlet_turn::{Tool, ToolAnnotations, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};

/// A read-only look-up in "the company wiki" that records its calls. It
/// answers `wiki says: {q} = 42` (or `answer` when set), and a look-up of
/// `secret` fails.
#[derive(Default)]
pub struct Lookup {
    calls: Mutex<Vec<(String, Value)>>,
    answer: Option<String>,
}

impl Lookup {
    /// One that answers `answer` to every look-up (`None`: the default).
    pub fn answering(answer: Option<String>) -> Self {
        Self {
            answer,
            ..Self::default()
        }
    }

    /// `(agent handle, arguments)` of every call, in order.
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl Tool for Lookup {
    fn name(&self) -> &str {
        "lookup"
    }
    fn description(&self) -> &str {
        "Looks a fact up in the company wiki. Returns the matching paragraph, with its source link and edit history."
    }
    fn schema(&self) -> Value {
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
    }
    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations::read_only()
    }
    async fn invoke(&self, ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push((ctx.agent_handle.clone(), args.clone()));
        }
        let q = args.get("q").and_then(Value::as_str).unwrap_or("?");
        if q == "secret" {
            return Err(ToolError::Failed("not allowed to look that up".into()));
        }
        Ok(ToolOutput::text(
            self.answer
                .clone()
                .unwrap_or_else(|| format!("wiki says: {q} = 42")),
        ))
    }
}

/// A completion that calls `name` with `args` (id `call_{name}`).
pub fn call(name: &str, args: Value) -> Completion {
    Completion {
        tool_calls: vec![ToolCall {
            id: format!("call_{name}"),
            name: name.to_owned(),
            arguments: args.to_string(),
        }],
        ..Completion::default()
    }
}
