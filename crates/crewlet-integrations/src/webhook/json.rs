//! Small lookups into webhook JSON: payloads are large, loosely typed and
//! vary by version, so normalization reads the few fields it needs by path.

use serde_json::Value;

use super::{Source, WebhookError};

pub(crate) fn parse(from: Source, body: &[u8]) -> Result<Value, WebhookError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| WebhookError::BadJson {
        from,
        reason: e.to_string(),
    })?;
    if value.is_object() {
        Ok(value)
    } else {
        Err(WebhookError::BadJson {
            from,
            reason: "expected a JSON object at the top level".into(),
        })
    }
}

pub(crate) fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(value, |v, key| v.get(*key))
        .filter(|v| !v.is_null())
}

/// The value at `path` as text: strings as they are, numbers printed.
pub(crate) fn text(value: &Value, path: &[&str]) -> Option<String> {
    match at(value, path)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// For each element of the array at `path`: the element itself if it is a
/// string, else the first of `keys` that is text.
pub(crate) fn texts(value: &Value, path: &[&str], keys: &[&str]) -> Vec<String> {
    let Some(Value::Array(items)) = at(value, path) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| match item {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Object(_) => keys.iter().find_map(|k| text(item, &[k])),
            _ => None,
        })
        .collect()
}

/// Pushes `item` unless an equal one (ASCII case-insensitive) is already there.
pub(crate) fn push_unique(list: &mut Vec<String>, item: String) {
    if !item.is_empty() && !list.iter().any(|x| x.eq_ignore_ascii_case(&item)) {
        list.push(item);
    }
}

pub(crate) fn unique(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    for item in items {
        push_unique(&mut out, item);
    }
    out
}

/// Plain text of an HTML fragment: tags dropped (block tags become a space),
/// common entities decoded, whitespace collapsed.
pub(crate) fn strip_html(html: &str) -> String {
    const BLOCK: &[&str] = &[
        "p",
        "br",
        "div",
        "li",
        "ul",
        "ol",
        "tr",
        "td",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "blockquote",
        "pre",
    ];
    let mut out = String::with_capacity(html.len());
    let mut tag: Option<String> = None;
    for c in html.chars() {
        match (&mut tag, c) {
            (None, '<') => tag = Some(String::new()),
            (Some(name), '>') => {
                let name = name.trim_start_matches('/');
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect::<String>()
                    .to_ascii_lowercase();
                if BLOCK.contains(&name.as_str()) {
                    out.push(' ');
                }
                tag = None;
            }
            (Some(name), c) => name.push(c),
            (None, c) => out.push(c),
        }
    }
    let decoded = out
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    decoded.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn lookups_by_path() {
        let v = json!({"a": {"b": "x", "n": 42, "e": "", "z": null},
                       "list": ["u1", {"login": "bob"}, {"id": 7}, 3]});
        assert_eq!(text(&v, &["a", "b"]).as_deref(), Some("x"));
        assert_eq!(text(&v, &["a", "n"]).as_deref(), Some("42"));
        assert_eq!(text(&v, &["a", "e"]), None);
        assert!(at(&v, &["a", "z"]).is_none());
        assert_eq!(texts(&v, &["list"], &["login", "id"]), ["u1", "bob", "7"]);
        assert!(texts(&v, &["missing"], &["x"]).is_empty());
    }

    #[test]
    fn parse_rejects_non_objects() {
        assert!(parse(Source::Github, b"[1]").is_err());
        assert!(parse(Source::Github, b"{").is_err());
        assert!(parse(Source::Github, b"{}").is_ok());
    }

    #[test]
    fn html_to_text() {
        assert_eq!(
            strip_html("<p>Hi <b>the</b>re&nbsp;&amp; you</p><p>next</p><br/>"),
            "Hi there & you next"
        );
    }
}
