//! The fake Plane's endpoints: one handler that authenticates, records and
//! dispatches on method and path.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::{Data, FakePlanePage, FakeProject, FakeWebhook, PlaneUser, Request};

const MAX_TOKENS: usize = 16;

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": message}))).into_response()
}

fn ok(v: Value) -> Response {
    axum::Json(v).into_response()
}

/// Plane's cursor envelope around `rows`.
fn envelope(rows: Vec<Value>) -> Response {
    let n = rows.len();
    ok(json!({
        "results": rows,
        "next_page_results": false,
        "next_cursor": "",
        "total_count": n,
    }))
}

fn user_json(u: &PlaneUser) -> Value {
    json!({
        "id": u.id,
        "email": u.email,
        "username": u.username,
        "display_name": u.display_name,
        "role": if u.admin { 20 } else { 15 },
    })
}

fn project_json(p: &FakeProject) -> Value {
    json!({"id": p.id, "identifier": p.identifier, "name": p.name})
}

fn page_json(p: &FakePlanePage) -> Value {
    json!({
        "id": p.id,
        "name": p.name,
        "description_html": p.description_html,
        "parent": p.parent,
        "external_id": p.external_id,
        "external_source": p.external_source,
        "access": if p.readers.is_empty() { 0 } else { 1 },
        "updated_at": format!("2026-01-01T00:00:{:02}Z", p.updated % 60),
    })
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

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
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Data {
    fn member(&self, project: &str, user: &PlaneUser) -> bool {
        self.projects
            .get(project)
            .is_some_and(|p| p.members.contains_key(&user.id))
    }

    fn can_read(&self, page: &FakePlanePage, user: &PlaneUser) -> bool {
        self.member(&page.project_id, user)
            && (page.readers.is_empty() || page.readers.contains(&user.id))
    }
}

fn search(d: &Data, user: &PlaneUser, q: &HashMap<String, String>) -> Response {
    let query = q
        .get("query")
        .or_else(|| q.get("search"))
        .cloned()
        .unwrap_or_default();
    let mut words: Vec<String> = Vec::new();
    for w in query.split_whitespace() {
        let w = w.to_lowercase();
        if !words.contains(&w) {
            words.push(w);
        }
    }
    if words.len() > MAX_TOKENS {
        return error(
            StatusCode::BAD_REQUEST,
            "query has more than 16 distinct tokens",
        );
    }
    if words.is_empty() {
        return envelope(Vec::new());
    }
    let projects: Option<BTreeSet<String>> = q
        .get("projects")
        .filter(|p| !p.is_empty())
        .map(|p| p.split(',').map(|s| s.trim().to_owned()).collect());
    let per_page: usize = q.get("per_page").and_then(|n| n.parse().ok()).unwrap_or(20);
    let mut hits: Vec<(&FakePlanePage, String)> = d
        .pages
        .values()
        .filter(|p| d.can_read(p, user))
        .filter(|p| {
            projects
                .as_ref()
                .is_none_or(|set| set.contains(&p.project_id))
        })
        .filter_map(|p| {
            let body = plain(&p.description_html);
            let hay = format!("{} {}", p.name, body).to_lowercase();
            words.iter().all(|w| hay.contains(w.as_str())).then(|| {
                let lower = body.to_lowercase();
                let at = lower.find(words[0].as_str()).unwrap_or(0);
                let start = body
                    .char_indices()
                    .map(|(i, _)| i)
                    .rev()
                    .find(|&i| i <= at.saturating_sub(40))
                    .unwrap_or(0);
                (p, body[start..].chars().take(120).collect())
            })
        })
        .collect();
    hits.sort_by_key(|h| std::cmp::Reverse(h.0.updated));
    envelope(
        hits.into_iter()
            .take(per_page)
            .map(|(p, snippet)| {
                json!({
                    "id": p.id,
                    "name": p.name,
                    "project_id": p.project_id,
                    "parent_id": p.parent,
                    "updated_at": format!("{}", p.updated),
                    "snippet": snippet,
                })
            })
            .collect(),
    )
}

fn create_page(d: &mut Data, user: &PlaneUser, project: &str, body: &Value) -> Response {
    if !d.member(project, user) {
        return error(StatusCode::FORBIDDEN, "not a member of the project");
    }
    let Some(name) = text(body, "name") else {
        return error(StatusCode::BAD_REQUEST, "name is required");
    };
    let external_id = text(body, "external_id");
    let external_source = text(body, "external_source");
    if external_id.is_some()
        && d.pages.values().any(|p| {
            p.project_id == project
                && p.external_id == external_id
                && p.external_source == external_source
        })
    {
        return error(StatusCode::CONFLICT, "a page with this external_id exists");
    }
    let id = d.next("page");
    let updated = d.tick();
    let page = FakePlanePage {
        id: id.clone(),
        project_id: project.to_owned(),
        name,
        description_html: text(body, "description_html").unwrap_or_default(),
        parent: text(body, "parent"),
        external_id,
        external_source,
        readers: BTreeSet::new(),
        updated,
    };
    let out = page_json(&page);
    d.pages.insert(id, page);
    (StatusCode::CREATED, axum::Json(out)).into_response()
}

fn update_page(d: &mut Data, user: &PlaneUser, project: &str, id: &str, body: &Value) -> Response {
    let readable = d
        .pages
        .get(id)
        .is_some_and(|p| p.project_id == project && d.can_read(p, user));
    if !readable {
        return error(StatusCode::NOT_FOUND, "page not found");
    }
    let updated = d.tick();
    let Some(page) = d.pages.get_mut(id) else {
        return error(StatusCode::NOT_FOUND, "page not found");
    };
    if let Some(n) = text(body, "name") {
        page.name = n;
    }
    if let Some(h) = text(body, "description_html") {
        page.description_html = h;
    }
    page.updated = updated;
    ok(page_json(page))
}

fn create_project(d: &mut Data, user: &PlaneUser, body: &Value) -> Response {
    let (Some(name), Some(identifier)) = (text(body, "name"), text(body, "identifier")) else {
        return error(StatusCode::BAD_REQUEST, "name and identifier are required");
    };
    if d.projects
        .values()
        .any(|p| p.identifier.eq_ignore_ascii_case(&identifier))
    {
        return error(StatusCode::CONFLICT, "the identifier is taken");
    }
    let id = d.next("proj");
    let project = FakeProject {
        id: id.clone(),
        identifier,
        name,
        members: BTreeMap::from([(user.id.clone(), 20)]),
    };
    let out = project_json(&project);
    d.projects.insert(id, project);
    (StatusCode::CREATED, axum::Json(out)).into_response()
}

fn add_member(d: &mut Data, user: &PlaneUser, project: &str, body: &Value) -> Response {
    let Some(p) = d.projects.get(project) else {
        return error(StatusCode::NOT_FOUND, "project not found");
    };
    if !user.admin && p.members.get(&user.id) != Some(&20) {
        return error(StatusCode::FORBIDDEN, "only admins add members");
    }
    let Some(member) = text(body, "member") else {
        return error(StatusCode::BAD_REQUEST, "member is required");
    };
    if !d.users.iter().any(|u| u.id == member) {
        return error(StatusCode::BAD_REQUEST, "not a workspace member");
    }
    let role = body.get("role").and_then(Value::as_u64).unwrap_or(15);
    let Some(p) = d.projects.get_mut(project) else {
        return error(StatusCode::NOT_FOUND, "project not found");
    };
    if p.members.contains_key(&member) {
        return error(StatusCode::CONFLICT, "already a member");
    }
    p.members
        .insert(member.clone(), u8::try_from(role).unwrap_or(15));
    (
        StatusCode::CREATED,
        axum::Json(json!({"member": member, "role": role, "project": project})),
    )
        .into_response()
}

fn webhooks(d: &mut Data, method: &Method, id: Option<&str>, body: &Value) -> Response {
    match (method.as_str(), id) {
        ("GET", None) => ok(Value::Array(
            d.webhooks
                .iter()
                .map(|h| json!({"id": h.id, "url": h.url, "is_active": h.is_active}))
                .collect(),
        )),
        ("POST", None) => {
            let Some(url) = text(body, "url") else {
                return error(StatusCode::BAD_REQUEST, "url is required");
            };
            if d.webhooks.iter().any(|h| h.url == url) {
                return error(StatusCode::CONFLICT, "a webhook with this url exists");
            }
            let id = d.next("hook");
            let secret_key = text(body, "secret_key").unwrap_or_else(|| format!("plane_wh_{id}"));
            let hook = FakeWebhook {
                id: id.clone(),
                url: url.clone(),
                secret_key: secret_key.clone(),
                is_active: body
                    .get("is_active")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
            };
            d.webhooks.push(hook);
            (
                StatusCode::CREATED,
                axum::Json(
                    json!({"id": id, "url": url, "is_active": true, "secret_key": secret_key}),
                ),
            )
                .into_response()
        }
        ("PATCH", Some(id)) => {
            let Some(hook) = d.webhooks.iter_mut().find(|h| h.id == id) else {
                return error(StatusCode::NOT_FOUND, "webhook not found");
            };
            if let Some(url) = text(body, "url") {
                hook.url = url;
            }
            if let Some(active) = body.get("is_active").and_then(Value::as_bool) {
                hook.is_active = active;
            }
            ok(json!({"id": hook.id, "url": hook.url, "is_active": hook.is_active}))
        }
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    }
}

pub(crate) async fn handle(
    State(data): State<Arc<Mutex<Data>>>,
    method: Method,
    uri: Uri,
    Query(query): Query<Vec<(String, String)>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri
        .path()
        .strip_prefix("/api/v1")
        .unwrap_or(uri.path())
        .to_owned();
    let json_body: Option<Value> = serde_json::from_slice(&body).ok();
    let mut d = data.lock();
    let token = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let user = d
        .users
        .iter()
        .find(|u| !token.is_empty() && u.token == token)
        .cloned();
    d.requests.push(Request {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        user: user.as_ref().map(|u| u.id.clone()),
        body: json_body.clone(),
    });
    let Some(user) = user else {
        return error(
            StatusCode::UNAUTHORIZED,
            "Authentication credentials were not provided",
        );
    };
    let q: HashMap<String, String> = query.into_iter().collect();
    let body = json_body.unwrap_or(Value::Null);
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    if segments == ["users", "me"] && method == Method::GET {
        return ok(user_json(&user));
    }
    let rest = match segments.as_slice() {
        ["workspaces", slug, rest @ ..] if *slug == d.workspace => rest.to_vec(),
        ["workspaces", ..] => return error(StatusCode::NOT_FOUND, "workspace not found"),
        _ => return error(StatusCode::NOT_FOUND, "no such endpoint in the fake"),
    };
    let is_member_of = |d: &Data, p: &str| user.admin || d.member(p, &user);
    match (method.as_str(), rest.as_slice()) {
        ("GET", ["members"]) => ok(Value::Array(d.users.iter().map(user_json).collect())),
        ("GET", ["projects"]) => envelope(
            d.projects
                .values()
                .filter(|p| is_member_of(&d, &p.id))
                .map(project_json)
                .collect(),
        ),
        ("POST", ["projects"]) => create_project(&mut d, &user, &body),
        ("GET", ["projects", p, "members"]) => {
            if !is_member_of(&d, p) {
                return error(StatusCode::FORBIDDEN, "not a member of the project");
            }
            let members = d
                .projects
                .get(*p)
                .map(|p| p.members.clone())
                .unwrap_or_default();
            ok(Value::Array(
                members
                    .iter()
                    .filter_map(|(id, role)| {
                        let u = d.users.iter().find(|u| &u.id == id)?;
                        let mut v = user_json(u);
                        v["member"] = json!(id);
                        v["role"] = json!(role);
                        Some(v)
                    })
                    .collect(),
            ))
        }
        ("POST", ["projects", p, "members"]) => add_member(&mut d, &user, p, &body),
        ("GET", ["projects", p, "pages"]) => {
            if !d.member(p, &user) {
                return error(StatusCode::FORBIDDEN, "not a member of the project");
            }
            envelope(
                d.pages
                    .values()
                    .filter(|pg| pg.project_id == *p && d.can_read(pg, &user))
                    .map(page_json)
                    .collect(),
            )
        }
        ("POST", ["projects", p, "pages"]) => create_page(&mut d, &user, p, &body),
        ("GET", ["projects", p, "pages", id]) => match d.pages.get(*id) {
            Some(pg) if pg.project_id == *p && d.can_read(pg, &user) => ok(page_json(pg)),
            _ => error(StatusCode::NOT_FOUND, "page not found"),
        },
        ("PATCH", ["projects", p, "pages", id]) => update_page(&mut d, &user, p, id, &body),
        ("GET", ["pages", "search"]) => search(&d, &user, &q),
        (_, ["webhooks"]) | (_, ["webhooks", _]) => {
            if !user.admin {
                return error(StatusCode::FORBIDDEN, "workspace admins only");
            }
            webhooks(&mut d, &method, rest.get(1).copied(), &body)
        }
        _ => error(StatusCode::NOT_FOUND, "no such endpoint in the fake"),
    }
}
