//! Small text helpers the workers share: clipping, reading a JSON answer
//! out of a model's text, tool-set similarity.

use std::collections::BTreeSet;

use serde_json::Value;

/// At most `max` characters of `text` (trimmed), with `...` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(3)).collect();
    out.push_str("...");
    out
}

/// The first JSON value of the given shape in a model's answer: the whole
/// text, a fenced block, or the first `{`/`[` to its matching bracket.
pub(crate) fn json_in(text: &str, open: char) -> Option<Value> {
    let text = text.trim();
    if let Ok(v) = serde_json::from_str::<Value>(text)
        && shape_ok(&v, open)
    {
        return Some(v);
    }
    let close = if open == '{' { '}' } else { ']' };
    let start = text.find(open)?;
    let end = text.rfind(close)?;
    if end <= start {
        return None;
    }
    serde_json::from_str::<Value>(&text[start..=end])
        .ok()
        .filter(|v| shape_ok(v, open))
}

fn shape_ok(v: &Value, open: char) -> bool {
    if open == '{' {
        v.is_object()
    } else {
        v.is_array()
    }
}

/// Distinct indices from a JSON array answer (`[3, 0, 7]`), in order, at
/// most `max`. Numbers written as strings count; anything else is skipped.
pub(crate) fn indices(text: &str, max: usize) -> Option<Vec<usize>> {
    let Value::Array(items) = json_in(text, '[')? else {
        return None;
    };
    let mut out: Vec<usize> = Vec::new();
    for item in items {
        let n = match &item {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        if let Some(i) = n.and_then(|n| usize::try_from(n).ok())
            && !out.contains(&i)
        {
            out.push(i);
        }
        if out.len() >= max {
            break;
        }
    }
    Some(out)
}

/// A string field of a JSON object, trimmed, empty as `None`.
pub(crate) fn field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Jaccard similarity of two tool sequences taken as sets.
pub(crate) fn jaccard(a: &[String], b: &[String]) -> f64 {
    let a: BTreeSet<&str> = a.iter().map(String::as_str).collect();
    let b: BTreeSet<&str> = b.iter().map(String::as_str).collect();
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let inter = a.intersection(&b).count() as f64;
    let union = a.union(&b).count() as f64;
    inter / union
}

/// A skill name as the store keeps it: lower-case words joined by `-`.
pub(crate) fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.trim().chars() {
        if c.is_alphanumeric() {
            out.extend(c.to_lowercase());
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out = out.trim_end_matches('-').to_owned();
    clip(&out, 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_json_out_of_chatty_answers() {
        assert_eq!(indices("[2, 0, 2, \"5\"]", 8), Some(vec![2, 0, 5]));
        assert_eq!(
            indices("Relevant ones:\n```json\n[1,3]\n```", 8),
            Some(vec![1, 3])
        );
        assert_eq!(indices("[]", 8), Some(vec![]));
        assert_eq!(indices("none", 8), None);
        assert_eq!(
            indices("[0,1,2,3,4,5,6,7,8,9]", 8).map(|v| v.len()),
            Some(8)
        );
        let v = json_in("Sure! {\"tier\": \"LONG\", \"content\": \"x\"} done", '{');
        assert_eq!(v.as_ref().and_then(|v| field(v, "tier")), Some("LONG"));
    }

    #[test]
    fn jaccard_and_slug() {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        assert!((jaccard(&s(&["a", "b", "c"]), &s(&["a", "b", "c", "d"])) - 0.75).abs() < 1e-9);
        assert!(jaccard(&s(&["a"]), &s(&["b"])) < 1e-9);
        assert_eq!(
            slug("  Triage a Failing Build!  "),
            "triage-a-failing-build"
        );
        assert_eq!(clip("abcdef", 5), "ab...");
    }
}
