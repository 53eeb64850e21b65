//! Fast paths of the event envelope's JSON, byte for byte what the generic
//! code writes and reads (the stored JSON does not change):
//!
//! - the timestamp, written as chrono writes a `DateTime<Utc>` (RFC 3339,
//!   `Z`, the fraction at 0, 3, 6 or 9 digits) from a stack buffer, and read
//!   without chrono's general parser when it has exactly that shape;
//! - short string fields (event type, category, trace ids) read from the
//!   input without first copying them into a `String` (serde's `Cow<str>`
//!   always copies).
//!
//! Anything outside the fast shape goes through chrono as before.

use std::fmt;

use chrono::{
    DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, SecondsFormat, Timelike, Utc,
};
use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;

/// `#[serde(with = "crate::wire::timestamp")]`.
pub mod timestamp {
    use super::*;

    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 30];
        match write(t, &mut buf) {
            Some(text) => s.serialize_str(text),
            None => s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        d.deserialize_str(TimestampVisitor)
    }
}

struct TimestampVisitor;

impl Visitor<'_> for TimestampVisitor {
    type Value = DateTime<Utc>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an RFC 3339 timestamp")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<DateTime<Utc>, E> {
        match read(v) {
            Some(t) => Ok(t),
            None => v
                .parse::<DateTime<chrono::FixedOffset>>()
                .map(|t| t.with_timezone(&Utc))
                .map_err(E::custom),
        }
    }
}

fn digits(buf: &mut [u8], at: usize, value: u32, width: usize) {
    let mut v = value;
    for i in (0..width).rev() {
        buf[at + i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

/// `t` as chrono's `to_rfc3339_opts(AutoSi, true)` writes it, for years
/// 0..=9999 outside a leap second; `None` otherwise.
fn write<'a>(t: &DateTime<Utc>, buf: &'a mut [u8; 30]) -> Option<&'a str> {
    let n = t.naive_utc();
    let year = u32::try_from(n.year()).ok().filter(|y| *y <= 9999)?;
    let nanos = n.nanosecond();
    if nanos >= 1_000_000_000 {
        return None;
    }
    digits(buf, 0, year, 4);
    buf[4] = b'-';
    digits(buf, 5, n.month(), 2);
    buf[7] = b'-';
    digits(buf, 8, n.day(), 2);
    buf[10] = b'T';
    digits(buf, 11, n.hour(), 2);
    buf[13] = b':';
    digits(buf, 14, n.minute(), 2);
    buf[16] = b':';
    digits(buf, 17, n.second(), 2);
    let mut len = 19;
    let (value, width) = if nanos == 0 {
        (0, 0)
    } else if nanos.is_multiple_of(1_000_000) {
        (nanos / 1_000_000, 3)
    } else if nanos.is_multiple_of(1_000) {
        (nanos / 1_000, 6)
    } else {
        (nanos, 9)
    };
    if width > 0 {
        buf[len] = b'.';
        digits(buf, len + 1, value, width);
        len += 1 + width;
    }
    buf[len] = b'Z';
    std::str::from_utf8(&buf[..=len]).ok()
}

fn number(bytes: &[u8]) -> Option<u32> {
    bytes.iter().try_fold(0u32, |acc, b| {
        b.is_ascii_digit().then(|| acc * 10 + u32::from(b - b'0'))
    })
}

/// `YYYY-MM-DDTHH:MM:SS[.f]Z` with 1 to 9 fraction digits; `None` for any
/// other shape (chrono reads those).
fn read(v: &str) -> Option<DateTime<Utc>> {
    let b = v.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || *b.last()? != b'Z'
    {
        return None;
    }
    let nanos = match &b[19..b.len() - 1] {
        [] => 0,
        [b'.', fraction @ ..] if (1..=9).contains(&fraction.len()) => {
            number(fraction)? * 10u32.pow(9 - u32::try_from(fraction.len()).ok()?)
        }
        _ => return None,
    };
    let date = NaiveDate::from_ymd_opt(
        i32::try_from(number(&b[0..4])?).ok()?,
        number(&b[5..7])?,
        number(&b[8..10])?,
    )?;
    let time = NaiveTime::from_hms_nano_opt(
        number(&b[11..13])?,
        number(&b[14..16])?,
        number(&b[17..19])?,
        nanos,
    )?;
    Some(NaiveDateTime::new(date, time).and_utc())
}

/// Reads a string field into `T` through `parse`, borrowing the input.
pub(crate) fn deserialize_str<'de, D, T, E>(
    d: D,
    expecting: &'static str,
    parse: fn(&str) -> Result<T, E>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    E: fmt::Display,
{
    struct StrVisitor<T, E> {
        expecting: &'static str,
        parse: fn(&str) -> Result<T, E>,
    }
    impl<T, E: fmt::Display> Visitor<'_> for StrVisitor<T, E> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.expecting)
        }

        fn visit_str<Er: de::Error>(self, v: &str) -> Result<T, Er> {
            (self.parse)(v).map_err(Er::custom)
        }
    }
    d.deserialize_str(StrVisitor { expecting, parse })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn chrono_text(t: &DateTime<Utc>) -> String {
        t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
    }

    #[test]
    fn timestamps_are_written_as_chrono_writes_them_and_read_back() {
        let base = Utc.with_ymd_and_hms(2026, 12, 2, 20, 14, 3).single();
        let Some(base) = base else {
            panic!("a valid date")
        };
        for nanos in [
            0u32,
            1,
            7_000,
            120_000_000,
            123_456_000,
            123_456_789,
            999_999_999,
        ] {
            let t = base + chrono::Duration::nanoseconds(i64::from(nanos));
            let mut buf = [0u8; 30];
            let ours = write(&t, &mut buf).unwrap_or_default();
            assert_eq!(ours, chrono_text(&t));
            // Exactly what serde_json wrote through chrono before.
            let generic = serde_json::to_string(&t).unwrap_or_default();
            assert_eq!(format!("\"{ours}\""), generic);
            assert_eq!(read(ours), Some(t));
        }
        for early in ["0001-01-01T00:00:00Z", "1970-01-01T00:00:00.5Z"] {
            let t: DateTime<Utc> = early.parse().unwrap_or_default();
            assert_eq!(read(early), Some(t));
        }
    }

    #[test]
    fn other_shapes_go_to_chrono() {
        for other in [
            "2026-12-02T20:14:03+02:00",
            "2026-12-02t20:14:03z",
            "2026-12-02T20:14:03.1234567891Z",
            "2026-12-02 20:14:03Z",
            "2026-13-02T20:14:03Z",
            "2026-02-30T20:14:03Z",
            "2026-12-02T24:00:00Z",
            "2026-12-02T20:14:60Z",
            "+2026-12-02T20:14:03Z",
        ] {
            assert_eq!(read(other), None, "{other}");
        }
        let json = "\"2026-12-02T20:14:03+02:00\"";
        let mut de = serde_json::Deserializer::from_str(json);
        let ours = timestamp::deserialize(&mut de).ok();
        let generic: Option<DateTime<Utc>> = serde_json::from_str(json).ok();
        assert_eq!(ours, generic);
        assert!(ours.is_some());
    }
}
