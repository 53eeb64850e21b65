use std::fmt;
use std::str::FromStr;

use rand::Rng;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a trace id, span id or `traceparent` header could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TraceParseError {
    #[error("trace id `{0}` is not 32 lower-case hex digits (and not all zero)")]
    TraceId(String),
    #[error("span id `{0}` is not 16 lower-case hex digits (and not all zero)")]
    SpanId(String),
    #[error("traceparent `{0}` is not `00-<32 hex>-<16 hex>-<2 hex>`")]
    Traceparent(String),
}

fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    // Lower-case hex only, as W3C trace context writes it.
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let bytes = s.as_bytes();
    if bytes.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    (out != [0u8; N]).then_some(out)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as lower-case hex into `out` (twice as long).
fn hex_into<'a>(bytes: &[u8], out: &'a mut [u8]) -> &'a str {
    for (i, b) in bytes.iter().enumerate() {
        out[i * 2] = HEX[usize::from(b >> 4)];
        out[i * 2 + 1] = HEX[usize::from(b & 0xf)];
    }
    std::str::from_utf8(&out[..bytes.len() * 2]).unwrap_or_default()
}

fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    let mut buf = [0u8; 32];
    f.write_str(hex_into(bytes, &mut buf))
}

macro_rules! hex_id {
    ($name:ident, $len:literal, $err:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name([u8; $len]);

        impl $name {
            /// A fresh random, non-zero id.
            pub fn random() -> Self {
                let mut rng = rand::rng();
                loop {
                    let bytes: [u8; $len] = rng.random();
                    if bytes != [0u8; $len] {
                        return Self(bytes);
                    }
                }
            }

            pub fn from_bytes(bytes: [u8; $len]) -> Self {
                Self(bytes)
            }

            pub fn to_bytes(self) -> [u8; $len] {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write_hex(f, &self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}(", stringify!($name))?;
                write_hex(f, &self.0)?;
                f.write_str(")")
            }
        }

        impl FromStr for $name {
            type Err = TraceParseError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                parse_hex::<$len>(s)
                    .map(Self)
                    .ok_or_else(|| TraceParseError::$err(s.to_owned()))
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut buf = [0u8; $len * 2];
                s.serialize_str(hex_into(&self.0, &mut buf))
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                crate::wire::deserialize_str(d, "a hex id", <$name as FromStr>::from_str)
            }
        }
    };
}

hex_id!(
    TraceId,
    16,
    TraceId,
    "A W3C trace id: 16 bytes, shown as 32 lower-case hex digits."
);
hex_id!(
    SpanId,
    8,
    SpanId,
    "A W3C span id: 8 bytes, shown as 16 lower-case hex digits."
);

/// Where an event sits in a distributed trace. Carried on every event so a
/// consumer on the other side of the queue can continue the same trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceContext {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    pub parent_span_id: Option<SpanId>,
}

impl TraceContext {
    /// The first span of a new trace.
    pub fn new_root() -> Self {
        Self {
            trace_id: TraceId::random(),
            span_id: SpanId::random(),
            parent_span_id: None,
        }
    }

    /// A new span in the same trace whose parent is this one.
    pub fn child(&self) -> Self {
        Self {
            trace_id: self.trace_id,
            span_id: SpanId::random(),
            parent_span_id: Some(self.span_id),
        }
    }

    /// The W3C `traceparent` header value (sampled flag set).
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace_id, self.span_id)
    }

    /// Reads a W3C `traceparent`; the parent span is unknown from the header.
    pub fn from_traceparent(header: &str) -> Result<Self, TraceParseError> {
        let bad = || TraceParseError::Traceparent(header.to_owned());
        let mut parts = header.trim().split('-');
        let (Some(version), Some(trace), Some(span), Some(flags), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad());
        };
        if version.len() != 2 || version == "ff" || flags.len() != 2 {
            return Err(bad());
        }
        Ok(Self {
            trace_id: trace.parse().map_err(|_| bad())?,
            span_id: span.parse().map_err(|_| bad())?,
            parent_span_id: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_text() {
        let t = TraceId::random();
        assert_eq!(t.to_string().len(), 32);
        assert_eq!(t.to_string().parse::<TraceId>(), Ok(t));
        let s = SpanId::random();
        assert_eq!(s.to_string().parse::<SpanId>(), Ok(s));
    }

    #[test]
    fn bad_ids_are_refused() {
        assert!(
            "0".repeat(32).parse::<TraceId>().is_err(),
            "all-zero is invalid"
        );
        assert!(
            "ABCDEF0123456789ABCDEF0123456789"
                .parse::<TraceId>()
                .is_err()
        );
        assert!("abc".parse::<SpanId>().is_err());
        assert!("zz".repeat(8).parse::<SpanId>().is_err());
    }

    #[test]
    fn child_keeps_the_trace_and_points_at_its_parent() {
        let root = TraceContext::new_root();
        let child = root.child();
        assert_eq!(child.trace_id, root.trace_id);
        assert_eq!(child.parent_span_id, Some(root.span_id));
        assert_ne!(child.span_id, root.span_id);
    }

    #[test]
    fn traceparent_round_trip() {
        let ctx = TraceContext::new_root();
        let back = TraceContext::from_traceparent(&ctx.traceparent());
        assert_eq!(
            back.map(|c| (c.trace_id, c.span_id)),
            Ok((ctx.trace_id, ctx.span_id))
        );
        assert!(TraceContext::from_traceparent("00-abc-def-01").is_err());
        assert!(TraceContext::from_traceparent("garbage").is_err());
    }
}
