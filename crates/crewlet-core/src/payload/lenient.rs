//! Lenient field readers for payloads that foreign producers also write.
//!
//! Used with `#[serde(default, deserialize_with = "...")]` on the fields of
//! a payload type whose readers must accept what older or foreign producers
//! stored: every helper takes any JSON value and never fails, so one odd
//! field never costs a reader the whole event. Writers are unaffected: the
//! fields serialize as their plain Rust types.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// Largest completion count one phase event may report (the store keeps it
/// in an `integer` column).
pub const MAX_PHASE_CALLS: u64 = i32::MAX as u64;

/// Largest token count kept (fits a `BIGINT`).
pub const MAX_COUNT: u64 = i64::MAX as u64;

/// A non-negative integer: a number (fractions cut) or a string of digits;
/// `None` for anything else (negative, not a number, absent, null).
fn non_negative(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A token count: a non-negative integer, anything else 0, capped at
/// [`MAX_COUNT`].
pub fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(non_negative(&v).unwrap_or(0).min(MAX_COUNT))
}

/// A small count (an iteration number): as [`count`], capped at `u32::MAX`.
pub fn count_u32<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = count(d)?;
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// A completion count: a non-negative integer capped at
/// [`MAX_PHASE_CALLS`]; `None` when the value is not one.
pub fn calls<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(non_negative(&v).map(|n| n.min(MAX_PHASE_CALLS)))
}

/// Text: a string as it is, a number as its decimal form, anything else
/// empty.
pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(match v {
        Value::String(s) => s,
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    })
}

/// Optional text: a non-empty string or a number (as its decimal form);
/// `None` for anything else.
pub fn opt_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let v = Value::deserialize(d)?;
    Ok(match v {
        Value::String(s) if !s.is_empty() => Some(s),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

/// The value as `T` when it has `T`'s shape, `T::default()` otherwise.
pub fn or_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let v = Value::deserialize(d)?;
    Ok(serde_json::from_value(v).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    struct Sample {
        #[serde(default, deserialize_with = "count")]
        count: u64,
        #[serde(default, deserialize_with = "calls")]
        calls: Option<u64>,
        #[serde(default, deserialize_with = "text")]
        text: String,
        #[serde(default, deserialize_with = "opt_text")]
        opt: Option<String>,
        #[serde(default, deserialize_with = "or_default")]
        list: Vec<u32>,
    }

    fn read(v: Value) -> Sample {
        serde_json::from_value(v).unwrap_or_default()
    }

    #[test]
    fn odd_values_read_as_defaults() {
        assert_eq!(read(json!({})), Sample::default());
        let odd = read(json!({"count": -3, "calls": "many", "text": [1], "opt": "", "list": "x"}));
        assert_eq!(odd, Sample::default());
        let ok = read(json!({"count": " 12 ", "calls": 2.7, "text": 5, "opt": 7, "list": [1]}));
        assert_eq!(
            ok,
            Sample {
                count: 12,
                calls: Some(2),
                text: "5".into(),
                opt: Some("7".into()),
                list: vec![1],
            }
        );
        let big = read(json!({"count": 1e300, "calls": u64::MAX}));
        assert_eq!((big.count, big.calls), (MAX_COUNT, Some(MAX_PHASE_CALLS)));
    }
}
