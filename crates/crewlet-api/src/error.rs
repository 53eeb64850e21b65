//! The crate's errors: [`ApiError`] for building and serving, [`HttpError`]
//! for one request's answer (JSON `{error, reason}`).

use std::fmt;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use crewlet_config::{ConfigError, Problem};
use crewlet_queue::QueueError;
use crewlet_store::StoreError;
use serde::Serialize;
use utoipa::ToSchema;

/// What can go wrong building or serving the API.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The listening address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Bind { addr: String, reason: String },
    /// The HTTP server stopped with an I/O error.
    #[error("the http server failed: {0}")]
    Serve(#[source] std::io::Error),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Store(#[from] StoreError),

    /// The secret store's keyring or rows are refused.
    #[error(transparent)]
    Secrets(Box<crewlet_store::SecretError>),

    /// The async runtime could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The bootstrap asks for a backend this build does not have.
    #[error("{0}")]
    Unsupported(String),
    /// The bootstrap may not serve on this listener (anonymous reads on an
    /// address that is not loopback without the value that names the risk).
    #[error("{0}")]
    Refused(String),
}

impl From<crewlet_backends::BackendError> for ApiError {
    fn from(e: crewlet_backends::BackendError) -> Self {
        use crewlet_backends::BackendError as B;
        match e {
            B::Queue(e) => Self::Queue(e),
            B::Store(e) => Self::Store(e),
            B::Secrets(e) => Self::Secrets(e),
            other @ (B::NeedsDatabase { .. } | B::Unsupported(_)) => {
                Self::Unsupported(other.to_string())
            }
        }
    }
}

/// The body of every error answer. The `/config` routes add the original
/// engine's fields where it has them (`hint`, `detail`, and on
/// `revision_advanced` `current_revision_id` and `your_base`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable machine-readable code, e.g. `bad_signature`, `not_configured`.
    pub error: String,
    /// What went wrong, in lower case, naming the input.
    pub reason: String,
    /// Located configuration problems (`PUT /config`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<ProblemSchema>>)]
    pub problems: Option<Vec<Problem>>,
    /// What to do about it (`/config` routes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The validation or parse error (`/config` routes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// `revision_advanced`: the active revision now (uuid), `null` if none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = Uuid, nullable)]
    pub current_revision_id: Option<serde_json::Value>,
    /// `revision_advanced` on `PUT /config`: the `If-Match` sent, `null` if none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, nullable)]
    pub your_base: Option<serde_json::Value>,
}

/// One problem in a configuration document.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Problem)]
pub struct ProblemSchema {
    /// The source (`request body`).
    pub file: String,
    /// YAML path of the offending node, e.g. `units[0].roles[2].handle`.
    pub path: String,
    pub line: Option<u32>,
    pub column: Option<u32>,
    pub message: String,
}

/// One request's failure: a status, a code, a reason and optionally
/// `Retry-After` and located problems.
#[derive(Debug, Clone)]
pub struct HttpError {
    pub status: StatusCode,
    pub error: &'static str,
    pub reason: String,
    pub retry_after: Option<u64>,
    pub problems: Option<Vec<Problem>>,
    /// Fields of the original engine's error bodies, see [`ErrorBody`]
    /// (boxed: most errors have none, and `HttpError` travels in `Result`s).
    pub extra: Option<Box<ErrorExtra>>,
}

/// The optional fields of [`ErrorBody`] beyond `error` and `reason`.
#[derive(Debug, Clone, Default)]
pub struct ErrorExtra {
    pub hint: Option<String>,
    pub detail: Option<String>,
    /// `Some(Value::Null)` serializes as `null`; `None` leaves it out.
    pub current_revision_id: Option<serde_json::Value>,
    pub your_base: Option<serde_json::Value>,
}

impl HttpError {
    pub fn new(status: StatusCode, error: &'static str, reason: impl Into<String>) -> Self {
        Self {
            status,
            error,
            reason: reason.into(),
            retry_after: None,
            problems: None,
            extra: None,
        }
    }

    /// The extra fields, created on first use.
    pub fn extra_mut(&mut self) -> &mut ErrorExtra {
        self.extra.get_or_insert_with(Default::default)
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.extra_mut().hint = Some(hint.into());
        self
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.extra_mut().detail = Some(detail.into());
        self
    }

    pub fn bad_request(reason: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", reason)
    }

    pub fn not_found(reason: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", reason)
    }

    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    pub fn with_problems(mut self, problems: Vec<Problem>) -> Self {
        self.problems = Some(problems);
        self
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.error,
            self.reason
        )
    }
}

impl From<StoreError> for HttpError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::InvalidInput { .. } => Self::bad_request(e.to_string()),
            StoreError::NotFound { .. } => Self::not_found(e.to_string()),
            StoreError::Conflict { .. } => {
                Self::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
            StoreError::Unreachable { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                e.to_string(),
            )
            .retry_after(5),
            _ => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_error",
                e.to_string(),
            ),
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let extra = self.extra.map(|e| *e).unwrap_or_default();
        let body = ErrorBody {
            error: self.error.to_owned(),
            reason: self.reason,
            problems: self.problems,
            hint: extra.hint,
            detail: extra.detail,
            current_revision_id: extra.current_revision_id,
            your_base: extra.your_base,
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The JSON answer of a handler.
pub type HttpResult<T> = Result<T, HttpError>;
