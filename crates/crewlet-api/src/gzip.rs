//! gzip for responses: whether a client takes it, and the compression.

use axum::http::{HeaderMap, header};

/// The client's `Accept-Encoding` names gzip.
pub(crate) fn accepted(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")))
}

/// `bytes` compressed at `level`; empty only if the encoder failed.
pub(crate) fn compress(bytes: &[u8], level: flate2::Compression) -> Vec<u8> {
    use std::io::Write as _;
    let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(bytes.len() / 4), level);
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(bytes);
    enc.finish().unwrap_or_default()
}
