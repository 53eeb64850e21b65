//! The time zone a schedule is read in, parsed by the one function both
//! validation and the engine's scheduler use: a zone `crewlet validate`
//! accepts is a zone the scheduler can fire in, and the other way round.

use std::str::FromStr;

use chrono::FixedOffset;

/// A time zone a schedule is read in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Zone {
    /// An IANA zone from the tz database (`Europe/Paris`, `UTC`, `Etc/GMT+5`).
    Named(chrono_tz::Tz),
    /// A fixed offset from UTC, `+HH:MM` or `-HH:MM`.
    Fixed(FixedOffset),
}

impl Zone {
    /// `UTC`, an IANA name (`Europe/Paris`, case as in the tz database) or a
    /// fixed offset (`+02:00`; hours 00-23, minutes 00-59). Surrounding
    /// spaces are ignored.
    pub fn parse(s: &str) -> Result<Zone, String> {
        let s = s.trim();
        if let Some(offset) = parse_offset(s) {
            return Ok(Zone::Fixed(offset));
        }
        chrono_tz::Tz::from_str(s)
            .map(Zone::Named)
            .map_err(|_| format!("unknown time zone `{s}` (use an IANA name such as `Europe/Paris`, `UTC`, or an offset like `+02:00`)"))
    }

    /// The IANA names [`Zone::parse`] knows, for suggestions.
    pub fn names() -> impl Iterator<Item = &'static str> {
        chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name())
    }
}

fn parse_offset(s: &str) -> Option<FixedOffset> {
    let b = s.as_bytes();
    if b.len() != 6 || !(b[0] == b'+' || b[0] == b'-') || b[3] != b':' {
        return None;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<i32> {
        let part = s.get(r)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let h = digits(1..3).filter(|h| *h < 24)?;
    let m = digits(4..6).filter(|m| *m < 60)?;
    let secs = (h * 3600 + m * 60) * if b[0] == b'-' { -1 } else { 1 };
    FixedOffset::east_opt(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_parse() {
        assert!(matches!(Zone::parse("UTC"), Ok(Zone::Named(_))));
        assert!(matches!(Zone::parse("Europe/Paris"), Ok(Zone::Named(_))));
        assert!(matches!(Zone::parse(" Etc/GMT+5 "), Ok(Zone::Named(_))));
        assert_eq!(
            Zone::parse("-05:30"),
            Ok(Zone::Fixed(
                FixedOffset::west_opt(5 * 3600 + 30 * 60).unwrap_or_else(|| unreachable!())
            ))
        );
        for bad in [
            "",
            "Europe/Pariss",
            "Mars/Olympus",
            "+99:99",
            "+01:60",
            "+24:00",
            "+2:00",
            "+0+:00",
            "utc",
            "UTC Paris",
        ] {
            let e = Zone::parse(bad).err();
            assert!(e.is_some_and(|e| e.contains("unknown time zone")), "{bad}");
        }
        assert!(Zone::names().any(|n| n == "America/Argentina/Buenos_Aires"));
    }
}
