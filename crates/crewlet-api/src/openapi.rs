//! The OpenAPI document, generated from the routes (`docs/openapi.json` is
//! its committed copy; `cargo xtask schema` rewrites it).

use std::sync::OnceLock;

/// The document.
pub fn document() -> utoipa::openapi::OpenApi {
    crate::routes::router().into_openapi()
}

/// The document as pretty JSON, ending in a newline (cached).
pub fn json() -> String {
    static JSON: OnceLock<String> = OnceLock::new();
    JSON.get_or_init(|| {
        let mut text = document().to_pretty_json().unwrap_or_else(|e| {
            format!("{{\"error\": \"cannot write the openapi document: {e}\"}}")
        });
        text.push('\n');
        text
    })
    .clone()
}
