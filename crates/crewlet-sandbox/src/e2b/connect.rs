//! The Connect protocol's stream framing (JSON codec), as envd speaks it:
//! every message is one flag byte, a four-byte big-endian length and that
//! many bytes of JSON; the last frame has flag `0x02` and carries the
//! end-of-stream message, `{"error": {...}}` when the call failed.

use serde::Deserialize;

/// Flag of the end-of-stream frame.
pub const END_STREAM: u8 = 0x02;
/// Flag of a compressed frame (never asked for, so refused).
const COMPRESSED: u8 = 0x01;
/// Largest frame accepted: envd's data events are small chunks.
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// One frame's envelope around `json`.
pub fn envelope(flag: u8, json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 5);
    out.push(flag);
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(json);
    out
}

/// What the decoder found in the bytes so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A message of the stream.
    Message(Vec<u8>),
    /// The stream ended well.
    End,
}

/// A framing or end-of-stream error, as text for [`crate::SandboxError::Api`].
#[derive(Debug, PartialEq, Eq)]
pub struct StreamError(pub String);

#[derive(Deserialize)]
struct EndStream {
    error: Option<ConnectError>,
}

/// A Connect error body (end-of-stream or unary).
#[derive(Deserialize)]
pub struct ConnectError {
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
}

/// Decodes frames from chunks that split them anywhere.
#[derive(Default)]
pub struct Decoder {
    buf: Vec<u8>,
    ended: bool,
}

impl Decoder {
    /// Adds bytes read from the response body.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole frame, `Ok(None)` when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, StreamError> {
        if self.ended {
            return Ok(None);
        }
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let flag = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_FRAME {
            return Err(StreamError(format!("frame of {len} bytes is too large")));
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        let body: Vec<u8> = self.buf.drain(..5 + len).skip(5).collect();
        if flag & COMPRESSED != 0 {
            return Err(StreamError("compressed frame (not requested)".into()));
        }
        if flag & END_STREAM == 0 {
            return Ok(Some(Frame::Message(body)));
        }
        self.ended = true;
        let end: EndStream = serde_json::from_slice(&body)
            .map_err(|e| StreamError(format!("bad end-of-stream frame: {e}")))?;
        match end.error {
            Some(e) => Err(StreamError(describe(&e))),
            None => Ok(Some(Frame::End)),
        }
    }

    /// True once the end-of-stream frame was read.
    #[cfg(test)]
    pub fn ended(&self) -> bool {
        self.ended
    }
}

/// `code: message`, shortened.
pub fn describe(e: &ConnectError) -> String {
    let mut text = format!("{}: {}", e.code, e.message);
    if text.len() > 300 {
        let mut cut = 300;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(d: &mut Decoder) -> Result<Vec<Frame>, StreamError> {
        let mut out = Vec::new();
        while let Some(f) = d.next_frame()? {
            out.push(f);
        }
        Ok(out)
    }

    #[test]
    fn frames_split_anywhere_are_put_back_together() {
        let mut bytes = envelope(0, br#"{"a":1}"#);
        bytes.extend(envelope(0, br#"{"b":2}"#));
        bytes.extend(envelope(END_STREAM, b"{}"));
        for split in 0..bytes.len() {
            let mut d = Decoder::default();
            d.push(&bytes[..split]);
            let mut got = frames(&mut d).unwrap_or_else(|e| panic!("{e:?}"));
            d.push(&bytes[split..]);
            got.extend(frames(&mut d).unwrap_or_else(|e| panic!("{e:?}")));
            assert_eq!(
                got,
                vec![
                    Frame::Message(br#"{"a":1}"#.to_vec()),
                    Frame::Message(br#"{"b":2}"#.to_vec()),
                    Frame::End
                ],
                "split at {split}"
            );
            assert!(d.ended());
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let bytes = envelope(0, br#"{"x":"y"}"#);
        let mut d = Decoder::default();
        for (i, b) in bytes.iter().enumerate() {
            assert_eq!(d.next_frame(), Ok(None), "early frame at {i}");
            d.push(&[*b]);
        }
        assert_eq!(
            d.next_frame(),
            Ok(Some(Frame::Message(br#"{"x":"y"}"#.to_vec())))
        );
    }

    #[test]
    fn an_end_of_stream_error_is_an_error() {
        let mut d = Decoder::default();
        d.push(&envelope(0, b"{}"));
        d.push(&envelope(
            END_STREAM,
            br#"{"error":{"code":"not_found","message":"process 7 not found"}}"#,
        ));
        assert_eq!(d.next_frame(), Ok(Some(Frame::Message(b"{}".to_vec()))));
        assert_eq!(
            d.next_frame(),
            Err(StreamError("not_found: process 7 not found".into()))
        );
        assert!(d.ended());
    }

    #[test]
    fn compressed_and_oversized_frames_are_refused() {
        let mut d = Decoder::default();
        d.push(&envelope(COMPRESSED, b"xx"));
        assert!(d.next_frame().is_err());
        let mut d = Decoder::default();
        d.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert!(d.next_frame().is_err());
    }
}
