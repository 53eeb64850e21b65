//! Numbers as YAML writes them, and the ranges of the Rust types they end
//! up in.

/// The range of the Rust integer type behind a schemars `format`; any
/// integer JSON can carry (i64 or u64) when there is none.
pub(crate) fn format_bounds(format: Option<&str>) -> (i128, i128) {
    match format {
        Some("uint8") => (0, u8::MAX.into()),
        Some("uint16") => (0, u16::MAX.into()),
        Some("uint32") => (0, u32::MAX.into()),
        Some("uint64" | "uint") => (0, u64::MAX.into()),
        Some("int8") => (i8::MIN.into(), i8::MAX.into()),
        Some("int16") => (i16::MIN.into(), i16::MAX.into()),
        Some("int32") => (i32::MIN.into(), i32::MAX.into()),
        Some("int64" | "int") => (i64::MIN.into(), i64::MAX.into()),
        _ => (i64::MIN.into(), u64::MAX.into()),
    }
}

/// A whole number as written: its value, saturated at the ends of `i128`
/// for longer digit strings (which are out of every field's range anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Int {
    pub value: i128,
    pub saturated: bool,
}

impl std::fmt::Display for Int {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.saturated, self.value > 0) {
            (false, _) => write!(f, "{}", self.value),
            (true, true) => f.write_str("a number beyond 2^127"),
            (true, false) => f.write_str("a number below -2^127"),
        }
    }
}

/// YAML 1.2 core-schema integers, plus `_` digit separators.
pub(crate) fn parse_int(text: &str) -> Option<Int> {
    let (neg, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (radix, digits) = if let Some(hex) = digits.strip_prefix("0x") {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        (16, hex.to_owned())
    } else if let Some(oct) = digits.strip_prefix("0o") {
        if oct.is_empty() || !oct.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return None;
        }
        (8, oct.to_owned())
    } else {
        if digits.is_empty()
            || digits.starts_with('_')
            || digits.ends_with('_')
            || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'_')
        {
            return None;
        }
        (10, digits.replace('_', ""))
    };
    // The sign is parsed with the digits so that -2^127 itself fits.
    let signed = if neg { format!("-{digits}") } else { digits };
    match i128::from_str_radix(&signed, radix) {
        Ok(value) => Some(Int {
            value,
            saturated: false,
        }),
        Err(e) => match e.kind() {
            std::num::IntErrorKind::PosOverflow => Some(Int {
                value: i128::MAX,
                saturated: true,
            }),
            std::num::IntErrorKind::NegOverflow => Some(Int {
                value: i128::MIN,
                saturated: true,
            }),
            _ => None,
        },
    }
}

/// YAML 1.2 core-schema floats, without infinities and NaN (no setting wants them).
pub(crate) fn parse_float(text: &str) -> Option<f64> {
    let ok = text.bytes().any(|b| b.is_ascii_digit())
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    if !ok {
        return None;
    }
    text.parse().ok().filter(|f: &f64| f.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_like_yaml() {
        let int = |t: &str| parse_int(t).filter(|n| !n.saturated).map(|n| n.value);
        assert_eq!(int("1_000"), Some(1000));
        assert_eq!(int("-0o17"), Some(-15));
        assert_eq!(int("0x1F"), Some(31));
        assert_eq!(int("18446744073709551616"), Some(1 << 64));
        assert_eq!(parse_int("1.0"), None);
        assert_eq!(parse_int("_1"), None);
        assert_eq!(parse_int("0x-1"), None);
        assert!(parse_int(&"9".repeat(60)).is_some_and(|n| n.saturated));
        assert_eq!(parse_float("1e3"), Some(1000.0));
        assert_eq!(parse_float("inf"), None);
        assert_eq!(parse_float("nan"), None);
    }
}
