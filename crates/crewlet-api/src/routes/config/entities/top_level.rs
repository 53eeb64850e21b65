//! The routes that read and set a few top-level keys of the company
//! (`/config/identity`, `/config/budgets`): what they share.

use axum::extract::Request;
use axum::response::Response;
use serde_json::{Map, Value};

use super::{Edit, active_document, apply, body_problem, read_body};
use crate::auth::Caller;
use crate::error::HttpResult;
use crate::state::ApiState;

/// The `fields` the active company sets.
pub(super) async fn read(state: &ApiState, fields: &[&str]) -> HttpResult<Value> {
    let doc = active_document(state).await?;
    let found: Map<String, Value> = fields
        .iter()
        .filter_map(|k| doc.get(*k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    Ok(Value::Object(found))
}

/// Sets the `fields` the body has (the others stay; `null` unsets one) as a
/// new revision summarised `Updated {what} (keys)`. A key outside `fields`
/// is refused with `elsewhere`, which says where it is set instead.
pub(super) async fn write(
    state: &ApiState,
    caller: &Caller,
    request: Request,
    fields: &[&str],
    what: &str,
    elsewhere: &str,
) -> HttpResult<Response> {
    let (headers, body) = read_body(state, request).await?;
    if let Some(other) = body.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(body_problem(
            other,
            format!(
                "`{other}` is not part of the {what} ({}); {elsewhere}",
                fields.join(", ")
            ),
        ));
    }
    apply(state, caller, &headers, |doc| {
        let mut changed = Vec::new();
        for (k, v) in body {
            if doc.get(&k) != Some(&v) {
                changed.push(k.clone());
            }
            if v.is_null() {
                doc.remove(&k);
            } else {
                doc.insert(k, v);
            }
        }
        Ok(Edit::new(super::updated(what, &changed)))
    })
    .await
}
