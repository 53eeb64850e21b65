//! What a model response says it cost, read as it streams through the
//! proxy: the `usage` of a whole JSON answer, or of the server-sent events
//! of a streamed one (Anthropic's `message_start` and `message_delta`,
//! OpenAI's final chunk with `usage`, the Responses API's
//! `response.completed`).

use serde_json::{Map, Value};

/// The most of a whole (not streamed) answer kept to read its usage.
const MAX_JSON: usize = 32 << 20;

/// The token fields counted, as both vendors name them. OpenAI's cached
/// prompt tokens are part of `prompt_tokens`, Anthropic's cache reads and
/// writes are not part of `input_tokens`: each is counted once.
const FIELDS: [&str; 6] = [
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
    "prompt_tokens",
    "completion_tokens",
];

/// Reads a response's usage from its bytes as they pass.
#[derive(Debug)]
pub(crate) struct UsageMeter {
    sse: bool,
    /// A whole answer so far, or the SSE line being read.
    pending: Vec<u8>,
    /// The data lines of the SSE event being read.
    data: String,
    /// A whole answer grew past [`MAX_JSON`]: its usage is not read.
    overflow: bool,
    /// The usage fields seen so far (later events overwrite: both vendors
    /// report running totals).
    usage: Map<String, Value>,
}

impl UsageMeter {
    /// A meter for a response of this `Content-Type`.
    pub(crate) fn new(content_type: &str) -> Self {
        Self {
            sse: content_type
                .trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream"),
            pending: Vec::new(),
            data: String::new(),
            overflow: false,
            usage: Map::new(),
        }
    }

    /// Reads the next bytes of the body.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        if !self.sse {
            if self.pending.len() + bytes.len() > MAX_JSON {
                self.overflow = true;
                self.pending = Vec::new();
            }
            if !self.overflow {
                self.pending.extend_from_slice(bytes);
            }
            return;
        }
        for &b in bytes {
            if b == b'\n' {
                let line = std::mem::take(&mut self.pending);
                self.line(&line);
            } else if self.pending.len() < MAX_JSON {
                self.pending.push(b);
            }
        }
    }

    /// One SSE line (without its `\n`).
    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            self.dispatch();
            return;
        }
        if let Some(rest) = line.strip_prefix(b"data:") {
            let rest = rest.strip_prefix(b" ").unwrap_or(rest);
            if !self.data.is_empty() {
                self.data.push('\n');
            }
            self.data.push_str(&String::from_utf8_lossy(rest));
        }
    }

    /// The end of one SSE event: its data, read for usage.
    fn dispatch(&mut self) {
        let data = std::mem::take(&mut self.data);
        let Ok(event) = serde_json::from_str::<Value>(&data) else {
            return; // `[DONE]`, a ping, or not JSON
        };
        let usage = match event["type"].as_str() {
            Some("message_start") => &event["message"]["usage"],
            _ if event["usage"].is_object() => &event["usage"],
            _ if event["response"]["usage"].is_object() => &event["response"]["usage"],
            _ => return,
        };
        self.merge(usage);
    }

    fn merge(&mut self, usage: &Value) {
        if let Some(fields) = usage.as_object() {
            for (k, v) in fields {
                if v.is_u64() {
                    self.usage.insert(k.clone(), v.clone());
                }
            }
        }
    }

    /// The tokens the response reported (0 when it reported none).
    pub(crate) fn finish(&mut self) -> u64 {
        if self.sse {
            // A last event the stream ended without a blank line after.
            let line = std::mem::take(&mut self.pending);
            if !line.is_empty() {
                self.line(&line);
            }
            self.dispatch();
        } else if !self.overflow {
            let body = std::mem::take(&mut self.pending);
            if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                self.merge(&v["usage"]);
            }
        }
        tokens(&self.usage)
    }
}

/// A usage object's tokens: its `total_tokens`, else the sum of its parts.
fn tokens(usage: &Map<String, Value>) -> u64 {
    if let Some(total) = usage.get("total_tokens").and_then(Value::as_u64) {
        return total;
    }
    FIELDS
        .iter()
        .filter_map(|k| usage.get(*k).and_then(Value::as_u64))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(content_type: &str, body: &str, chunk: usize) -> u64 {
        let mut m = UsageMeter::new(content_type);
        for part in body.as_bytes().chunks(chunk) {
            m.feed(part);
        }
        m.finish()
    }

    #[test]
    fn a_whole_answer_of_either_vendor_reports_its_usage() {
        let anthropic = r#"{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],
            "usage":{"input_tokens":100,"cache_read_input_tokens":40,"cache_creation_input_tokens":10,"output_tokens":25}}"#;
        assert_eq!(read("application/json", anthropic, 7), 175);
        let chat = r#"{"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":12,"total_tokens":42,
            "prompt_tokens_details":{"cached_tokens":20}}}"#;
        assert_eq!(read("application/json; charset=utf-8", chat, 1000), 42);
        let responses = r#"{"object":"response","usage":{"input_tokens":9,"output_tokens":3}}"#;
        assert_eq!(read("application/json", responses, 5), 12);
        assert_eq!(
            read("application/json", r#"{"error":{"message":"no"}}"#, 3),
            0
        );
        assert_eq!(read("application/json", "not json", 3), 0);
    }

    #[test]
    fn anthropic_events_report_the_start_and_the_last_delta() {
        let sse = "event: message_start\r\n\
            data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":50,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\r\n\r\n\
            event: content_block_delta\n\
            data: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\n\
            event: ping\ndata: {\"type\": \"ping\"}\n\n\
            event: message_delta\n\
            data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":12}}\n\n\
            event: message_delta\n\
            data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":20}}\n\n\
            event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        // Any split of the bytes reads the same.
        for chunk in [1, 3, 17, 4096] {
            assert_eq!(read("text/event-stream", sse, chunk), 75, "chunk {chunk}");
        }
    }

    #[test]
    fn openai_events_report_the_usage_chunk_and_the_completed_response() {
        let chat = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n\
            data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":4,\"total_tokens\":15}}\n\n\
            data: [DONE]\n\n";
        assert_eq!(read("text/event-stream; charset=utf-8", chat, 5), 15);
        let responses = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n\
            event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":7,\"output_tokens\":2,\"total_tokens\":9}}}";
        // The stream ended without the blank line after its last event.
        assert_eq!(read("text/event-stream", responses, 8), 9);
        // A stream that never says: nothing.
        assert_eq!(
            read("text/event-stream", "data: {\"choices\":[]}\n\n", 8),
            0
        );
    }
}
