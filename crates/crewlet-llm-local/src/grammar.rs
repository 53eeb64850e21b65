//! The grammar a local model's answer is decoded under: plain text, or tool
//! calls whose arguments match each tool's JSON schema. Plan and Review end
//! with a decision tool (`submit_plan`, `submit_review`), so their decisions
//! are valid by construction too.
//!
//! The answer format is `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`,
//! one call per answer; plain text may not start like a call.

use crewlet_llm::{ToolChoice, ToolSpec};
use llguidance::api::TopLevelGrammar;
use serde_json::{Map, Value, json};

pub const CALL_OPEN: &str = "<tool_call>";
pub const CALL_CLOSE: &str = "</tool_call>";

/// Longest string a constrained argument may hold when its schema sets no
/// `maxLength`: a small model repeating itself stops here.
const STRING_CAP: u64 = 1000;
/// Most items a constrained array may hold when its schema sets no `maxItems`.
const ARRAY_CAP: u64 = 16;

/// What the model may answer.
#[derive(Clone, Debug, PartialEq)]
pub enum AnswerShape {
    /// Text only: no grammar beyond "no special tokens".
    Text,
    /// Text or calls of these tools (`tool_choice: auto`).
    TextOrCalls(Vec<ToolSpec>),
    /// Calls only (`required`, or one named tool).
    CallsOnly(Vec<ToolSpec>),
}

impl AnswerShape {
    pub fn of(tools: &[ToolSpec], choice: &ToolChoice) -> Self {
        match choice {
            _ if tools.is_empty() => AnswerShape::Text,
            ToolChoice::None => AnswerShape::Text,
            ToolChoice::Auto => AnswerShape::TextOrCalls(tools.to_vec()),
            ToolChoice::Required => AnswerShape::CallsOnly(tools.to_vec()),
            ToolChoice::Tool(name) => {
                let one: Vec<ToolSpec> =
                    tools.iter().filter(|t| &t.name == name).cloned().collect();
                if one.is_empty() {
                    AnswerShape::CallsOnly(tools.to_vec())
                } else {
                    AnswerShape::CallsOnly(one)
                }
            }
        }
    }

    pub fn tools(&self) -> &[ToolSpec] {
        match self {
            AnswerShape::Text => &[],
            AnswerShape::TextOrCalls(t) | AnswerShape::CallsOnly(t) => t,
        }
    }

    /// The lark grammar of this shape; `None` for text.
    pub fn grammar(&self) -> Option<TopLevelGrammar> {
        let (tools, text) = match self {
            AnswerShape::Text => return None,
            AnswerShape::TextOrCalls(t) => (t, true),
            AnswerShape::CallsOnly(t) => (t, false),
        };
        let schema = call_schema(tools);
        let start = if text {
            "start: TEXT | calls"
        } else {
            "start: calls"
        };
        // One call per answer: small models repeat a call until the token
        // cap cuts it; the tool loop asks again for the next one.
        let lark = format!(
            "{start}\n\
             calls: call\n\
             call: \"{CALL_OPEN}\\n\" %json {schema} \"\\n{CALL_CLOSE}\"\n\
             TEXT: /(?s:.+)/ & ~/(?s:[ \\t\\r\\n]*<tool_call>.*)/\n"
        );
        Some(TopLevelGrammar::from_lark(lark))
    }
}

/// `{"name": <one of the tools>, "arguments": <that tool's schema>}`.
fn call_schema(tools: &[ToolSpec]) -> Value {
    let variants: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({
                "type": "object",
                "properties": {
                    "name": { "const": t.name },
                    "arguments": bounded(&t.parameters),
                },
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    let mut schema = if variants.len() == 1 {
        variants.into_iter().next().unwrap_or(Value::Null)
    } else {
        json!({ "anyOf": variants })
    };
    if let Value::Object(map) = &mut schema {
        map.insert(
            "x-guidance".into(),
            json!({ "whitespace_flexible": false, "lenient": true }),
        );
    }
    schema
}

/// The schema with caps on strings and arrays that have none, and objects
/// that list their fields closed to others and with every field written (a
/// small model wanders, or stops short, otherwise).
pub fn bounded(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let v = match k.as_str() {
                    "properties" | "$defs" | "definitions" | "patternProperties" => match v {
                        Value::Object(props) => Value::Object(
                            props.iter().map(|(n, s)| (n.clone(), bounded(s))).collect(),
                        ),
                        other => other.clone(),
                    },
                    "items" | "additionalProperties" | "not" | "contains" => bounded(v),
                    "anyOf" | "oneOf" | "allOf" | "prefixItems" => match v {
                        Value::Array(items) => Value::Array(items.iter().map(bounded).collect()),
                        other => other.clone(),
                    },
                    _ => v.clone(),
                };
                out.insert(k.clone(), v);
            }
            let types = type_names(map.get("type"));
            if types.contains(&"string")
                && !out.contains_key("maxLength")
                && !out.contains_key("enum")
                && !out.contains_key("const")
            {
                out.insert("maxLength".into(), json!(STRING_CAP));
            }
            if types.contains(&"array") && !out.contains_key("maxItems") {
                out.insert("maxItems".into(), json!(ARRAY_CAP));
            }
            if let Some(Value::Object(props)) = out.get("properties") {
                // Every listed field is written: a small model otherwise
                // closes the object after the first required one.
                let all: Vec<Value> = props.keys().map(|k| Value::String(k.clone())).collect();
                out.insert("required".into(), Value::Array(all));
                if !out.contains_key("additionalProperties") {
                    out.insert("additionalProperties".into(), Value::Bool(false));
                }
            }
            Value::Object(out)
        }
        // `true` / `{}`: anything; keep it an object so it can be capped.
        Value::Bool(true) => json!({}),
        other => other.clone(),
    }
}

fn type_names(t: Option<&Value>) -> Vec<&str> {
    match t {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The calls in a finished answer, in order: `(name, arguments as JSON text)`.
/// `None` when the answer is text.
pub fn parse_calls(answer: &str) -> Option<Vec<(String, String)>> {
    let mut rest = answer.trim_start();
    if !rest.starts_with(CALL_OPEN) {
        return None;
    }
    let mut calls = Vec::new();
    // Whole blocks only: a block the token cap cut is left out. The body is
    // read as one JSON value, not up to the first close marker: a string
    // may hold `</tool_call>` (a small model that forgets a closing quote
    // writes one inside its string, and the grammar then keeps it there).
    while let Some(after) = rest.trim_start().strip_prefix(CALL_OPEN) {
        let mut values = serde_json::Deserializer::from_str(after).into_iter::<Value>();
        let Some(Ok(body)) = values.next() else {
            break;
        };
        let Some(tail) = after[values.byte_offset()..]
            .trim_start()
            .strip_prefix(CALL_CLOSE)
        else {
            break;
        };
        let Some(name) = body.get("name").and_then(Value::as_str) else {
            break;
        };
        let arguments = body.get("arguments").cloned().unwrap_or_else(|| json!({}));
        calls.push((name.to_owned(), arguments.to_string()));
        rest = tail;
    }
    Some(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: "d".into(),
            parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
        }
    }

    #[test]
    fn shapes_follow_the_tool_choice() {
        let tools = vec![tool("a"), tool("b")];
        assert_eq!(
            AnswerShape::of(&tools, &ToolChoice::None),
            AnswerShape::Text
        );
        assert_eq!(
            AnswerShape::of(&[], &ToolChoice::Required),
            AnswerShape::Text
        );
        assert_eq!(
            AnswerShape::of(&tools, &ToolChoice::Tool("b".into())).tools()[0].name,
            "b"
        );
        assert!(matches!(
            AnswerShape::of(&tools, &ToolChoice::Auto),
            AnswerShape::TextOrCalls(_)
        ));
    }

    #[test]
    fn schemas_are_capped_and_closed() {
        let s = bounded(&json!({"type": "object", "properties": {
            "s": {"type": "string"}, "e": {"type": "string", "enum": ["x"]},
            "l": {"type": "array", "items": {"type": "string"}}}}));
        assert_eq!(s["additionalProperties"], json!(false));
        assert_eq!(s["required"], json!(["s", "e", "l"]));
        assert_eq!(s["properties"]["s"]["maxLength"], json!(STRING_CAP));
        assert!(s["properties"]["e"].get("maxLength").is_none());
        assert_eq!(s["properties"]["l"]["maxItems"], json!(ARRAY_CAP));
        assert_eq!(
            s["properties"]["l"]["items"]["maxLength"],
            json!(STRING_CAP)
        );
    }

    #[test]
    fn calls_are_read_back_from_the_answer() {
        let answer = "<tool_call>\n{\"name\":\"a\",\"arguments\":{\"q\":\"x\"}}\n</tool_call>\n<tool_call>\n{\"name\":\"b\",\"arguments\":{}}\n</tool_call>";
        let calls = parse_calls(answer).unwrap();
        assert_eq!(calls[0], ("a".into(), "{\"q\":\"x\"}".into()));
        assert_eq!(calls[1].0, "b");
        assert_eq!(parse_calls("plain text"), None);
        let cut = "<tool_call>\n{\"name\":\"a\",\"arguments\":{}}\n</tool_call>\n<tool_call>\n{\"name\":\"a\",\"argu";
        assert_eq!(parse_calls(cut).unwrap().len(), 1);
    }

    #[test]
    fn a_close_marker_inside_a_string_does_not_end_the_call() {
        // As SmolLM2 wrote it: the quote forgotten, the marker inside the
        // string, the grammar holding the rest in it until a quote came.
        let answer = "<tool_call>\n{\"name\":\"a\",\"arguments\":{\"q\":\"no review}}}</tool_call>  # more\"}}\n</tool_call>";
        let calls = parse_calls(answer).unwrap();
        assert_eq!(
            calls,
            [(
                "a".into(),
                "{\"q\":\"no review}}}</tool_call>  # more\"}".into()
            )]
        );
        let unclosed = "<tool_call>\n{\"name\":\"a\",\"arguments\":{}}\n</tool_";
        assert_eq!(parse_calls(unclosed).unwrap(), []);
    }
}
