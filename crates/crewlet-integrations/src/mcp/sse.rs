//! A minimal `text/event-stream` parser: enough for MCP, which sends JSON in
//! `data:` fields.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SseEvent {
    pub event: Option<String>,
    pub id: Option<String>,
    pub data: String,
}

#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
    current: SseEvent,
    has_data: bool,
    /// The previous chunk ended in `\r`; a leading `\n` belongs to it.
    skip_lf: bool,
}

impl SseParser {
    /// Feeds bytes; returns the events completed by them.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &b in chunk {
            if self.skip_lf {
                self.skip_lf = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.skip_lf = b == b'\r';
                    let line = std::mem::take(&mut self.buf);
                    if let Some(event) = self.line(&line) {
                        events.push(event);
                    }
                }
                _ => self.buf.push(b),
            }
        }
        events
    }

    /// Bytes held for an unfinished line and event.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len() + self.current.data.len()
    }

    fn line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.current);
            let had_data = std::mem::replace(&mut self.has_data, false);
            return had_data.then_some(event);
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            return None; // comment / keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.current.event = Some(value.to_string()),
            "id" => self.current.id = Some(value.to_string()),
            _ => {} // `retry` and unknown fields
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_across_chunks_and_line_endings() {
        let mut p = SseParser::default();
        let mut events = p.push(b": keep-alive\n\nevent: message\nid: 1\ndata: {\"a\":");
        assert!(events.is_empty());
        events.extend(p.push(b"1}\r\n\r"));
        events.extend(p.push(b"\ndata: line1\ndata:line2\n\nretry: 5\n\n"));
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: Some("message".into()),
                    id: Some("1".into()),
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    event: None,
                    id: None,
                    data: "line1\nline2".into()
                },
            ]
        );
        assert_eq!(p.buffered(), 0);
    }
}
