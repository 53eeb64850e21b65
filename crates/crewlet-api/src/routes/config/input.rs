//! What a `/config` write reads: a YAML or JSON body (its `Content-Type`,
//! size and time limits, UTF-8) that must be a mapping.

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use crewlet_config::check_company;
use serde_json::{Map, Value};

use crate::error::{HttpError, HttpResult};
use crate::routes::body;
use crate::state::ApiState;

/// Where a body comes from, in problems.
pub(super) const BODY_SOURCE: &str = "request body";
/// Body types the `/config` writes read (YAML, or JSON which is YAML too).
const BODY_TYPES: [&str; 5] = [
    "application/yaml",
    "application/x-yaml",
    "text/yaml",
    "text/x-yaml",
    "application/json",
];

pub(super) fn invalid_body(reason: impl Into<String>) -> HttpError {
    let reason = reason.into();
    HttpError::new(StatusCode::BAD_REQUEST, "invalid_body", reason.clone()).detail(reason)
}

/// `Content-Type` must be one of [`BODY_TYPES`] (parameters such as
/// `charset` are ignored), else 415. A body without one is read as YAML.
fn check_content_type(headers: &HeaderMap) -> HttpResult<()> {
    let unsupported = |what: String| {
        HttpError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "{what}; the /config routes read YAML or JSON: send Content-Type {}",
                BODY_TYPES.join(", ")
            ),
        )
    };
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = value
        .to_str()
        .map_err(|_| unsupported("Content-Type is not text".into()))?;
    let essence = text
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if BODY_TYPES.contains(&essence.as_str()) {
        Ok(())
    } else {
        let shown: String = essence.chars().take(100).collect();
        Err(unsupported(format!(
            "Content-Type `{shown}` is not accepted"
        )))
    }
}

/// The body of a write as text: its `Content-Type` checked (415), at most
/// `config_body_limit` bytes (413), UTF-8 (400 `invalid_body`).
pub(super) async fn read_text(
    state: &ApiState,
    request: Request,
) -> HttpResult<(HeaderMap, String)> {
    let (parts, raw) = request.into_parts();
    check_content_type(&parts.headers)?;
    let limits = state.inner().limits;
    let bytes = body::read(
        &parts.headers,
        raw,
        limits.config_body_limit,
        limits.body_timeout,
    )
    .await?;
    let text = String::from_utf8(bytes.to_vec())
        .map_err(|_| invalid_body("the request body is not UTF-8 text"))?;
    Ok((parts.headers, text))
}

/// A body as a mapping, parsed as YAML (JSON is YAML): 400 `invalid_body`
/// when it is empty, not YAML or JSON (with the located syntax error), or
/// not a mapping.
pub(super) fn parse_mapping(text: &str) -> HttpResult<Map<String, Value>> {
    if text.trim().is_empty() {
        return Err(invalid_body("empty request body"));
    }
    match serde_saphyr::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(invalid_body("request body must be a mapping")),
        // The company checker locates the syntax error (line, column).
        Err(e) => {
            let mut err = invalid_body(format!("the request body is not YAML or JSON: {e}"));
            if let Err(problems) = check_company(BODY_SOURCE, text) {
                err = err.with_problems(problems);
            }
            Err(err)
        }
    }
}
