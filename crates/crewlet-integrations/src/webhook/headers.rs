use std::collections::{BTreeMap, HashMap};

/// Read access to request headers, matched case-insensitively.
///
/// Implemented for `http::HeaderMap` (what axum hands the API layer), for
/// slices and vectors of `(name, value)` pairs and for string maps, so tests
/// and other callers need no HTTP types.
pub trait Headers {
    /// The value of header `name`, if present and valid text.
    fn header(&self, name: &str) -> Option<&str>;
}

impl Headers for http::HeaderMap {
    fn header(&self, name: &str) -> Option<&str> {
        self.get(name)?.to_str().ok()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Headers for [(K, V)] {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.as_ref().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_ref())
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Headers for Vec<(K, V)> {
    fn header(&self, name: &str) -> Option<&str> {
        self.as_slice().header(name)
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> Headers for [(K, V); N] {
    fn header(&self, name: &str) -> Option<&str> {
        self.as_slice().header(name)
    }
}

impl Headers for BTreeMap<String, String> {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl<S: std::hash::BuildHasher> Headers for HashMap<String, String, S> {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A header value, trimmed, treating an empty value as absent.
pub(crate) fn get<'a, H: Headers + ?Sized>(headers: &'a H, name: &str) -> Option<&'a str> {
    headers
        .header(name)
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_case_insensitively_for_every_shape() {
        let pairs = [("X-GitHub-Delivery", "abc")];
        assert_eq!(pairs.header("x-github-delivery"), Some("abc"));
        let v = vec![("X-Slack-Signature".to_string(), "v0=1".to_string())];
        assert_eq!(v.header("x-slack-signature"), Some("v0=1"));
        let mut map = http::HeaderMap::new();
        map.insert("X-Plane-Signature", http::HeaderValue::from_static("ff"));
        assert_eq!(map.header("x-plane-signature"), Some("ff"));
        let mut b = BTreeMap::new();
        b.insert("Webhook-Id".to_string(), "msg_1".to_string());
        assert_eq!(b.header("webhook-id"), Some("msg_1"));
        assert_eq!(get(&pairs, "missing"), None);
        assert_eq!(get(&[("a", "  ")], "a"), None);
    }
}
