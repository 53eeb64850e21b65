//! A configuration file's bytes as text. YAML files are UTF-8; a file that
//! is not gets one located problem (the byte offset of the first byte that
//! is not UTF-8, and its line and column), not a bare read error.

use crate::error::Problem;
use crate::yaml::{Loc, YamlPath};

/// `bytes` as UTF-8 text, or the problem that says where it stops being
/// UTF-8. `source` names the file in the problem.
pub fn decode_utf8<'a>(source: &str, bytes: &'a [u8]) -> Result<&'a str, Problem> {
    let e = match std::str::from_utf8(bytes) {
        Ok(text) => return Ok(text),
        Err(e) => e,
    };
    let offset = e.valid_up_to();
    let valid = bytes.get(..offset).unwrap_or_default();
    let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
    // The bytes before `offset` are valid UTF-8, so this always succeeds.
    let column = std::str::from_utf8(valid.get(line_start..).unwrap_or_default())
        .map_or(0, |s| s.chars().count())
        + 1;
    let loc = Loc {
        line: u32::try_from(line).unwrap_or(u32::MAX),
        column: u32::try_from(column).unwrap_or(u32::MAX),
    };
    let byte = bytes.get(offset).copied().unwrap_or_default();
    let message = if bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]) {
        "the file is UTF-16 (it starts with a UTF-16 byte order mark); save it as UTF-8".to_owned()
    } else if e.error_len().is_none() {
        format!(
            "the file is not UTF-8: it ends in the middle of a character (byte offset {offset}, line {line}); save it as UTF-8"
        )
    } else {
        format!(
            "the file is not UTF-8: byte 0x{byte:02X} at byte offset {offset} (line {line}, column {column}) is not valid UTF-8; save the file as UTF-8"
        )
    };
    Err(Problem::new(source, &YamlPath::root(), Some(loc), message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_passes_through() {
        assert_eq!(
            decode_utf8("f", "name: Café\n".as_bytes()),
            Ok("name: Café\n")
        );
    }

    #[test]
    fn the_first_bad_byte_is_located() {
        let bytes = b"name: Acme\nmission: caf\xE9 au lait\n";
        let p = decode_utf8("company.yaml", bytes).err();
        let p = p.as_ref();
        assert_eq!(p.and_then(|p| p.line), Some(2));
        assert_eq!(p.and_then(|p| p.column), Some(13));
        let message = p.map(|p| p.message.as_str()).unwrap_or_default();
        assert!(
            message.contains("byte 0xE9 at byte offset 23 (line 2, column 13)"),
            "{message}"
        );
    }

    #[test]
    fn columns_count_characters_and_truncation_is_named() {
        let p = decode_utf8("f", b"a: \xC3\xA9\xFF\n").err();
        assert_eq!(p.as_ref().and_then(|p| p.column), Some(5));
        let p = decode_utf8("f", b"a: b\n\xE2\x82").err();
        let p = p.as_ref();
        assert_eq!(p.and_then(|p| p.line), Some(2));
        assert!(p.is_some_and(|p| p.message.contains("middle of a character")));
        let p = decode_utf8("f", b"\xFF\xFEn\x00").err();
        assert!(p.is_some_and(|p| p.message.contains("UTF-16")));
    }
}
