//! Reading a CLI's output: the answer text and usage out of its JSON (or
//! JSONL, or plain text), then the tool-call envelope out of the answer.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::profile::{CliProfile, JsonlText, OutputFormat};
use crate::ToolCall;

/// What a CLI printed, decoded by its profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// The answer (or, for a failed run, the CLI's message).
    pub text: String,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    /// An error path of the profile matched.
    pub failed: bool,
    /// The output was meant to be JSON and was not.
    pub not_json: bool,
}

/// Decodes `stdout` as `profile` describes.
pub fn decode(profile: &CliProfile, stdout: &str) -> Decoded {
    let mut out = Decoded::default();
    match profile.output_format {
        OutputFormat::Text => out.text = stdout.trim().to_owned(),
        OutputFormat::Json => match parse_tolerant(stdout) {
            Some(doc) => {
                absorb_usage(profile, &doc, &mut out);
                out.text = first_text(profile, &doc).unwrap_or_default();
                out.failed = is_error(profile, &doc);
                if out.failed && out.text.is_empty() {
                    out.text = error_text(profile, &doc);
                }
            }
            None => {
                // A banner, a crash or a login prompt: keep it for the caller.
                out.text = stdout.trim().to_owned();
                out.not_json = true;
            }
        },
        OutputFormat::Jsonl => {
            let mut chunks: Vec<String> = Vec::new();
            for line in stdout.lines().map(str::trim).filter(|l| l.starts_with('{')) {
                let Ok(doc) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                absorb_usage(profile, &doc, &mut out);
                out.failed |= is_error(profile, &doc);
                if let Some(text) = first_text(profile, &doc) {
                    chunks.push(text);
                }
            }
            out.text = match (profile.jsonl_text, chunks.is_empty()) {
                (_, true) => {
                    out.not_json = true;
                    stdout.trim().to_owned()
                }
                (JsonlText::Concat, false) => chunks.concat(),
                (JsonlText::Last, false) => chunks.pop().unwrap_or_default(),
            };
        }
    }
    out
}

/// The value at `path` (object keys) inside `doc`.
pub fn json_path<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter()
        .try_fold(doc, |node, key| node.get(key.as_str()))
}

fn first_text(profile: &CliProfile, doc: &Value) -> Option<String> {
    profile
        .text_paths
        .iter()
        .filter_map(|p| json_path(doc, p).and_then(Value::as_str))
        .find(|s| !s.trim().is_empty())
        .map(str::to_owned)
}

fn is_error(profile: &CliProfile, doc: &Value) -> bool {
    profile.error_paths.iter().any(|p| match json_path(doc, p) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.trim().is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        _ => false,
    })
}

fn error_text(profile: &CliProfile, doc: &Value) -> String {
    profile
        .error_paths
        .iter()
        .filter_map(|p| json_path(doc, p))
        .find_map(|v| match v {
            Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
            Value::Object(_) => Some(v.to_string()),
            _ => None,
        })
        .unwrap_or_default()
}

fn absorb_usage(profile: &CliProfile, doc: &Value, out: &mut Decoded) {
    let count = |paths: &[Vec<String>]| {
        paths
            .iter()
            .filter_map(|p| json_path(doc, p))
            .find_map(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f.max(0.0) as u64)))
    };
    if let Some(n) = count(&profile.input_token_paths) {
        out.input_tokens = Some(n);
    }
    if let Some(n) = count(&profile.output_token_paths) {
        out.output_tokens = Some(n);
    }
    if let Some(n) = count(&profile.cache_read_token_paths) {
        out.cache_read_tokens = Some(n);
    }
}

/// The whole text as JSON, else its last line, else its outermost braces:
/// CLIs print update notices before their document.
fn parse_tolerant(text: &str) -> Option<Value> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(v) = serde_json::from_str(text) {
        return Some(v);
    }
    if let Some(last) = text.lines().rev().map(str::trim).find(|l| !l.is_empty())
        && let Ok(v) = serde_json::from_str(last)
    {
        return Some(v);
    }
    let (start, end) = (text.find('{')?, text.rfind('}')?);
    (start < end)
        .then(|| serde_json::from_str(&text[start..=end]).ok())
        .flatten()
}

/// Keys a model uses for its prose, most expected first.
const TEXT_KEYS: &[&str] = &["message", "content", "text", "response"];

/// The reply's text and tool calls. A reply with no envelope is all text
/// and no calls: the turn's own "a tool call was required" handling then
/// asks again, so bad model output costs a round, never a crash.
pub fn parse_envelope(reply: &str) -> (String, Vec<ToolCall>) {
    let reply = reply.trim();
    for candidate in candidates(reply) {
        let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(&candidate) else {
            continue;
        };
        if !obj.contains_key("tool_calls") && !TEXT_KEYS.iter().any(|k| obj.contains_key(*k)) {
            continue; // some other JSON the reply talks about
        }
        let text = TEXT_KEYS
            .iter()
            .find_map(|k| obj.get(*k))
            .map(|v| match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            })
            .unwrap_or_default();
        let calls = tool_calls(obj.get("tool_calls"));
        if !text.trim().is_empty() || !calls.is_empty() {
            return (text, calls);
        }
    }
    (reply.to_owned(), Vec::new())
}

fn tool_calls(raw: Option<&Value>) -> Vec<ToolCall> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let entries: Vec<&Value> = match raw {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(one @ Value::Object(_)) => vec![one],
        _ => Vec::new(),
    };
    entries
        .into_iter()
        .filter_map(|entry| {
            let name = ["name", "tool"]
                .iter()
                .find_map(|k| entry.get(*k).and_then(Value::as_str))
                .map(str::trim)
                .filter(|n| !n.is_empty())?;
            let args = ["arguments", "parameters", "input"]
                .iter()
                .find_map(|k| entry.get(*k));
            let arguments = match args {
                // a JSON string of the object: the OpenAI wire shape leaking in
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(v @ Value::Object(_)) => v.to_string(),
                    _ => "{}".to_owned(),
                },
                Some(v @ Value::Object(_)) => v.to_string(),
                _ => "{}".to_owned(),
            };
            let id = format!("cli_call_{}", NEXT.fetch_add(1, Ordering::Relaxed));
            Some(ToolCall {
                id,
                name: name.to_owned(),
                arguments,
            })
        })
        .collect()
}

/// Envelope candidates, best first: fenced blocks (last first), then
/// balanced top-level `{...}` spans (last first), duplicates dropped.
fn candidates(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut fenced = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let Some(newline) = after.find('\n') else {
            break;
        };
        let body = &after[newline + 1..];
        let Some(close) = body.find("```") else { break };
        fenced.push(body[..close].trim().to_owned());
        rest = &body[close + 3..];
    }
    out.extend(fenced.into_iter().rev());
    let mut spans = Vec::new();
    let (mut depth, mut start, mut in_str, mut escaped) = (0usize, 0usize, false, false);
    for (i, c) in text.char_indices() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' => {
                if depth == 0 {
                    start = i;
                }
                depth += 1;
            }
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    spans.push(text[start..=i].to_owned());
                }
            }
            _ => {}
        }
    }
    out.extend(spans.into_iter().rev());
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| !c.is_empty() && seen.insert(c.clone()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli_agent::builtin_profile;

    #[test]
    fn claude_json_gives_text_and_usage() -> Result<(), crate::cli_agent::CliAgentError> {
        let p = builtin_profile("claude-code")?;
        let out = decode(
            &p,
            "update available!\n{\"type\":\"result\",\"is_error\":false,\"result\":\"hi\",\"usage\":{\"input_tokens\":12,\"output_tokens\":3,\"cache_read_input_tokens\":5}}",
        );
        assert_eq!(out.text, "hi");
        assert_eq!(
            (out.input_tokens, out.output_tokens, out.cache_read_tokens),
            (Some(12), Some(3), Some(5))
        );
        assert!(!out.failed);
        let failed = decode(&p, r#"{"is_error":true,"result":"Invalid API key"}"#);
        assert!(failed.failed);
        assert_eq!(failed.text, "Invalid API key");
        Ok(())
    }

    #[test]
    fn jsonl_takes_the_last_or_all_text() -> Result<(), crate::cli_agent::CliAgentError> {
        let codex = builtin_profile("codex")?;
        let stream = "{\"item\":{\"text\":\"draft\"}}\nnoise\n{\"item\":{\"text\":\"final\"}}\n{\"usage\":{\"input_tokens\":7,\"output_tokens\":2}}";
        let out = decode(&codex, stream);
        assert_eq!((out.text.as_str(), out.input_tokens), ("final", Some(7)));
        let opencode = builtin_profile("opencode")?;
        let deltas = "{\"part\":{\"text\":\"Hel\"}}\n{\"part\":{\"text\":\"lo\"}}";
        assert_eq!(decode(&opencode, deltas).text, "Hello");
        Ok(())
    }

    #[test]
    fn envelopes_are_read_forgivingly() {
        let fenced = "Sure.\n```json\n{\"message\": \"on it\", \"tool_calls\": [{\"name\": \"post\", \"arguments\": \"{\\\"x\\\": 1}\"}]}\n```";
        let (text, calls) = parse_envelope(fenced);
        assert_eq!(text, "on it");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].name, "post");
        assert_eq!(calls[0].arguments, r#"{"x":1}"#);

        let bare = r#"{"content": "done", "tool_calls": {"tool": "t", "input": {"a": "b"}}}"#;
        let (text, calls) = parse_envelope(bare);
        assert_eq!((text.as_str(), calls.len()), ("done", 1));

        let prose = "The config is {\"port\": 8080}.";
        let (text, calls) = parse_envelope(prose);
        assert_eq!((text.as_str(), calls.len()), (prose, 0));
    }
}
