//! What a company must pass before it becomes a revision: validation (as
//! a 400 `validation_error`) and Tier A's `security` block (400
//! `not_allowed`), for a new body or an earlier revision alike.

use axum::http::StatusCode;
use crewlet_config::{Company, Problem};
use crewlet_store::ConfigRevision;

use crate::error::{HttpError, HttpResult};
use crate::state::ApiState;

pub(super) fn validation_error(problems: Vec<Problem>) -> HttpError {
    let detail = problems
        .iter()
        .map(|p| {
            if p.path.is_empty() {
                p.message.clone()
            } else {
                format!("{}: {}", p.path, p.message)
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    HttpError::new(
        StatusCode::BAD_REQUEST,
        "validation_error",
        format!(
            "the company configuration has {} problem{}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        ),
    )
    .detail(detail)
    .with_problems(problems)
}

/// What Tier A's `security` refuses in `company`, as a 400 with every problem.
pub(super) fn check_policy(
    state: &ApiState,
    source: &str,
    text: Option<&str>,
    company: &Company,
) -> HttpResult<()> {
    let problems = state
        .inner()
        .security
        .company_problems(source, text, company);
    if problems.is_empty() {
        return Ok(());
    }
    Err(HttpError::new(
        StatusCode::BAD_REQUEST,
        "not_allowed",
        format!(
            "the company asks for {} thing{} the bootstrap file's `security` block does not allow; nothing was changed",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" }
        ),
    )
    .with_problems(problems))
}

/// The company of an earlier revision, checked as a new write would be.
pub(super) fn stored_company(state: &ApiState, target: &ConfigRevision) -> HttpResult<Company> {
    let id = target.uuid;
    let company: Company = serde_json::from_value(target.payload.clone()).map_err(|e| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "validation_error",
            format!("revision {id} is not a company any more"),
        )
        .detail(e.to_string())
    })?;
    company
        .validate()
        .map_err(|e| validation_error(e.problems().to_vec()))?;
    check_policy(state, &format!("revision {id}"), None, &company)?;
    Ok(company)
}
