//! [`PlaneClient`]: the Plane REST API v1 calls Crewlet makes, as one
//! account (`X-API-Key`): projects and their members, workspace members,
//! pages (list, read, create, update, workspace page search) and
//! workspace webhooks.
//!
//! List endpoints answer either a bare array or Plane's cursor envelope
//! (`results`, `next_page_results`, `next_cursor`); both are read, and a
//! walk stops after [`MAX_LIST_PAGES`] pages or a repeated cursor.

use std::fmt;
use std::time::Duration;

use serde_json::{Value, json};

use crate::knowledge::creds::scrub;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Most pages one list walk reads.
pub const MAX_LIST_PAGES: usize = 100;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum PlaneError {
    #[error("Plane is unreachable: {0}")]
    Unreachable(String),
    #[error("Plane answered {status} to {what}: {body}")]
    Status {
        what: String,
        status: u16,
        body: String,
    },
    #[error("Plane answered something unreadable to {what}: {reason}")]
    BadAnswer { what: String, reason: String },
}

impl PlaneError {
    /// The HTTP status of a refused call.
    pub fn status(&self) -> Option<u16> {
        match self {
            PlaneError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    pub id: String,
    /// The short key (`ENG`).
    pub identifier: String,
    pub name: String,
}

/// A workspace member (a user).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Member {
    pub id: String,
    pub email: String,
    pub display_name: String,
    pub username: String,
}

impl Member {
    /// Whether `who` (a user id, email, username or display name) names
    /// this member (case-insensitive).
    pub fn is(&self, who: &str) -> bool {
        let who = who.trim();
        !who.is_empty()
            && [&self.id, &self.email, &self.username, &self.display_name]
                .iter()
                .any(|v| !v.is_empty() && v.eq_ignore_ascii_case(who))
    }
}

/// A row of the workspace page search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchRow {
    pub id: String,
    pub name: String,
    pub project_id: Option<String>,
    pub parent_id: Option<String>,
    pub snippet: String,
}

/// A page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page {
    pub id: String,
    pub name: String,
    pub description_html: String,
    pub parent: Option<String>,
    pub external_id: Option<String>,
    pub external_source: Option<String>,
    /// Archived (`archived_at` set): Plane's way of removing a page.
    pub archived: bool,
}

/// A workspace webhook. `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Webhook {
    pub id: String,
    pub url: String,
    pub is_active: bool,
    /// Only in the answer that created it (Plane shows it once).
    pub secret_key: Option<String>,
}

impl fmt::Debug for Webhook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Webhook")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("is_active", &self.is_active)
            .field("secret_key", &self.secret_key.as_ref().map(|_| "***"))
            .finish()
    }
}

/// One account on one Plane workspace.
#[derive(Clone)]
pub struct PlaneClient {
    http: reqwest::Client,
    base: String,
    workspace: String,
    token: String,
}

impl fmt::Debug for PlaneClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlaneClient")
            .field("base", &self.base)
            .field("workspace", &self.workspace)
            .field("token", &"***")
            .finish()
    }
}

/// The shared HTTP client (timeouts set).
pub fn http_client() -> Result<reqwest::Client, PlaneError> {
    crewlet_http::client_builder()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| PlaneError::Unreachable(e.to_string()))
}

fn s(v: &Value, key: &str) -> String {
    match v.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn opt(v: &Value, key: &str) -> Option<String> {
    Some(s(v, key)).filter(|s| !s.is_empty())
}

/// A reference that is either an id string or an object with an `id`.
fn id_ref(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::Object(_) => opt(v.get(key)?, "id"),
        _ => opt(v, key),
    }
}

impl Page {
    fn from_json(v: &Value) -> Page {
        Page {
            id: s(v, "id"),
            name: s(v, "name"),
            description_html: s(v, "description_html"),
            parent: id_ref(v, "parent").or_else(|| opt(v, "parent_id")),
            external_id: opt(v, "external_id"),
            external_source: opt(v, "external_source"),
            archived: v.get("archived_at").is_some_and(|a| !a.is_null()),
        }
    }
}

impl Webhook {
    fn from_json(v: &Value) -> Webhook {
        Webhook {
            id: s(v, "id"),
            url: s(v, "url"),
            is_active: v.get("is_active").and_then(Value::as_bool).unwrap_or(true),
            secret_key: opt(v, "secret_key"),
        }
    }
}

impl PlaneClient {
    pub fn new(url: &str, workspace: &str, token: &str) -> Result<Self, PlaneError> {
        Ok(Self::with_http(http_client()?, url, workspace, token))
    }

    /// Shares `http`'s connection pool. `url` is the instance
    /// (`https://plane.example.com`), without `/api/v1`.
    pub fn with_http(http: reqwest::Client, url: &str, workspace: &str, token: &str) -> Self {
        Self {
            http,
            base: url.trim().trim_end_matches('/').to_owned(),
            workspace: workspace.trim().to_owned(),
            token: token.to_owned(),
        }
    }

    /// The same instance and pool, as another account.
    pub fn with_token(&self, token: &str) -> Self {
        Self {
            token: token.to_owned(),
            ..self.clone()
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn workspace(&self) -> &str {
        &self.workspace
    }

    fn ws(&self, rest: &str) -> String {
        format!("/workspaces/{}/{rest}", self.workspace)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Value, PlaneError> {
        let what = format!("{method} {path}");
        let mut request = self
            .http
            .request(method, format!("{}/api/v1{path}", self.base))
            .query(query)
            .header("x-api-key", &self.token)
            .header("accept", "application/json");
        if let Some(body) = body {
            request = request.json(body);
        }
        let unreachable = |e: reqwest::Error| PlaneError::Unreachable(e.without_url().to_string());
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        let text = response.text().await.map_err(unreachable)?;
        if !status.is_success() {
            return Err(PlaneError::Status {
                what,
                status: status.as_u16(),
                body: scrub(&text, &self.token),
            });
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| PlaneError::BadAnswer {
            what,
            reason: e.to_string(),
        })
    }

    async fn get(&self, path: &str, query: &[(&str, String)]) -> Result<Value, PlaneError> {
        self.call(reqwest::Method::GET, path, query, None).await
    }

    /// Every row of a list endpoint.
    async fn get_all(&self, path: &str) -> Result<Vec<Value>, PlaneError> {
        let mut out = Vec::new();
        let mut cursor = String::new();
        for _ in 0..MAX_LIST_PAGES {
            let mut query = vec![("per_page", "100".to_owned())];
            if !cursor.is_empty() {
                query.push(("cursor", cursor.clone()));
            }
            let answer = self.get(path, &query).await?;
            let (rows, more, next) = match answer {
                Value::Array(rows) => (rows, false, String::new()),
                Value::Object(ref o) => (
                    o.get("results")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                    o.get("next_page_results")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    s(&answer, "next_cursor"),
                ),
                _ => {
                    return Err(PlaneError::BadAnswer {
                        what: format!("GET {path}"),
                        reason: "not a list".into(),
                    });
                }
            };
            out.extend(rows);
            if !more || next.is_empty() || next == cursor {
                return Ok(out);
            }
            cursor = next;
        }
        Ok(out)
    }

    /// `GET /users/me/`: the token's user.
    pub async fn me(&self) -> Result<Member, PlaneError> {
        let v = self.get("/users/me/", &[]).await?;
        Ok(member(&v))
    }

    pub async fn projects(&self) -> Result<Vec<Project>, PlaneError> {
        let rows = self.get_all(&self.ws("projects/")).await?;
        Ok(rows
            .iter()
            .map(|p| Project {
                id: s(p, "id"),
                identifier: s(p, "identifier"),
                name: s(p, "name"),
            })
            .filter(|p| !p.id.is_empty())
            .collect())
    }

    pub async fn create_project(
        &self,
        name: &str,
        identifier: &str,
    ) -> Result<Project, PlaneError> {
        let body = json!({"name": name, "identifier": identifier});
        let p = self
            .call(
                reqwest::Method::POST,
                &self.ws("projects/"),
                &[],
                Some(&body),
            )
            .await?;
        Ok(Project {
            id: s(&p, "id"),
            identifier: s(&p, "identifier"),
            name: s(&p, "name"),
        })
    }

    pub async fn workspace_members(&self) -> Result<Vec<Member>, PlaneError> {
        let rows = self.get_all(&self.ws("members/")).await?;
        Ok(rows
            .iter()
            .map(member)
            .filter(|m| !m.id.is_empty())
            .collect())
    }

    /// The user ids of a project's members.
    pub async fn project_members(&self, project_id: &str) -> Result<Vec<String>, PlaneError> {
        let rows = self
            .get_all(&self.ws(&format!("projects/{project_id}/members/")))
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| id_ref(r, "member").or_else(|| opt(r, "id")))
            .collect())
    }

    /// Adds user `member_id` to the project with Plane role number `role`.
    pub async fn add_project_member(
        &self,
        project_id: &str,
        member_id: &str,
        role: u8,
    ) -> Result<(), PlaneError> {
        let body = json!({"member": member_id, "role": role});
        let path = self.ws(&format!("projects/{project_id}/members/"));
        self.call(reqwest::Method::POST, &path, &[], Some(&body))
            .await
            .map(|_| ())
    }

    /// `GET /workspaces/{slug}/pages/search/?query=..&projects=..&per_page=..`:
    /// one request, no cursor walk (the top of the window is what counts).
    pub async fn search_pages(
        &self,
        query: &str,
        projects: &[String],
        per_page: usize,
    ) -> Result<Vec<SearchRow>, PlaneError> {
        let mut q = vec![
            ("query", query.to_owned()),
            ("per_page", per_page.clamp(1, 100).to_string()),
        ];
        if !projects.is_empty() {
            q.push(("projects", projects.join(",")));
        }
        let answer = self.get(&self.ws("pages/search/"), &q).await?;
        let rows = match &answer {
            Value::Array(rows) => rows.clone(),
            v => v
                .get("results")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        };
        Ok(rows
            .iter()
            .map(|r| SearchRow {
                id: s(r, "id"),
                name: s(r, "name"),
                project_id: opt(r, "project_id").or_else(|| id_ref(r, "project")),
                parent_id: opt(r, "parent_id").or_else(|| id_ref(r, "parent")),
                snippet: s(r, "snippet"),
            })
            .filter(|r| !r.id.is_empty())
            .collect())
    }

    pub async fn pages(&self, project_id: &str) -> Result<Vec<Page>, PlaneError> {
        let rows = self
            .get_all(&self.ws(&format!("projects/{project_id}/pages/")))
            .await?;
        Ok(rows.iter().map(Page::from_json).collect())
    }

    pub async fn page(&self, project_id: &str, page_id: &str) -> Result<Page, PlaneError> {
        let path = self.ws(&format!("projects/{project_id}/pages/{page_id}/"));
        Ok(Page::from_json(&self.get(&path, &[]).await?))
    }

    /// Creates a page from `page` (its `id` is ignored).
    pub async fn create_page(&self, project_id: &str, page: &Page) -> Result<Page, PlaneError> {
        let mut body = json!({
            "name": page.name,
            "description_html": page.description_html,
            "access": 0,
        });
        if let Some(parent) = &page.parent {
            body["parent"] = json!(parent);
        }
        if let (Some(id), Some(source)) = (&page.external_id, &page.external_source) {
            body["external_id"] = json!(id);
            body["external_source"] = json!(source);
        }
        let path = self.ws(&format!("projects/{project_id}/pages/"));
        let v = self
            .call(reqwest::Method::POST, &path, &[], Some(&body))
            .await?;
        Ok(Page::from_json(&v))
    }

    /// Sets a page's name and body.
    pub async fn update_page(
        &self,
        project_id: &str,
        page_id: &str,
        name: &str,
        description_html: &str,
    ) -> Result<Page, PlaneError> {
        let body = json!({"name": name, "description_html": description_html});
        let path = self.ws(&format!("projects/{project_id}/pages/{page_id}/"));
        let v = self
            .call(reqwest::Method::PATCH, &path, &[], Some(&body))
            .await?;
        Ok(Page::from_json(&v))
    }

    pub async fn webhooks(&self) -> Result<Vec<Webhook>, PlaneError> {
        let rows = self.get_all(&self.ws("webhooks/")).await?;
        Ok(rows.iter().map(Webhook::from_json).collect())
    }

    /// Creates a webhook for project, work item, comment and page events.
    /// `secret` is offered as its signing secret; Plane may ignore it and
    /// generate its own (the answer carries the one in force).
    pub async fn create_webhook(
        &self,
        url: &str,
        secret: Option<&str>,
    ) -> Result<Webhook, PlaneError> {
        let mut body = json!({
            "url": url,
            "is_active": true,
            "project": true,
            "issue": true,
            "issue_comment": true,
            "page": true,
            "cycle": false,
            "module": false,
        });
        if let Some(secret) = secret {
            body["secret_key"] = json!(secret);
        }
        let v = self
            .call(
                reqwest::Method::POST,
                &self.ws("webhooks/"),
                &[],
                Some(&body),
            )
            .await?;
        Ok(Webhook::from_json(&v))
    }

    /// Points webhook `id` at `url` and makes it active.
    pub async fn update_webhook(&self, id: &str, url: &str) -> Result<Webhook, PlaneError> {
        let body = json!({"url": url, "is_active": true});
        let path = self.ws(&format!("webhooks/{id}/"));
        let v = self
            .call(reqwest::Method::PATCH, &path, &[], Some(&body))
            .await?;
        Ok(Webhook::from_json(&v))
    }
}

fn member(v: &Value) -> Member {
    // Rows are users, or memberships with the user (or its id) under `member`.
    let (user, id) = match v.get("member") {
        Some(m @ Value::Object(_)) => (m, s(m, "id")),
        Some(Value::String(id)) => (v, id.clone()),
        _ => (v, s(v, "id")),
    };
    Member {
        id,
        email: s(user, "email"),
        display_name: s(user, "display_name"),
        username: s(user, "username"),
    }
}
