//! A request as one prompt for a CLI that takes text and prints text.
//!
//! The system blocks go first as they are, the conversation follows as a
//! labelled transcript, and, when the request offers tools, a catalogue of
//! them and the reply format: one JSON object with `message` and
//! `tool_calls`. The CLI's own tools are never used: Crewlet's tools run in
//! the engine, where permissions, redaction and events apply.

use serde_json::json;

use crate::{CompletionRequest, Message, ToolChoice, ToolSpec};

/// The tools a request really offers: none when `tool_choice` is `none`.
pub(crate) fn offered_tools(request: &CompletionRequest) -> &[ToolSpec] {
    if request.tool_choice == ToolChoice::None {
        &[]
    } else {
        &request.tools
    }
}

/// The whole prompt of `request`.
pub fn render_prompt(request: &CompletionRequest) -> String {
    let mut sections: Vec<String> = Vec::new();
    let system: Vec<&str> = request
        .system
        .iter()
        .map(|b| b.text.trim())
        .filter(|t| !t.is_empty())
        .collect();
    if !system.is_empty() {
        sections.push(system.join("\n\n"));
    }
    if !request.messages.is_empty() {
        let turns: Vec<String> = request.messages.iter().map(render_message).collect();
        sections.push(format!("# Conversation\n\n{}", turns.join("\n\n")));
    }
    let tools = offered_tools(request);
    if !tools.is_empty() {
        sections.push(format!("# Tools\n\n{}", catalogue(tools)));
        sections.push(reply_format(tools, &request.tool_choice));
    }
    sections.join("\n\n")
}

fn render_message(message: &Message) -> String {
    match message {
        Message::User { content } => format!("## User\n{content}"),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            let mut lines: Vec<String> = Vec::new();
            if !content.trim().is_empty() {
                lines.push(content.clone());
            }
            for call in tool_calls {
                lines.push(format!(
                    "(requested tool `{}` [{}] with {})",
                    call.name,
                    call.id,
                    if call.arguments.trim().is_empty() {
                        "{}"
                    } else {
                        call.arguments.as_str()
                    }
                ));
            }
            if lines.is_empty() {
                lines.push("(nothing)".into());
            }
            format!("## Assistant\n{}", lines.join("\n"))
        }
        Message::Tool {
            call_id,
            name,
            content,
            is_error,
        } => {
            let failed = if *is_error { ", failed" } else { "" };
            format!("## Result of tool `{name}` [{call_id}]{failed}\n{content}")
        }
    }
}

fn catalogue(tools: &[ToolSpec]) -> String {
    let entries: Vec<serde_json::Value> = tools
        .iter()
        .map(|t| {
            let parameters = if t.parameters.is_null() {
                json!({"type": "object", "properties": {}})
            } else {
                t.parameters.clone()
            };
            json!({"name": t.name, "description": t.description, "parameters": parameters})
        })
        .collect();
    serde_json::to_string_pretty(&entries).unwrap_or_else(|_| "[]".into())
}

fn reply_format(tools: &[ToolSpec], choice: &ToolChoice) -> String {
    let names: Vec<String> = tools.iter().map(|t| format!("`{}`", t.name)).collect();
    let obligation = match choice {
        ToolChoice::Required => "This reply must request at least one tool.".to_owned(),
        ToolChoice::Tool(name) => format!("This reply must request the tool `{name}`."),
        ToolChoice::Auto | ToolChoice::None => {
            "Leave `tool_calls` empty when no tool is needed.".to_owned()
        }
    };
    format!(
        "# Reply format\n\
         A program reads your reply, not a person. Reply with exactly one JSON object, \
         in a ```json fenced block, and nothing outside it:\n\n\
         ```json\n\
         {{\"message\": \"text for the reader, may be empty\", \
         \"tool_calls\": [{{\"name\": \"tool name\", \"arguments\": {{}}}}]}}\n\
         ```\n\n\
         - `name` is one of: {names}.\n\
         - `arguments` is a JSON object that fits the tool's `parameters`.\n\
         - {obligation}\n\
         - Do not use any tool of your own (files, shell, web): the tools above are the only \
         ones, they run elsewhere, and their results come back in the next message.",
        names = names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SystemBlock, ToolCall};

    fn tool() -> ToolSpec {
        ToolSpec {
            name: "post_message".into(),
            description: "Post to chat".into(),
            parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        }
    }

    #[test]
    fn a_request_without_tools_gets_no_reply_format() {
        let request = CompletionRequest {
            system: vec![SystemBlock::stable("You are the CTO.")],
            messages: vec![Message::user("Summarise.")],
            ..CompletionRequest::default()
        };
        let prompt = render_prompt(&request);
        assert!(prompt.starts_with("You are the CTO."), "{prompt}");
        assert!(prompt.contains("## User\nSummarise."), "{prompt}");
        assert!(!prompt.contains("tool_calls"), "{prompt}");
    }

    #[test]
    fn tools_calls_and_results_are_all_rendered() {
        let request = CompletionRequest {
            messages: vec![
                Message::user("Say hi"),
                Message::assistant(
                    "",
                    vec![ToolCall {
                        id: "c1".into(),
                        name: "post_message".into(),
                        arguments: r#"{"text":"hi"}"#.into(),
                    }],
                ),
                Message::Tool {
                    call_id: "c1".into(),
                    name: "post_message".into(),
                    content: "posted".into(),
                    is_error: false,
                },
            ],
            tools: vec![tool()],
            tool_choice: ToolChoice::Required,
            ..CompletionRequest::default()
        };
        let prompt = render_prompt(&request);
        for needle in [
            r#"(requested tool `post_message` [c1] with {"text":"hi"})"#,
            "## Result of tool `post_message` [c1]\nposted",
            "\"name\": \"post_message\"",
            "must request at least one tool",
        ] {
            assert!(prompt.contains(needle), "missing {needle}: {prompt}");
        }
        let none = CompletionRequest {
            tool_choice: ToolChoice::None,
            ..request
        };
        assert!(!render_prompt(&none).contains("# Tools"));
    }
}
