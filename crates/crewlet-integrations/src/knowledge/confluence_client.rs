//! The Confluence REST API v1 calls the knowledge search and the importer
//! make: content search by CQL, find a page by space and title, create and
//! update a page (the version number bumped on every update).

use std::time::Duration;

use serde_json::{Value, json};

use super::creds::{ConfluenceAuth, scrub};

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// The content property the importer records its source hash in.
pub const IMPORT_PROPERTY: &str = "crewlet_import";

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ConfluenceError {
    #[error("Confluence is unreachable: {0}")]
    Unreachable(String),
    #[error("Confluence answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("Confluence answered something unreadable: {0}")]
    BadAnswer(String),
}

/// A page as the importer needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRef {
    pub id: String,
    pub title: String,
    pub version: u64,
    /// Storage-format body (empty when not asked for).
    pub body: String,
    /// The source hash the importer recorded on it, if any.
    pub import_hash: Option<String>,
}

/// One account on one Confluence site.
#[derive(Debug, Clone)]
pub struct ConfluenceClient {
    http: reqwest::Client,
    base: String,
    auth: ConfluenceAuth,
}

/// The shared HTTP client (timeouts set).
pub fn http_client() -> Result<reqwest::Client, ConfluenceError> {
    crewlet_http::client_builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| ConfluenceError::Unreachable(e.to_string()))
}

impl ConfluenceClient {
    pub fn new(base: &str, auth: ConfluenceAuth) -> Result<Self, ConfluenceError> {
        Ok(Self::with_http(http_client()?, base, auth))
    }

    /// Shares `http`'s connection pool.
    pub fn with_http(http: reqwest::Client, base: &str, auth: ConfluenceAuth) -> Self {
        Self {
            http,
            base: base.trim().trim_end_matches('/').to_owned(),
            auth,
        }
    }

    /// The site URL (`https://acme.atlassian.net/wiki`).
    pub fn base(&self) -> &str {
        &self.base
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Value, ConfluenceError> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .query(query)
            .header("accept", "application/json");
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = self
            .auth
            .apply(request)
            .send()
            .await
            .map_err(|e| ConfluenceError::Unreachable(e.without_url().to_string()))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| ConfluenceError::Unreachable(e.without_url().to_string()))?;
        if !status.is_success() {
            return Err(ConfluenceError::Status {
                status: status.as_u16(),
                body: scrub(&text, self.auth.secret()),
            });
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| ConfluenceError::BadAnswer(e.to_string()))
    }

    /// `GET /rest/api/content/search`: the raw answer (`results`, `_links`).
    pub async fn search(
        &self,
        cql: &str,
        limit: usize,
        expand: &str,
    ) -> Result<Value, ConfluenceError> {
        self.search_from(cql, 0, limit, expand).await
    }

    /// `GET /rest/api/content/search` from result `start` on (paging).
    pub async fn search_from(
        &self,
        cql: &str,
        start: usize,
        limit: usize,
        expand: &str,
    ) -> Result<Value, ConfluenceError> {
        let query = [
            ("cql", cql.to_owned()),
            ("start", start.to_string()),
            ("limit", limit.to_string()),
            ("expand", expand.to_owned()),
        ];
        self.call(
            reqwest::Method::GET,
            "/rest/api/content/search",
            &query,
            None,
        )
        .await
    }

    /// The page titled exactly `title` in `space`, if the account sees one.
    pub async fn find_page(
        &self,
        space: &str,
        title: &str,
    ) -> Result<Option<PageRef>, ConfluenceError> {
        let query = [
            ("spaceKey", space.to_owned()),
            ("title", title.to_owned()),
            ("type", "page".to_owned()),
            (
                "expand",
                format!("body.storage,version,metadata.properties.{IMPORT_PROPERTY}"),
            ),
        ];
        let answer = self
            .call(reqwest::Method::GET, "/rest/api/content", &query, None)
            .await?;
        let results = answer
            .get("results")
            .and_then(Value::as_array)
            .ok_or_else(|| ConfluenceError::BadAnswer("no results list".into()))?;
        Ok(results
            .iter()
            .filter(|p| p.get("title").and_then(Value::as_str) == Some(title))
            .find_map(page_ref))
    }

    /// Creates a page in `space` (under `parent` when given).
    pub async fn create_page(
        &self,
        space: &str,
        title: &str,
        storage: &str,
        parent: Option<&str>,
        import_hash: &str,
        labels: &[&str],
    ) -> Result<PageRef, ConfluenceError> {
        let mut body = json!({
            "type": "page",
            "title": title,
            "space": {"key": space},
            "body": {"storage": {"value": storage, "representation": "storage"}},
            "metadata": {
                "properties": property(import_hash),
                "labels": labels.iter().map(|l| json!({"prefix": "global", "name": l})).collect::<Vec<_>>(),
            },
        });
        if let Some(parent) = parent {
            body["ancestors"] = json!([{ "id": parent }]);
        }
        let answer = self
            .call(reqwest::Method::POST, "/rest/api/content", &[], Some(&body))
            .await?;
        page_ref(&answer).ok_or_else(|| ConfluenceError::BadAnswer("created page has no id".into()))
    }

    /// Replaces `page`'s title and body, as version `page.version + 1`.
    pub async fn update_page(
        &self,
        page: &PageRef,
        title: &str,
        storage: &str,
        import_hash: &str,
    ) -> Result<PageRef, ConfluenceError> {
        let body = json!({
            "id": page.id,
            "type": "page",
            "title": title,
            "version": {"number": page.version + 1},
            "body": {"storage": {"value": storage, "representation": "storage"}},
            "metadata": {"properties": property(import_hash)},
        });
        let path = format!("/rest/api/content/{}", page.id);
        let answer = self
            .call(reqwest::Method::PUT, &path, &[], Some(&body))
            .await?;
        page_ref(&answer).ok_or_else(|| ConfluenceError::BadAnswer("updated page has no id".into()))
    }
}

fn property(hash: &str) -> Value {
    json!({ IMPORT_PROPERTY: {"key": IMPORT_PROPERTY, "value": {"sha256": hash}} })
}

fn page_ref(page: &Value) -> Option<PageRef> {
    let id = match page.get("id")? {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let text = |path: &[&str]| {
        let mut v = page;
        for key in path {
            v = v.get(key)?;
        }
        v.as_str().map(str::to_owned)
    };
    Some(PageRef {
        id,
        title: text(&["title"]).unwrap_or_default(),
        version: page
            .get("version")
            .and_then(|v| v.get("number"))
            .and_then(Value::as_u64)
            .unwrap_or(1),
        body: text(&["body", "storage", "value"]).unwrap_or_default(),
        import_hash: text(&["metadata", "properties", IMPORT_PROPERTY, "value", "sha256"]),
    })
}
