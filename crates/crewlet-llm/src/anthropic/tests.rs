use super::*;
use crate::http::{SseFrame, StreamAssembler};
use crate::{ErrorClass, SystemBlock, ToolSpec};

fn provider() -> Result<AnthropicProvider, LlmError> {
    let cfg = ProviderConfig::new("claude", crate::ProviderKind::Anthropic, "claude-test");
    AnthropicProvider::new(&cfg, reqwest::Client::new())
}

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("{name} things"),
        parameters: json!({"type": "object"}),
    }
}

#[test]
fn cache_breakpoints_sit_on_the_stable_system_block_and_the_last_tool() -> Result<(), LlmError> {
    let p = provider()?;
    let req = CompletionRequest {
        system: vec![
            SystemBlock::stable("who"),
            SystemBlock::volatile("what now"),
        ],
        messages: vec![Message::user("go")],
        tools: vec![tool("a"), tool("b"), tool("c")],
        ..CompletionRequest::default()
    };
    let b = p.body(&req, false);
    assert_eq!(
        b["system"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert!(b["system"][1].get("cache_control").is_none());
    assert!(b["tools"][0].get("cache_control").is_none());
    assert!(b["tools"][1].get("cache_control").is_none());
    assert_eq!(b["tools"][2]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(b["tools"][2]["input_schema"], json!({"type": "object"}));
    assert_eq!(b["max_tokens"], 4096);
    // no block marked: the breakpoint goes on the last
    let req = CompletionRequest {
        system: vec![SystemBlock::volatile("x"), SystemBlock::volatile("y")],
        ..req
    };
    let b = p.body(&req, false);
    assert!(b["system"][0].get("cache_control").is_none());
    assert_eq!(b["system"][1]["cache_control"]["type"], "ephemeral");
    Ok(())
}

#[test]
fn tool_results_merge_into_one_user_turn() {
    let msgs = messages(&[
        Message::user("go"),
        Message::assistant(
            "thinking",
            vec![
                ToolCall {
                    id: "t1".into(),
                    name: "a".into(),
                    arguments: "{\"x\":1}".into(),
                },
                ToolCall {
                    id: "t2".into(),
                    name: "b".into(),
                    arguments: "not json".into(),
                },
            ],
        ),
        Message::Tool {
            call_id: "t1".into(),
            name: "a".into(),
            content: "r1".into(),
            is_error: false,
        },
        Message::Tool {
            call_id: "t2".into(),
            name: "b".into(),
            content: "bad".into(),
            is_error: true,
        },
    ]);
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[1]["content"][1]["input"], json!({"x": 1}));
    assert_eq!(msgs[1]["content"][2]["input"]["_raw_arguments"], "not json");
    assert_eq!(msgs[2]["role"], "user");
    assert_eq!(msgs[2]["content"].as_array().map(Vec::len), Some(2));
    assert_eq!(msgs[2]["content"][1]["is_error"], true);
}

#[test]
fn tool_choice_maps_to_anthropic_names() -> Result<(), LlmError> {
    let p = provider()?;
    let mut req = CompletionRequest {
        messages: vec![Message::user("go")],
        tools: vec![tool("a")],
        tool_choice: ToolChoice::Required,
        ..CompletionRequest::default()
    };
    assert_eq!(p.body(&req, false)["tool_choice"], json!({"type": "any"}));
    req.tool_choice = ToolChoice::Tool("a".into());
    assert_eq!(
        p.body(&req, false)["tool_choice"],
        json!({"type": "tool", "name": "a"})
    );
    Ok(())
}

#[test]
fn stream_events_assemble_and_errors_are_classified() -> Result<(), LlmError> {
    let mut a = Box::new(Assembler {
        provider: "p".into(),
        completion: Completion::default(),
        raw_usage: Map::new(),
        block_to_call: Vec::new(),
    });
    let frames = [
        (
            "message_start",
            r#"{"message":{"model":"claude-x","usage":{"input_tokens":5,"cache_read_input_tokens":20,"output_tokens":1}}}"#,
        ),
        (
            "content_block_start",
            r#"{"index":0,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ),
        (
            "content_block_start",
            r#"{"index":1,"content_block":{"type":"tool_use","id":"tu1","name":"look","input":{}}}"#,
        ),
        (
            "content_block_delta",
            r#"{"index":1,"delta":{"type":"input_json_delta","partial_json":"{\"q\":"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"index":1,"delta":{"type":"input_json_delta","partial_json":"3}"}}"#,
        ),
        (
            "message_delta",
            r#"{"delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}"#,
        ),
    ];
    let mut out = Vec::new();
    for (event, data) in frames {
        let done = a.frame(
            &SseFrame {
                event: Some(event.into()),
                data: data.into(),
            },
            &mut out,
        )?;
        assert!(!done);
    }
    let stop = SseFrame {
        event: Some("message_stop".into()),
        data: "{}".into(),
    };
    assert!(a.frame(&stop, &mut out)?);
    let c = a.finish()?;
    assert_eq!((c.content.as_str(), c.model.as_str()), ("Hi", "claude-x"));
    assert_eq!(c.tool_calls[0].arguments, "{\"q\":3}");
    assert_eq!(
        c.usage,
        Usage {
            input_tokens: 25,
            output_tokens: 9,
            cache_read_tokens: 20
        }
    );

    let mut b = Box::new(Assembler {
        provider: "p".into(),
        completion: Completion::default(),
        raw_usage: Map::new(),
        block_to_call: Vec::new(),
    });
    let err = b
        .frame(
            &SseFrame {
                event: Some("error".into()),
                data:
                    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
                        .into(),
            },
            &mut out,
        )
        .err();
    assert_eq!(err.map(|e| e.class()), Some(ErrorClass::Server));
    Ok(())
}

#[test]
fn usage_counts_the_whole_prompt() {
    let u = usage(&json!({"input_tokens": 10, "output_tokens": 5,
        "cache_read_input_tokens": 80, "cache_creation_input_tokens": 7}));
    assert_eq!(
        u,
        Usage {
            input_tokens: 97,
            output_tokens: 5,
            cache_read_tokens: 80
        }
    );
}
