//! `GET /dashboard` and `GET /dashboard/assets/{file}`: the founder's page,
//! compiled into the binary from `crates/crewlet-api/dashboard/` (plain
//! HTML, CSS and ES modules: no bundler, nothing fetched from elsewhere).
//! Each file is served with its type, a strong `ETag` (SHA-256 of its
//! bytes), `Cache-Control: no-cache` (revalidate: a new binary may carry a
//! new page), gzip when the client accepts it (compressed once, on first
//! use), and a Content-Security-Policy that allows only this origin.

use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use include_dir::{Dir, include_dir};
use sha2::{Digest, Sha256};

use crate::error::HttpError;

static ASSETS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/dashboard");

/// Scripts, styles, images and sockets from this origin only; no inline
/// script or style, no framing.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// One embedded file, ready to serve.
struct Asset {
    bytes: &'static [u8],
    gzip: Vec<u8>,
    etag: String,
    content_type: &'static str,
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") | Some("mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("json") => "application/json",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    }
}

/// Every embedded file by name, prepared once.
fn assets() -> &'static [(&'static str, Asset)] {
    static CELL: OnceLock<Vec<(&'static str, Asset)>> = OnceLock::new();
    CELL.get_or_init(|| {
        ASSETS
            .files()
            .filter_map(|f| {
                let name = f.path().to_str()?;
                let bytes = f.contents();
                Some((
                    name,
                    Asset {
                        bytes,
                        gzip: crate::gzip::compress(bytes, flate2::Compression::best()),
                        etag: format!("\"{}\"", hex::encode(&Sha256::digest(bytes)[..16])),
                        content_type: content_type(name),
                    },
                ))
            })
            .collect()
    })
}

fn find(name: &str) -> Option<&'static Asset> {
    assets().iter().find(|(n, _)| *n == name).map(|(_, a)| a)
}

/// The total size of the page's assets, raw and gzip-compressed (what a
/// first visit downloads).
pub fn page_weight() -> (usize, usize) {
    assets().iter().fold((0, 0), |(raw, gz), (_, a)| {
        (raw + a.bytes.len(), gz + a.gzip.len())
    })
}

fn serve(asset: &'static Asset, headers: &HeaderMap) -> Response {
    let etag = HeaderValue::from_str(&asset.etag).unwrap_or(HeaderValue::from_static("\"\""));
    let mut common = vec![
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (header::ETAG, etag),
        (header::VARY, HeaderValue::from_static("accept-encoding")),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
    ];
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == asset.etag));
    if fresh {
        let mut r = StatusCode::NOT_MODIFIED.into_response();
        for (k, v) in common {
            r.headers_mut().insert(k, v);
        }
        return r;
    }
    common.push((
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    ));
    let mut r = if crate::gzip::accepted(headers) && asset.gzip.len() < asset.bytes.len() {
        common.push((header::CONTENT_ENCODING, HeaderValue::from_static("gzip")));
        asset.gzip.clone().into_response()
    } else {
        asset.bytes.into_response()
    };
    // Insert, not extend: the body's default content type is replaced.
    for (k, v) in common {
        r.headers_mut().insert(k, v);
    }
    r
}

/// The dashboard page.
pub async fn page(headers: HeaderMap) -> Response {
    match find("index.html") {
        Some(a) => serve(a, &headers),
        None => HttpError::not_found("this build carries no dashboard").into_response(),
    }
}

/// One of the page's files.
pub async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match find(&file).filter(|_| !file.contains('/')) {
        Some(a) => serve(a, &headers),
        None => HttpError::not_found(format!("the dashboard has no file `{file}`")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_the_page_references_is_embedded_and_typed() {
        let index = std::str::from_utf8(find("index.html").map(|a| a.bytes).unwrap_or_default())
            .unwrap_or_default();
        assert!(index.contains("/dashboard/assets/app.js"), "{index}");
        for (name, asset) in assets() {
            assert_ne!(asset.content_type, "application/octet-stream", "{name}");
            assert!(!name.contains('/'), "flat folder: {name}");
        }
        // Module imports name files that exist.
        for (name, asset) in assets().iter().filter(|(n, _)| n.ends_with(".js")) {
            let text = std::str::from_utf8(asset.bytes).unwrap_or_default();
            for import in text.split("from './").skip(1) {
                let file = import.split('\'').next().unwrap_or_default();
                assert!(find(file).is_some(), "{name} imports missing {file}");
            }
        }
        let (raw, gz) = page_weight();
        assert!(gz < raw && gz < 300 * 1024, "page weight {gz} compressed");
    }
}
