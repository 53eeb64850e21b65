//! The log of requests the fake Confluence and the fake Plane keep, for
//! tests to assert what a client sent (and that a second run wrote nothing).

use serde_json::Value;

/// One request a fake received.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: String,
    /// Without the API's prefix (`/wiki`, `/api/v1`).
    pub path: String,
    pub query: Vec<(String, String)>,
    /// The authenticated account or user id (`None`: refused).
    pub user: Option<String>,
    pub body: Option<Value>,
}

impl Request {
    /// The query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Every request, in the order they came.
#[derive(Debug, Default)]
pub(crate) struct RequestLog(Vec<Request>);

impl RequestLog {
    pub(crate) fn push(&mut self, request: Request) {
        self.0.push(request);
    }

    pub(crate) fn all(&self) -> Vec<Request> {
        self.0.clone()
    }

    /// The requests whose method is one of `methods`.
    pub(crate) fn with_methods(&self, methods: &[&str]) -> Vec<Request> {
        self.0
            .iter()
            .filter(|r| methods.contains(&r.method.as_str()))
            .cloned()
            .collect()
    }

    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}
