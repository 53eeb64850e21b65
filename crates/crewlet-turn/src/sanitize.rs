//! Cleaning a tool result before the model sees it: binary is rejected,
//! terminal escapes and control characters are stripped, secrets are
//! redacted, and the text is capped at 32 KB with a marker saying so.

use std::sync::LazyLock;

use regex::Regex;

/// Largest tool result the model sees, in bytes (UTF-8).
pub const MAX_TOOL_RESULT_BYTES: usize = 32 * 1024;

/// Share of suspicious characters above which text counts as binary.
const BINARY_SHARE: f64 = 0.10;

/// What a secret is replaced with: `[redacted <kind>]`.
struct SecretPattern {
    kind: &'static str,
    regex: Regex,
}

const SECRET_PATTERNS: &[(&str, &str)] = &[
    // PEM blocks first, so a key inside one is not matched piecemeal; an
    // unterminated private key block is redacted to the end.
    (
        "pem block",
        r"-----BEGIN ([A-Z0-9 ]+)-----[\s\S]*?(-----END [A-Z0-9 ]+-----|\z)",
    ),
    // OpenAI / Anthropic style keys: sk-..., sk-proj-..., sk-ant-api03-...
    ("api key", r"\bsk-[A-Za-z0-9_\-]{16,}"),
    // Slack tokens: xoxb-, xoxp-, xoxa-, xoxr-, xoxs-, xoxe- ...
    ("slack token", r"\bxox[a-z]-[A-Za-z0-9\-]{8,}"),
    // GitHub tokens: ghp_, gho_, ghu_, ghs_, ghr_, and fine-grained github_pat_.
    (
        "github token",
        r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
    ),
    ("gitlab token", r"\bglpat-[A-Za-z0-9_\-]{16,}"),
    ("aws access key", r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
];

static SECRETS: LazyLock<Vec<SecretPattern>> = LazyLock::new(|| {
    SECRET_PATTERNS
        .iter()
        .filter_map(|(kind, pattern)| {
            Regex::new(pattern)
                .ok()
                .map(|regex| SecretPattern { kind, regex })
        })
        .collect()
});

/// CSI / OSC terminal escape sequences (colours, cursor moves, titles).
static ANSI: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])").ok()
});

/// Why a result was not shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    #[error("tool result rejected: it looks like binary data ({bytes} bytes), not text")]
    Binary { bytes: usize },
}

/// Cleans raw bytes from a tool: invalid UTF-8 beyond a trace is binary.
pub fn clean_tool_bytes(raw: &[u8]) -> Result<String, Rejected> {
    let text = String::from_utf8_lossy(raw);
    clean_tool_result(&text)
}

/// Cleans a tool's text result (see the module doc for the steps).
pub fn clean_tool_result(raw: &str) -> Result<String, Rejected> {
    if looks_binary(raw) {
        return Err(Rejected::Binary { bytes: raw.len() });
    }
    let without_escapes = match ANSI.as_ref() {
        Some(re) if raw.contains('\x1b') => re.replace_all(raw, ""),
        _ => std::borrow::Cow::Borrowed(raw),
    };
    let stripped = strip_controls(&without_escapes);
    let redacted = redact_secrets(&stripped);
    Ok(cap(&redacted, MAX_TOOL_RESULT_BYTES))
}

/// Replaces every known secret shape with `[redacted <kind>]`.
pub fn redact_secrets(text: &str) -> String {
    let mut out = text.to_owned();
    for p in SECRETS.iter() {
        if p.regex.is_match(&out) {
            let replacement = format!("[redacted {}]", p.kind);
            out = p.regex.replace_all(&out, replacement.as_str()).into_owned();
        }
    }
    out
}

fn looks_binary(text: &str) -> bool {
    if text.contains('\0') {
        return true;
    }
    let mut total = 0usize;
    let mut odd = 0usize;
    for c in text.chars().take(8192) {
        total += 1;
        if c == '\u{FFFD}' || (c.is_control() && !matches!(c, '\n' | '\r' | '\t' | '\x1b')) {
            odd += 1;
        }
    }
    total > 0 && (odd as f64 / total as f64) > BINARY_SHARE
}

fn strip_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => {
                // \r\n -> \n; a lone \r (progress bars) becomes a newline.
                if chars.peek() != Some(&'\n') {
                    out.push('\n');
                }
            }
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            // Zero-width and bidi controls can hide text from a human reader.
            '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' => {}
            c => out.push(c),
        }
    }
    out
}

pub(crate) fn cap(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let marker_room = 96;
    let mut end = max.saturating_sub(marker_room);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[truncated: showing the first {} of {} bytes]",
        &text[..end],
        end,
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_secret_pattern_compiles() {
        assert_eq!(SECRETS.len(), SECRET_PATTERNS.len());
        assert!(ANSI.is_some());
    }

    #[test]
    fn secrets_are_redacted() {
        let cases = [
            (
                "key sk-proj-AbCdEf0123456789xyzXYZ end",
                "[redacted api key]",
            ),
            ("sk-ant-api03-abcdefghijklmnopqrstu", "[redacted api key]"),
            ("slack xoxb-1234567890-abcdefghij", "[redacted slack token]"),
            ("xoxp-0000-1111-2222-abcdef", "[redacted slack token]"),
            (
                "gh ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                "[redacted github token]",
            ),
            ("glpat-xxxxxxxxxxxxxxxxxxxx", "[redacted gitlab token]"),
            ("aws AKIAIOSFODNN7EXAMPLE here", "[redacted aws access key]"),
        ];
        for (input, expected) in cases {
            let out = redact_secrets(input);
            assert!(out.contains(expected), "{input} -> {out}");
        }
        assert_eq!(
            redact_secrets("id AKIAIOSFODNN7EXAMPLE."),
            "id [redacted aws access key]."
        );
    }

    #[test]
    fn pem_blocks_are_redacted_whole_even_when_cut() {
        let pem = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----\nafter";
        assert_eq!(redact_secrets(pem), "before\n[redacted pem block]\nafter");
        let cut = "x -----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA";
        assert_eq!(redact_secrets(cut), "x [redacted pem block]");
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        let text = "ask-me about skills; the xox game; AKIA is a prefix; sk-short";
        assert_eq!(redact_secrets(text), text);
    }

    #[test]
    fn control_characters_and_escapes_are_stripped() -> Result<(), Rejected> {
        let out = clean_tool_result("\x1b[31mred\x1b[0m\tok\r\nline\x07 two\rthree\u{202E}x")?;
        assert_eq!(out, "red\tok\nline two\nthreex");
        Ok(())
    }

    #[test]
    fn binary_is_rejected() {
        assert_eq!(
            clean_tool_result("PK\u{3}\u{4}\0\0data"),
            Err(Rejected::Binary { bytes: 10 })
        );
        let png = [
            0x89u8, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0xff, 0xfe, 0xfd,
        ];
        assert!(clean_tool_bytes(&png).is_err());
        assert!(clean_tool_bytes("plain text é".as_bytes()).is_ok());
    }

    #[test]
    fn results_are_capped_at_32kb_with_a_marker() -> Result<(), Rejected> {
        let big = "é".repeat(40_000); // 80 000 bytes
        let out = clean_tool_result(&big)?;
        assert!(out.len() <= MAX_TOOL_RESULT_BYTES, "{}", out.len());
        assert!(
            out.ends_with("of 80000 bytes]"),
            "{}",
            &out[out.len() - 60..]
        );
        let small = "x".repeat(100);
        assert_eq!(clean_tool_result(&small)?, small);
        Ok(())
    }

    #[test]
    fn secrets_are_redacted_before_the_cap_cuts() -> Result<(), Rejected> {
        // Cut first, the cap would keep "sk-abcdefghijk": too short to match.
        let mut text = "a".repeat(MAX_TOOL_RESULT_BYTES - 110);
        text.push_str(" sk-abcdefghijklmnopqrstuvwxyz0123456789");
        text.push(' ');
        text.push_str(&"b".repeat(200));
        let out = clean_tool_result(&text)?;
        assert!(!out.contains("sk-abc"), "partial secret leaked");
        assert!(out.contains("[truncated"));
        Ok(())
    }
}
