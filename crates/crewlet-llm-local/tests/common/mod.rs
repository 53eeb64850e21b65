//! Shared by the local model's integration tests: finding the real model
//! file, loading it, and checking answers against JSON schemas.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crewlet_llm::{Completion, CompletionRequest, LlmError};
use crewlet_llm::{LlmProvider, StreamEvent};
use crewlet_llm_local::{LocalModel, LocalProvider, LocalSettings};
use futures::StreamExt;
use serde_json::Value;

/// The catalogue name of the model these tests run.
pub use crewlet_test_support::services::LOCAL_MODEL as MODEL_NAME;
pub use crewlet_test_support::services::require_local_model;

/// Loads the model at `path` (a test failure if it cannot be).
pub fn load(path: &Path, context: Option<usize>, max_sessions: usize) -> Arc<LocalModel> {
    match LocalModel::load(path, context, max_sessions) {
        Ok(m) => Arc::new(m),
        Err(e) => panic!("the real model does not load: {e}"),
    }
}

/// A provider over `model`: greedy decoding, `max_concurrent` at once.
pub fn provider(model: Arc<LocalModel>, max_concurrent: usize) -> LocalProvider {
    LocalProvider::new(
        LocalSettings {
            name: "local".into(),
            model: MODEL_NAME.into(),
            max_tokens: None,
            temperature: Some(0.0),
            max_concurrent,
            decide_at_once: true,
        },
        model,
    )
}

/// Every event of one streamed answer, the `Completed` one last.
pub async fn stream_all(
    provider: &LocalProvider,
    request: &CompletionRequest,
) -> Result<(Vec<StreamEvent>, Completion), LlmError> {
    let mut stream = provider.stream(request).await?;
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        match event? {
            StreamEvent::Completed(c) => return Ok((events, c)),
            other => events.push(other),
        }
    }
    panic!("the stream ended without a Completed event after {events:?}");
}

/// A fresh directory of its own for `test`.
pub fn temp_dir(test: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!(
        "crewlet-llm-local-{test}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("create the test's temp dir");
    dir
}

/// Checks `value` against `schema` for the JSON Schema keywords these tests'
/// tools use: `type`, `properties`, `required`, `additionalProperties:
/// false`, `enum`, `const`, `items`, `minItems`/`maxItems`,
/// `minLength`/`maxLength`, `minimum`/`maximum`. Anything else in the
/// schema is an error of the test, not a pass.
pub fn check_schema(schema: &Value, value: &Value) -> Result<(), String> {
    check_at(schema, value, "$")
}

fn check_at(schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let Some(schema) = schema.as_object() else {
        return Err(format!("{at}: the schema is not an object: {schema}"));
    };
    const KNOWN: &[&str] = &[
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "const",
        "items",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "description",
    ];
    if let Some(k) = schema.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(format!("{at}: the checker does not know the keyword `{k}`"));
    }
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        let ok = match t {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "null" => value.is_null(),
            other => return Err(format!("{at}: unknown type `{other}`")),
        };
        if !ok {
            return Err(format!("{at}: {value} is not of type {t}"));
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {allowed:?}"));
    }
    if let Some(c) = schema.get("const")
        && c != value
    {
        return Err(format!("{at}: {value} is not {c}"));
    }
    if let Some(s) = value.as_str() {
        let chars = s.chars().count() as u64;
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && chars > max
        {
            return Err(format!("{at}: {chars} characters, at most {max} allowed"));
        }
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && chars < min
        {
            return Err(format!("{at}: {chars} characters, at least {min} needed"));
        }
    }
    if let Some(n) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            return Err(format!("{at}: {n} is below the minimum {min}"));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            return Err(format!("{at}: {n} is above the maximum {max}"));
        }
    }
    if let Some(items) = value.as_array() {
        let n = items.len() as u64;
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && n > max
        {
            return Err(format!("{at}: {n} items, at most {max} allowed"));
        }
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && n < min
        {
            return Err(format!("{at}: {n} items, at least {min} needed"));
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, item) in items.iter().enumerate() {
                check_at(item_schema, item, &format!("{at}[{i}]"))?;
            }
        }
    }
    if let Some(object) = value.as_object() {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    return Err(format!("{at}: the required key `{name}` is missing"));
                }
            }
        }
        for (key, v) in object {
            match properties.and_then(|p| p.get(key)) {
                Some(s) => check_at(s, v, &format!("{at}.{key}"))?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("{at}: the key `{key}` is not allowed"));
                }
                None => {}
            }
        }
    }
    Ok(())
}
