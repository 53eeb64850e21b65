//! Reading a request body with a size cap and a time limit, answering
//! 413 and 408 as JSON.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, header};
use futures::StreamExt;

use crate::error::{HttpError, HttpResult};

fn too_large(limit: usize) -> HttpError {
    HttpError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("the request body is larger than {} bytes", limit),
    )
}

/// The whole body, at most `limit` bytes, received within `timeout`.
pub(crate) async fn read(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    timeout: Duration,
) -> HttpResult<Bytes> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > u64::try_from(limit).unwrap_or(u64::MAX)) {
        return Err(too_large(limit));
    }
    let collect = async {
        let mut stream = body.into_data_stream();
        let mut first: Option<Bytes> = None;
        let mut rest: Vec<u8> = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                HttpError::bad_request(format!("cannot read the request body: {e}"))
            })?;
            let so_far = first.as_ref().map_or(0, Bytes::len) + rest.len();
            if so_far + chunk.len() > limit {
                return Err(too_large(limit));
            }
            match &first {
                None if rest.is_empty() => first = Some(chunk),
                _ => {
                    if let Some(f) = first.take() {
                        rest.extend_from_slice(&f);
                    }
                    rest.extend_from_slice(&chunk);
                }
            }
        }
        Ok(match first {
            Some(f) => f,
            None => Bytes::from(rest),
        })
    };
    match tokio::time::timeout(timeout, collect).await {
        Ok(r) => r,
        Err(_) => Err(HttpError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request body was not received within {} s",
                timeout.as_secs()
            ),
        )),
    }
}
