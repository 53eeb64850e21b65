//! A fake Confluence REST API (v1) on 127.0.0.1 for tests, under `/wiki`:
//!
//! - `GET /rest/api/content/search?cql=..&start=..&limit=..&expand=..`
//!   with the CQL subset of [`cql`] (`text ~`, `space IN`, `space =`,
//!   `type =`, `title =`, `label =`, `AND`); a hit must contain every word
//!   of the text;
//! - `GET /rest/api/content?spaceKey=..&title=..&expand=..`;
//! - `GET /rest/api/content/{id}`;
//! - `POST /rest/api/content` (title unique per space) and
//!   `PUT /rest/api/content/{id}` (the version must go up by exactly one,
//!   else 409). `metadata.properties` and `metadata.labels` are kept.
//!
//! Users authenticate with Basic `email:token` or Bearer `token`; anything
//! else is 401. A page restricted to some users (or under such a page) is
//! invisible to everyone else. Every request is recorded.
//!
//! ```text
//! let wiki = FakeConfluence::start().await;
//! let eng = wiki.add_user("eng");
//! wiki.add_space("ENG");
//! let id = wiki.add_page("ENG", "Deploy runbook", "<p>deploy steps</p>", None);
//! ```

mod cql;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use cql::{Cql, parse as parse_cql};

/// A user and the credentials that work for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfluenceUser {
    pub account_id: String,
    pub email: String,
    pub token: String,
}

/// A page as the fake holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct FakePage {
    pub id: String,
    pub space: String,
    pub title: String,
    /// Storage-format body.
    pub body: String,
    pub parent: Option<String>,
    pub version: u64,
    /// Account ids that may read it; empty: everyone.
    pub readers: BTreeSet<String>,
    pub properties: Map<String, Value>,
    pub labels: Vec<String>,
}

pub use crate::request_log::Request;
use crate::request_log::RequestLog;

#[derive(Default)]
struct Data {
    seq: u64,
    base: String,
    users: Vec<ConfluenceUser>,
    spaces: BTreeSet<String>,
    pages: BTreeMap<u64, FakePage>,
    requests: RequestLog,
}

/// A running fake Confluence; stops when dropped.
pub struct FakeConfluence {
    data: Arc<Mutex<Data>>,
    addr: SocketAddr,
    server: JoinHandle<()>,
}

impl Drop for FakeConfluence {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeConfluence {
    /// Listens on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start() -> FakeConfluence {
        let listener = match TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await {
            Ok(l) => l,
            Err(e) => panic!("fake Confluence: cannot listen on 127.0.0.1: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => panic!("fake Confluence: no local address: {e}"),
        };
        let data = Arc::new(Mutex::new(Data {
            base: format!("http://{addr}/wiki"),
            ..Data::default()
        }));
        let app = Router::new().fallback(handle).with_state(data.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeConfluence { data, addr, server }
    }

    /// The site URL (`integrations.confluence.url`).
    pub fn url(&self) -> String {
        format!("http://{}/wiki", self.addr)
    }

    /// A user `name` (`name@example.com`) with a fresh token.
    pub fn add_user(&self, name: &str) -> ConfluenceUser {
        let mut d = self.data.lock();
        d.seq += 1;
        let user = ConfluenceUser {
            account_id: format!("acc-{name}"),
            email: format!("{name}@example.com"),
            token: format!("tok-{name}-{}", d.seq),
        };
        d.users.push(user.clone());
        user
    }

    pub fn add_space(&self, key: &str) {
        self.data.lock().spaces.insert(key.to_owned());
    }

    /// A page readable by everyone (see [`FakeConfluence::restrict`]); its id.
    pub fn add_page(&self, space: &str, title: &str, body: &str, parent: Option<&str>) -> String {
        let mut d = self.data.lock();
        d.spaces.insert(space.to_owned());
        d.seq += 1;
        let id = d.seq;
        d.pages.insert(
            id,
            FakePage {
                id: id.to_string(),
                space: space.to_owned(),
                title: title.to_owned(),
                body: body.to_owned(),
                parent: parent.map(str::to_owned),
                version: 1,
                readers: BTreeSet::new(),
                properties: Map::new(),
                labels: Vec::new(),
            },
        );
        id.to_string()
    }

    /// Only these account ids may read page `id` (and the pages under it).
    pub fn restrict(&self, id: &str, readers: &[&str]) {
        if let Some(p) = self.data.lock().pages.values_mut().find(|p| p.id == id) {
            p.readers = readers.iter().map(|r| (*r).to_owned()).collect();
        }
    }

    pub fn page(&self, id: &str) -> Option<FakePage> {
        self.data
            .lock()
            .pages
            .values()
            .find(|p| p.id == id)
            .cloned()
    }

    /// The page titled `title` in `space`.
    pub fn page_by_title(&self, space: &str, title: &str) -> Option<FakePage> {
        let d = self.data.lock();
        d.pages
            .values()
            .find(|p| p.space == space && p.title == title)
            .cloned()
    }

    pub fn pages(&self) -> Vec<FakePage> {
        self.data.lock().pages.values().cloned().collect()
    }

    pub fn requests(&self) -> Vec<Request> {
        self.data.lock().requests.all()
    }

    /// Requests that changed something (`POST`, `PUT`).
    pub fn writes(&self) -> Vec<Request> {
        self.data.lock().requests.with_methods(&["POST", "PUT"])
    }

    pub fn clear_requests(&self) {
        self.data.lock().requests.clear();
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"statusCode": status.as_u16(), "message": message})),
    )
        .into_response()
}

fn authenticate(d: &Data, headers: &HeaderMap) -> Option<String> {
    let auth = headers.get("authorization")?.to_str().ok()?;
    let (scheme, value) = auth.split_once(' ')?;
    let user = if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(value.trim())
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (name, token) = decoded.split_once(':')?;
        d.users
            .iter()
            .find(|u| (u.email == name || u.account_id == name) && u.token == token)
    } else if scheme.eq_ignore_ascii_case("bearer") {
        d.users.iter().find(|u| u.token == value.trim())
    } else {
        None
    };
    user.map(|u| u.account_id.clone())
}

impl Data {
    fn find(&self, id: &str) -> Option<&FakePage> {
        self.pages.values().find(|p| p.id == id)
    }

    /// Root first.
    fn ancestors(&self, page: &FakePage) -> Vec<&FakePage> {
        let mut out = Vec::new();
        let mut at = page.parent.as_deref();
        while let Some(id) = at {
            match self.find(id) {
                Some(p) if out.len() < 64 => {
                    out.push(p);
                    at = p.parent.as_deref();
                }
                _ => break,
            }
        }
        out.reverse();
        out
    }

    fn visible(&self, page: &FakePage, user: &str) -> bool {
        std::iter::once(page)
            .chain(self.ancestors(page))
            .all(|p| p.readers.is_empty() || p.readers.contains(user))
    }

    fn render(&self, page: &FakePage, expand: &str) -> Value {
        let has = |what: &str| expand.split(',').any(|e| e.trim().starts_with(what));
        let mut v = json!({
            "id": page.id,
            "type": "page",
            "status": "current",
            "title": page.title,
            "_links": {"webui": format!("/spaces/{}/pages/{}", page.space, page.id)},
        });
        if has("ancestors") {
            v["ancestors"] = self
                .ancestors(page)
                .iter()
                .map(|a| json!({"id": a.id, "type": "page", "title": a.title}))
                .collect();
        }
        if has("space") {
            v["space"] = json!({"key": page.space, "name": page.space});
        }
        if has("body.view") {
            v["body"]["view"] = json!({"value": page.body, "representation": "view"});
        }
        if has("body.storage") {
            v["body"]["storage"] = json!({"value": page.body, "representation": "storage"});
        }
        if has("version") {
            v["version"] = json!({"number": page.version});
        }
        if has("metadata.properties") {
            v["metadata"]["properties"] = Value::Object(page.properties.clone());
        }
        if has("metadata.labels") {
            v["metadata"]["labels"] = json!({"results": page.labels.iter().map(|l| json!({"name": l})).collect::<Vec<_>>()});
        }
        v
    }
}

/// Plain lower-case text of a storage body.
fn plain(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut tag = false;
    for c in html.chars() {
        match c {
            '<' => tag = true,
            '>' => {
                tag = false;
                out.push(' ');
            }
            c if !tag => out.push(c),
            _ => {}
        }
    }
    out.to_lowercase()
}

fn search(d: &Data, user: &str, q: &HashMap<String, String>) -> Response {
    let Some(raw) = q.get("cql") else {
        return error(StatusCode::BAD_REQUEST, "cql is required");
    };
    let cql = match cql::parse(raw) {
        Ok(c) => c,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("Could not parse cql: {e}"),
            );
        }
    };
    if cql.kind.as_deref().is_some_and(|k| k != "page") {
        return axum::Json(json!({"results": [], "size": 0})).into_response();
    }
    let words: Vec<String> = cql
        .text
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect();
    let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(25);
    let start: usize = q.get("start").and_then(|l| l.parse().ok()).unwrap_or(0);
    let expand = q.get("expand").map(String::as_str).unwrap_or("");
    let mut scored: Vec<(usize, &FakePage)> = d
        .pages
        .values()
        .filter(|p| d.visible(p, user))
        .filter(|p| {
            cql.spaces
                .as_ref()
                .is_none_or(|s| s.iter().any(|k| k == &p.space))
        })
        .filter(|p| cql.title.as_ref().is_none_or(|t| t == &p.title))
        .filter(|p| cql.label.as_ref().is_none_or(|l| p.labels.contains(l)))
        .filter_map(|p| {
            let title = p.title.to_lowercase();
            let body = plain(&p.body);
            let mut score = 0;
            for w in &words {
                let n = title.matches(w.as_str()).count() * 3 + body.matches(w.as_str()).count();
                if n == 0 {
                    return None;
                }
                score += n;
            }
            Some((score, p))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
    let results: Vec<Value> = scored
        .into_iter()
        .skip(start)
        .take(limit)
        .map(|(_, p)| d.render(p, expand))
        .collect();
    axum::Json(json!({
        "results": results,
        "start": start,
        "limit": limit,
        "size": results.len(),
        "_links": {"base": d.base},
    }))
    .into_response()
}

fn text_at<'v>(v: &'v Value, path: &[&str]) -> Option<&'v str> {
    let mut at = v;
    for key in path {
        at = at.get(key)?;
    }
    at.as_str()
}

fn create(d: &mut Data, user: &str, body: &Value) -> Response {
    let (Some(title), Some(space), Some(storage)) = (
        text_at(body, &["title"]),
        text_at(body, &["space", "key"]),
        text_at(body, &["body", "storage", "value"]),
    ) else {
        return error(
            StatusCode::BAD_REQUEST,
            "title, space.key and body.storage.value are required",
        );
    };
    if !d.spaces.contains(space) {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("No space with key : {space}"),
        );
    }
    if d.pages
        .values()
        .any(|p| p.space == space && p.title == title)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "A page with this title already exists",
        );
    }
    let parent = body
        .get("ancestors")
        .and_then(Value::as_array)
        .and_then(|a| a.last())
        .and_then(|a| match a.get("id") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        });
    if let Some(p) = &parent
        && d.find(p).is_none_or(|p| !d.visible(p, user))
    {
        return error(StatusCode::BAD_REQUEST, "parent page not found");
    }
    d.seq += 1;
    let id = d.seq;
    let page = FakePage {
        id: id.to_string(),
        space: space.to_owned(),
        title: title.to_owned(),
        body: storage.to_owned(),
        parent,
        version: 1,
        readers: BTreeSet::new(),
        properties: properties(body),
        labels: body
            .pointer("/metadata/labels")
            .and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .filter_map(|x| x.get("name").and_then(Value::as_str).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
    };
    let out = d.render(
        &page,
        "space,version,body.storage,ancestors,metadata.properties",
    );
    d.pages.insert(id, page);
    axum::Json(out).into_response()
}

fn properties(body: &Value) -> Map<String, Value> {
    body.pointer("/metadata/properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn update(d: &mut Data, user: &str, id: &str, body: &Value) -> Response {
    let Some(page) = d.find(id).filter(|p| d.visible(p, user)).cloned() else {
        return error(StatusCode::NOT_FOUND, "No content found with id");
    };
    let next = body.pointer("/version/number").and_then(Value::as_u64);
    if next != Some(page.version + 1) {
        return error(
            StatusCode::CONFLICT,
            &format!(
                "Version must be incremented on update. Current version is: {}",
                page.version
            ),
        );
    }
    let Some(key) = d.pages.iter().find(|(_, p)| p.id == id).map(|(k, _)| *k) else {
        return error(StatusCode::NOT_FOUND, "No content found with id");
    };
    let mut updated = page;
    if let Some(t) = text_at(body, &["title"]) {
        updated.title = t.to_owned();
    }
    if let Some(b) = text_at(body, &["body", "storage", "value"]) {
        updated.body = b.to_owned();
    }
    updated.version += 1;
    updated.properties.extend(properties(body));
    let out = d.render(
        &updated,
        "space,version,body.storage,ancestors,metadata.properties",
    );
    d.pages.insert(key, updated);
    axum::Json(out).into_response()
}

async fn handle(
    State(data): State<Arc<Mutex<Data>>>,
    method: Method,
    uri: Uri,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri
        .path()
        .strip_prefix("/wiki")
        .unwrap_or(uri.path())
        .to_owned();
    let json_body: Option<Value> = serde_json::from_slice(&body).ok();
    let mut d = data.lock();
    let user = authenticate(&d, &headers);
    d.requests.push(Request {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        user: user.clone(),
        body: json_body.clone(),
    });
    let Some(user) = user else {
        return error(
            StatusCode::UNAUTHORIZED,
            "Basic or Bearer authentication required",
        );
    };
    let q: HashMap<String, String> = query.into_iter().collect();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let body = json_body.unwrap_or(Value::Null);
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["rest", "api", "content", "search"]) => search(&d, &user, &q),
        ("GET", ["rest", "api", "content"]) => {
            let expand = q.get("expand").map(String::as_str).unwrap_or("");
            let results: Vec<Value> = d
                .pages
                .values()
                .filter(|p| d.visible(p, &user))
                .filter(|p| q.get("spaceKey").is_none_or(|s| s == &p.space))
                .filter(|p| q.get("title").is_none_or(|t| t == &p.title))
                .map(|p| d.render(p, expand))
                .collect();
            axum::Json(
                json!({"results": results, "size": results.len(), "_links": {"base": d.base}}),
            )
            .into_response()
        }
        ("GET", ["rest", "api", "content", id]) => {
            let expand = q.get("expand").map(String::as_str).unwrap_or("");
            match d.find(id).filter(|p| d.visible(p, &user)) {
                Some(p) => axum::Json(d.render(p, expand)).into_response(),
                None => error(StatusCode::NOT_FOUND, "No content found with id"),
            }
        }
        ("POST", ["rest", "api", "content"]) => create(&mut d, &user, &body),
        ("PUT", ["rest", "api", "content", id]) => {
            let id = (*id).to_owned();
            update(&mut d, &user, &id, &body)
        }
        _ => error(StatusCode::NOT_FOUND, "no such endpoint in the fake"),
    }
}
