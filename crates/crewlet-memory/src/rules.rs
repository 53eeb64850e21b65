//! The rules both backends share (vectors, clocks, input checks), written
//! once so the in-memory twins and PostgreSQL agree to the last detail.

use chrono::{DateTime, SubsecRound, Utc};

use crate::error::MemoryError;
use crate::types::{Episode, EpisodeKind, Page, SkillLimits};

/// Checks a vector against the embedding column width `dim`. Narrower is
/// fine (stored zero-padded, which leaves every cosine unchanged); wider,
/// empty, non-finite or all-zero vectors are refused: the column cannot
/// hold the first, and cosine is undefined for the rest (pgvector would
/// answer NaN and sort such rows arbitrarily).
pub(crate) fn check(what: &str, v: &[f32], dim: usize) -> Result<(), MemoryError> {
    if v.is_empty() {
        return Err(MemoryError::Invalid(format!("{what} is empty")));
    }
    if v.len() > dim {
        return Err(MemoryError::Invalid(format!(
            "{what} has {} dimensions but the embedding column holds {dim}; embed with a model of at most {dim} dimensions (the width is fixed at the first migration)",
            v.len()
        )));
    }
    if v.iter().any(|x| !x.is_finite()) {
        return Err(MemoryError::Invalid(format!(
            "{what} holds a NaN or infinite value"
        )));
    }
    if v.iter().all(|x| *x == 0.0) {
        return Err(MemoryError::Invalid(format!(
            "{what} is all zeros (no direction to compare)"
        )));
    }
    Ok(())
}

/// Checks an optional vector (a row's embedding).
pub(crate) fn check_opt(what: &str, v: Option<&[f32]>, dim: usize) -> Result<(), MemoryError> {
    v.map_or(Ok(()), |v| check(what, v, dim))
}

/// Cosine similarity of two vectors, the shorter one read as zero-padded
/// (the same number pgvector computes over padded columns: `1 - (a <=> b)`).
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let denom = norm(a) * norm(b);
    if denom == 0.0 {
        return 0.0;
    }
    // As pgvector: rounding may step just outside [-1, 1].
    (dot / denom).clamp(-1.0, 1.0) as f32
}

/// PostgreSQL keeps microseconds: the twins truncate the same way, so a
/// round trip returns the same instant from either backend.
pub(crate) fn micros(t: DateTime<Utc>) -> DateTime<Utc> {
    t.trunc_subsecs(6)
}

/// Content that is empty once trimmed is refused everywhere.
pub(crate) fn require_text(what: &str, s: &str) -> Result<(), MemoryError> {
    if s.trim().is_empty() {
        return Err(MemoryError::Invalid(format!("{what} is empty")));
    }
    Ok(())
}

/// A compaction's summary row must be a compacted episode of the same agent.
pub(crate) fn compacted(agent_handle: &str, e: &Episode) -> Result<(), MemoryError> {
    if e.kind != EpisodeKind::Compacted {
        return Err(MemoryError::Invalid(format!(
            "the summary of a compaction of `{agent_handle}` must be a compacted episode, not {}",
            e.kind.as_str()
        )));
    }
    if e.agent_handle != agent_handle {
        return Err(MemoryError::Invalid(format!(
            "a compaction of `{agent_handle}` cannot record a summary for `{}`",
            e.agent_handle
        )));
    }
    Ok(())
}

/// A skill body within `limits.max_body_chars` characters.
pub(crate) fn skill_body(name: &str, body: &str, limits: SkillLimits) -> Result<(), MemoryError> {
    let chars = body.chars().count();
    if chars > limits.max_body_chars {
        return Err(MemoryError::Limit(format!(
            "the body of skill `{name}` has {chars} characters, over the cap of {}; shorten it",
            limits.max_body_chars
        )));
    }
    Ok(())
}

/// The agent already has a skill of that name (any state: names are unique).
pub(crate) fn skill_conflict(agent_handle: &str, name: &str) -> MemoryError {
    MemoryError::Conflict(format!(
        "`{agent_handle}` already has a skill named `{name}`; update it or pick another name"
    ))
}

/// The agent holds as many live skills as it may.
pub(crate) fn skill_cap(agent_handle: &str, limits: SkillLimits) -> MemoryError {
    MemoryError::Limit(format!(
        "`{agent_handle}` already holds {} active or stale skills, the cap; archive one first",
        limits.max_per_agent
    ))
}

/// No such skill.
pub(crate) fn skill_not_found(agent_handle: &str, name: &str) -> MemoryError {
    MemoryError::NotFound(format!("`{agent_handle}` has no skill `{name}`"))
}

/// A profile is keyed by three non-empty names.
pub(crate) fn profile_key(
    observer: &str,
    subject: &str,
    platform: &str,
) -> Result<(), MemoryError> {
    require_text("profile observer", observer)?;
    require_text("profile subject", subject)?;
    require_text("profile platform", platform)
}

/// Merges observed traits over stored ones: a `null` removes the key. A
/// stored value that is not an object (bad data) is replaced by one.
pub(crate) fn merge_traits(
    stored: &mut serde_json::Value,
    observed: serde_json::Map<String, serde_json::Value>,
) {
    if !stored.is_object() {
        *stored = serde_json::Value::Object(serde_json::Map::new());
    }
    if let serde_json::Value::Object(map) = stored {
        for (k, v) in observed {
            if v.is_null() {
                map.remove(&k);
            } else {
                map.insert(k, v);
            }
        }
    }
}

/// Observed traits split for SQL: the object to merge and the keys to drop.
pub(crate) fn split_traits(
    observed: &serde_json::Map<String, serde_json::Value>,
) -> (serde_json::Value, Vec<String>) {
    let mut set = serde_json::Map::new();
    let mut removed = Vec::new();
    for (k, v) in observed {
        if v.is_null() {
            removed.push(k.clone());
        } else {
            set.insert(k.clone(), v.clone());
        }
    }
    (serde_json::Value::Object(set), removed)
}

/// The slice of an ordered listing a page asks for.
pub(crate) fn paged<T>(rows: impl IntoIterator<Item = T>, page: Page) -> Vec<T> {
    rows.into_iter()
        .skip(page.offset)
        .take(page.limit)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosine_reads_the_shorter_vector_as_zero_padded() {
        assert!((cosine(&[1.0, 0.0], &[1.0, 0.0, 0.0]) - 1.0).abs() < 1e-6);
        assert!(
            (cosine(&[1.0, 1.0], &[1.0, 0.0, 5.0]) - (1.0 / (2f32.sqrt() * 26f32.sqrt()))).abs()
                < 1e-6
        );
        assert!((cosine(&[1.0], &[-2.0]) + 1.0).abs() < 1e-6);
    }

    #[test]
    fn unusable_vectors_are_refused_by_name() {
        assert!(check("v", &[1.0, 2.0], 2).is_ok());
        for bad in [
            &[][..],
            &[0.0, 0.0][..],
            &[f32::NAN][..],
            &[1.0, 2.0, 3.0][..],
        ] {
            let err = check("query vector", bad, 2).err().map(|e| e.to_string());
            assert!(
                err.is_some_and(|e| e.starts_with("query vector")),
                "{bad:?}"
            );
        }
    }
}
