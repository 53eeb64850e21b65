//! Shared signature checks. Every comparison is constant-time.

use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{Source, WebhookError};

type HmacSha256 = Hmac<Sha256>;

/// How far a signed timestamp may be from `now` (Slack's and Standard
/// Webhooks' recommendation).
pub(crate) const TOLERANCE_SECS: i64 = 300;

pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    // HMAC accepts keys of any length, so this never fails in practice.
    let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
        return Vec::new();
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

/// Does `tag` equal HMAC-SHA256(key, parts...)? Constant-time.
pub(crate) fn hmac_matches(key: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
    let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
        return false;
    };
    for part in parts {
        mac.update(part);
    }
    mac.verify_slice(tag).is_ok()
}

/// Checks a hex HMAC-SHA256 of `body`, with an optional `prefix` such as
/// `sha256=` that must be present.
pub(crate) fn verify_hex_hmac(
    from: Source,
    header: &'static str,
    value: &str,
    prefix: &str,
    secret: &[u8],
    parts: &[&[u8]],
) -> Result<(), WebhookError> {
    let bad = || WebhookError::BadSignature { from, header };
    let hex_part = value.strip_prefix(prefix).ok_or_else(bad)?;
    let tag = hex::decode(hex_part.trim()).map_err(|_| bad())?;
    if hmac_matches(secret, parts, &tag) {
        Ok(())
    } else {
        Err(bad())
    }
}

/// Constant-time equality of two secrets of possibly different lengths:
/// compares their SHA-256 digests, so not even the length leaks.
pub(crate) fn secrets_equal(a: &[u8], b: &[u8]) -> bool {
    let da = Sha256::digest(a);
    let db = Sha256::digest(b);
    bool::from(da.as_slice().ct_eq(db.as_slice()))
}

/// The configured secret, or `MissingSecret` when absent or blank (an unset
/// `${VAR}` must never turn into "any signature made with the empty key").
pub(crate) fn require_secret<'a>(
    from: Source,
    key: &'static str,
    secret: Option<&'a [u8]>,
) -> Result<&'a [u8], WebhookError> {
    match secret {
        Some(s) if !s.iter().all(u8::is_ascii_whitespace) => Ok(s),
        _ => Err(WebhookError::MissingSecret { from, key }),
    }
}

/// Checks a unix-seconds timestamp header against `now` ± 300 s.
pub(crate) fn check_timestamp(
    from: Source,
    header: &'static str,
    value: &str,
    now: DateTime<Utc>,
) -> Result<i64, WebhookError> {
    let stale = || WebhookError::StaleTimestamp {
        from,
        header,
        timestamp: value.chars().take(32).collect(),
        tolerance_secs: TOLERANCE_SECS,
    };
    let ts: i64 = value.trim().parse().map_err(|_| stale())?;
    if now.timestamp().abs_diff(ts) > TOLERANCE_SECS.unsigned_abs() {
        return Err(stale());
    }
    Ok(ts)
}

/// A dedupe key for sources whose delivery has no id: the body's SHA-256,
/// which is the same for every retry of one delivery.
pub(crate) fn body_key(body: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_known_answer_rfc4231_case_2() {
        // RFC 4231 test case 2: key "Jefe".
        let tag = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex::encode(tag),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn secrets_compare_regardless_of_length() {
        assert!(secrets_equal(b"token", b"token"));
        assert!(!secrets_equal(b"token", b"token2"));
        assert!(!secrets_equal(b"", b"x"));
    }

    #[test]
    fn blank_secrets_are_missing() {
        assert!(require_secret(Source::Github, "k", None).is_err());
        assert!(require_secret(Source::Github, "k", Some(b"")).is_err());
        assert!(require_secret(Source::Github, "k", Some(b"  ")).is_err());
        assert!(require_secret(Source::Github, "k", Some(b"s")).is_ok());
    }

    #[test]
    fn timestamps_within_tolerance() {
        let now = DateTime::from_timestamp(1_000_000, 0).unwrap();
        assert!(check_timestamp(Source::Slack, "h", "1000300", now).is_ok());
        assert!(check_timestamp(Source::Slack, "h", "999700", now).is_ok());
        assert!(check_timestamp(Source::Slack, "h", "1000301", now).is_err());
        assert!(check_timestamp(Source::Slack, "h", "999699", now).is_err());
        assert!(check_timestamp(Source::Slack, "h", "soon", now).is_err());
    }
}
