//! A provider-neutral request as the chat a local model reads: the system
//! blocks joined, the tools as signature lines in the system message with the answer
//! format [`crate::grammar`] enforces, tool calls written back in that
//! format, and tool results as user turns (many small models' templates
//! know only system, user and assistant).

use crewlet_llm::{CompletionRequest, Message, ToolChoice};

use crate::grammar::{AnswerShape, CALL_CLOSE, CALL_OPEN, bounded};
use crate::signature::signature;
use crate::template::ChatMessage;

/// The chat of `request`, given the answer shape it is decoded under.
pub fn chat(request: &CompletionRequest, shape: &AnswerShape) -> Vec<ChatMessage> {
    let mut system: Vec<String> = request
        .system
        .iter()
        .map(|b| b.text.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect();
    if let Some(tools) = tools_section(shape, &request.tool_choice) {
        system.push(tools);
    }
    let mut out: Vec<ChatMessage> = Vec::new();
    if !system.is_empty() {
        out.push(ChatMessage {
            role: "system",
            content: system.join("\n\n"),
        });
    }
    for message in &request.messages {
        let (role, content) = match message {
            Message::User { content } => ("user", content.clone()),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut text = content.trim().to_owned();
                for call in tool_calls {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&render_call(&call.name, &call.arguments));
                }
                ("assistant", text)
            }
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => {
                let status = if *is_error { "failed" } else { "returned" };
                (
                    "user",
                    format!("<tool_response>\n{name} {status}:\n{content}\n</tool_response>"),
                )
            }
        };
        // Two turns of one role in a row become one (strict templates
        // insist on alternation).
        match out.last_mut() {
            Some(last) if last.role == role && role != "system" => {
                last.content.push_str("\n\n");
                last.content.push_str(&content);
            }
            _ => out.push(ChatMessage { role, content }),
        }
    }
    out
}

/// A call as the model writes it: the form its answers are decoded in.
pub fn render_call(name: &str, arguments: &str) -> String {
    let args: serde_json::Value =
        serde_json::from_str(arguments).unwrap_or_else(|_| serde_json::json!({}));
    let body = serde_json::json!({ "name": name, "arguments": args });
    format!("{CALL_OPEN}\n{body}\n{CALL_CLOSE}")
}

fn tools_section(shape: &AnswerShape, choice: &ToolChoice) -> Option<String> {
    let tools = shape.tools();
    if tools.is_empty() {
        return None;
    }
    let mut s = String::from("# Tools\n\nYou may call these tools:\n<tools>\n");
    for t in tools {
        // As the grammar enforces it: every field written.
        s.push_str(&signature(&t.name, &bounded(&t.parameters)));
        let description = t
            .description
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if !description.is_empty() {
            s.push_str("\n  ");
            s.push_str(&description);
        }
        s.push('\n');
    }
    s.push_str("</tools>\n\nTo call a tool, answer with only this block (one block per call):\n");
    s.push_str(CALL_OPEN);
    s.push_str("\n{\"name\": <tool name>, \"arguments\": {<argument>: <value>, ...}}\n");
    s.push_str(CALL_CLOSE);
    match (shape, choice) {
        (AnswerShape::CallsOnly(_), ToolChoice::Tool(name)) => {
            s.push_str(&format!("\n\nCall `{name}` now."));
        }
        (AnswerShape::CallsOnly(_), _) => s.push_str("\n\nAnswer with a tool call now."),
        _ => s.push_str("\n\nWhen no tool is needed, answer in plain text."),
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewlet_llm::{SystemBlock, ToolCall, ToolSpec};

    #[test]
    fn tools_results_and_calls_become_a_plain_chat() {
        let tools = vec![ToolSpec {
            name: "search".into(),
            description: "find".into(),
            parameters: serde_json::json!({"type": "object"}),
        }];
        let request = CompletionRequest {
            system: vec![
                SystemBlock::stable("You are the CEO."),
                SystemBlock::volatile("Today."),
            ],
            messages: vec![
                Message::user("go"),
                Message::assistant(
                    "",
                    vec![ToolCall {
                        id: "c1".into(),
                        name: "search".into(),
                        arguments: "{\"q\":\"x\"}".into(),
                    }],
                ),
                Message::Tool {
                    call_id: "c1".into(),
                    name: "search".into(),
                    content: "found".into(),
                    is_error: false,
                },
                Message::user("now answer"),
            ],
            tools: tools.clone(),
            ..Default::default()
        };
        let shape = AnswerShape::of(&tools, &ToolChoice::Auto);
        let chat = chat(&request, &shape);
        let roles: Vec<_> = chat.iter().map(|m| m.role).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert!(chat[0].content.starts_with("You are the CEO.\n\nToday."));
        assert!(
            chat[0]
                .content
                .contains("<tools>\nsearch()\n  find\n</tools>"),
            "{}",
            chat[0].content
        );
        assert_eq!(
            chat[2].content,
            "<tool_call>\n{\"name\":\"search\",\"arguments\":{\"q\":\"x\"}}\n</tool_call>"
        );
        assert!(chat[3].content.contains("search returned:\nfound"));
        assert!(chat[3].content.ends_with("now answer"));
    }
}
