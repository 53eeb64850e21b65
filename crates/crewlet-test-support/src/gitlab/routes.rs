//! The fake's request handling: one fallback handler that records the
//! request, authenticates it and dispatches on method and path segments.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::{Data, FakeHook, FakeToken, FakeUser, Kind, Request, Space};

fn answer(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn message(status: StatusCode, text: &str) -> Response {
    answer(status, json!({"message": text}))
}

fn not_found() -> Response {
    message(StatusCode::NOT_FOUND, "404 Not Found")
}

fn forbidden() -> Response {
    message(StatusCode::FORBIDDEN, "403 Forbidden")
}

/// Percent-decoding of one path segment or query part.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn user_json(u: &FakeUser, me: bool) -> Value {
    let mut v = json!({"id": u.id, "username": u.username, "name": u.name, "state": u.state});
    if me || u.is_admin {
        v["email"] = json!(u.email);
    }
    if u.is_admin {
        v["is_admin"] = json!(true);
    }
    v
}

fn hook_json(h: &FakeHook) -> Value {
    let mut v = json!({"id": h.id, "url": h.url});
    for (k, on) in &h.events {
        v[k] = json!(on);
    }
    v
}

/// One page of `items`, with GitLab's pagination headers.
fn page(items: Vec<Value>, query: &BTreeMap<String, String>, cap: Option<usize>) -> Response {
    let per_page = query
        .get("per_page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(20)
        .clamp(1, 100)
        .min(cap.unwrap_or(100));
    let page = query
        .get("page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let total = items.len();
    let pages = total.div_ceil(per_page).max(1);
    let slice: Vec<Value> = items
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect();
    let next = if page < pages {
        (page + 1).to_string()
    } else {
        String::new()
    };
    let mut resp = answer(StatusCode::OK, Value::Array(slice));
    let h = resp.headers_mut();
    for (k, v) in [
        ("x-page", page.to_string()),
        ("x-per-page", per_page.to_string()),
        ("x-total", total.to_string()),
        ("x-total-pages", pages.to_string()),
        ("x-next-page", next),
    ] {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(k, v);
        }
    }
    resp
}

pub(super) async fn handle(
    State(data): State<Arc<Mutex<Data>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query: BTreeMap<String, String> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let token = headers
        .get("private-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let mut d = data.lock();
    d.requests.push(Request {
        method: method.to_string(),
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or_default().to_owned(),
    });
    let Some(rest) = uri.path().strip_prefix("/api/v4/") else {
        return not_found();
    };
    let seg: Vec<String> = rest.split('/').map(decode).collect();
    let seg: Vec<&str> = seg.iter().map(String::as_str).collect();
    let Some(me) = d.user_of(&token) else {
        return message(StatusCode::UNAUTHORIZED, "401 Unauthorized");
    };
    if me.state != "active" {
        return forbidden();
    }
    let cap = d.max_per_page;
    match (method.as_str(), seg.as_slice()) {
        ("GET", ["user"]) => answer(StatusCode::OK, user_json(&me, true)),
        ("GET", ["users"]) => {
            let wanted = query.get("username").map(|u| u.to_ascii_lowercase());
            let items = d
                .users
                .iter()
                .filter(|u| {
                    wanted
                        .as_ref()
                        .is_none_or(|w| u.username.to_ascii_lowercase() == *w)
                })
                .map(|u| user_json(u, false))
                .collect();
            page(items, &query, cap)
        }
        (_, ["users", ..]) | (_, ["personal_access_tokens", ..]) if !me.is_admin => forbidden(),
        ("POST", ["users"]) => create_user(&mut d, &body),
        ("POST", ["users", id, "personal_access_tokens"]) => mint(&mut d, id, &body),
        ("DELETE", ["personal_access_tokens", id]) => {
            let id = id.parse::<u64>().ok();
            match d.tokens.iter_mut().find(|t| Some(t.id) == id) {
                Some(t) => {
                    t.revoked = true;
                    StatusCode::NO_CONTENT.into_response()
                }
                None => not_found(),
            }
        }
        (m, [kind @ ("groups" | "projects"), key, tail @ ..]) => {
            let kind = if *kind == "groups" {
                Kind::Group
            } else {
                Kind::Project
            };
            if tail.first() == Some(&"hooks") && kind == Kind::Group && d.no_group_hooks {
                return not_found();
            }
            if m != "GET" && !me.is_admin {
                return forbidden();
            }
            // A hook created below takes the next id.
            let hook_id = d.seq + 1;
            let users = d.users.clone();
            let Some(space) = d.space(kind, key) else {
                return not_found();
            };
            let made = space_call(m, space, tail, &body, &query, cap, hook_id, &users);
            if made.status() == StatusCode::CREATED && tail.first() == Some(&"hooks") {
                d.seq = hook_id;
            }
            made
        }
        _ => not_found(),
    }
}

fn create_user(d: &mut Data, body: &Value) -> Response {
    let field = |k: &str| body[k].as_str().unwrap_or_default().trim().to_owned();
    let (username, name, email) = (field("username"), field("name"), field("email"));
    if username.is_empty() || name.is_empty() || email.is_empty() {
        return message(
            StatusCode::BAD_REQUEST,
            "username, name and email are required",
        );
    }
    let has_password = !field("password").is_empty()
        || body["reset_password"] == json!(true)
        || body["force_random_password"] == json!(true);
    if !has_password {
        return message(
            StatusCode::BAD_REQUEST,
            "password, reset_password, force_random_password are missing, at least one parameter must be provided",
        );
    }
    if d.rejected.contains(&username.to_ascii_lowercase()) {
        return answer(
            StatusCode::BAD_REQUEST,
            json!({"message": {"username": ["is reserved"]}}),
        );
    }
    if d.users
        .iter()
        .any(|u| u.username.eq_ignore_ascii_case(&username) || u.email == email)
    {
        return message(
            StatusCode::CONFLICT,
            "Username or email has already been taken",
        );
    }
    let id = d.next();
    let user = FakeUser {
        id,
        username,
        name,
        email,
        is_admin: false,
        state: "active".into(),
    };
    let out = user_json(&user, true);
    d.users.push(user);
    answer(StatusCode::CREATED, out)
}

fn mint(d: &mut Data, id: &str, body: &Value) -> Response {
    let Some(uid) = id
        .parse::<u64>()
        .ok()
        .filter(|i| d.users.iter().any(|u| u.id == *i))
    else {
        return message(StatusCode::NOT_FOUND, "404 User Not Found");
    };
    let scopes: Vec<String> = body["scopes"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let name = body["name"].as_str().unwrap_or_default().to_owned();
    if scopes.is_empty() || name.is_empty() {
        return message(StatusCode::BAD_REQUEST, "name and scopes are required");
    }
    let tid = d.next();
    let token = FakeToken {
        id: tid,
        user_id: uid,
        name,
        scopes,
        expires_at: body["expires_at"].as_str().map(str::to_owned),
        revoked: false,
        value: format!("glpat-minted-{tid}-{}", uuid::Uuid::new_v4().simple()),
    };
    let out = json!({
        "id": tid, "name": token.name, "scopes": token.scopes, "expires_at": token.expires_at,
        "user_id": uid, "active": true, "revoked": false, "token": token.value
    });
    d.tokens.push(token);
    answer(StatusCode::CREATED, out)
}

/// Members and hooks of one group or project.
#[allow(clippy::too_many_arguments)]
fn space_call(
    method: &str,
    space: &mut Space,
    tail: &[&str],
    body: &Value,
    query: &BTreeMap<String, String>,
    cap: Option<usize>,
    hook_id: u64,
    users: &[FakeUser],
) -> Response {
    let member = |uid: u64, level: u32| {
        let username = users
            .iter()
            .find(|u| u.id == uid)
            .map(|u| u.username.clone())
            .unwrap_or_default();
        json!({"id": uid, "username": username, "access_level": level, "state": "active"})
    };
    let level = body["access_level"].as_u64().map(|l| l as u32);
    match (method, tail) {
        ("GET", []) => {
            let key = if space.kind == Kind::Group {
                "full_path"
            } else {
                "path_with_namespace"
            };
            let name = space.path.rsplit('/').next().unwrap_or_default();
            let mut v = json!({"id": space.id, "name": name, "path": name});
            v[key] = json!(space.path);
            answer(StatusCode::OK, v)
        }
        ("GET", ["members"]) => {
            let items = space.members.iter().map(|(u, l)| member(*u, *l)).collect();
            page(items, query, cap)
        }
        ("POST", ["members"]) => {
            let uid = body["user_id"].as_u64().unwrap_or_default();
            let (Some(level), true) = (level, users.iter().any(|u| u.id == uid)) else {
                return message(
                    StatusCode::BAD_REQUEST,
                    "user_id and access_level are required",
                );
            };
            if space.members.contains_key(&uid) {
                return message(StatusCode::CONFLICT, "Member already exists");
            }
            space.members.insert(uid, level);
            answer(StatusCode::CREATED, member(uid, level))
        }
        (m @ ("GET" | "PUT"), ["members", uid]) => {
            let uid = uid.parse::<u64>().unwrap_or_default();
            let Some(current) = space.members.get_mut(&uid) else {
                return message(StatusCode::NOT_FOUND, "404 Member Not Found");
            };
            if m == "PUT" {
                let Some(level) = level else {
                    return message(StatusCode::BAD_REQUEST, "access_level is missing");
                };
                *current = level;
            }
            answer(StatusCode::OK, member(uid, *current))
        }
        ("GET", ["hooks"]) => page(space.hooks.iter().map(hook_json).collect(), query, cap),
        ("POST", ["hooks"]) => {
            let Some(url) = body["url"].as_str().filter(|u| !u.is_empty()) else {
                return message(StatusCode::BAD_REQUEST, "url is missing");
            };
            let mut hook = FakeHook {
                id: hook_id,
                url: url.to_owned(),
                token: String::new(),
                events: BTreeMap::from([("push_events".to_owned(), true)]),
            };
            write_hook(&mut hook, body);
            let out = hook_json(&hook);
            space.hooks.push(hook);
            answer(StatusCode::CREATED, out)
        }
        (m @ ("GET" | "PUT" | "DELETE"), ["hooks", hid]) => {
            let hid = hid.parse::<u64>().unwrap_or_default();
            let Some(i) = space.hooks.iter().position(|h| h.id == hid) else {
                return message(StatusCode::NOT_FOUND, "404 Not found");
            };
            match m {
                "DELETE" => {
                    space.hooks.remove(i);
                    StatusCode::NO_CONTENT.into_response()
                }
                "PUT" => {
                    write_hook(&mut space.hooks[i], body);
                    answer(StatusCode::OK, hook_json(&space.hooks[i]))
                }
                _ => answer(StatusCode::OK, hook_json(&space.hooks[i])),
            }
        }
        _ => not_found(),
    }
}

/// The fields of a hook write: `url`, `token`, and every `*_events` flag.
fn write_hook(hook: &mut FakeHook, body: &Value) {
    let Some(fields) = body.as_object() else {
        return;
    };
    for (k, v) in fields {
        match (k.as_str(), v) {
            ("url", Value::String(s)) => hook.url = s.clone(),
            ("token", Value::String(s)) => hook.token = s.clone(),
            (k, Value::Bool(b)) if k.ends_with("_events") => {
                hook.events.insert(k.to_owned(), *b);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_and_queries_decode() {
        assert_eq!(decode("acme%2Fapp"), "acme/app");
        assert_eq!(decode("a+b%zz%4"), "a b%zz%4");
    }

    #[test]
    fn pages_carry_gitlab_headers_and_honour_the_cap() {
        let items: Vec<Value> = (0..5).map(|i| json!(i)).collect();
        let query = BTreeMap::from([
            ("per_page".to_owned(), "100".to_owned()),
            ("page".to_owned(), "2".to_owned()),
        ]);
        let resp = page(items, &query, Some(2));
        let header = |k: &str| {
            resp.headers()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        assert_eq!(header("x-per-page"), "2");
        assert_eq!(header("x-page"), "2");
        assert_eq!(header("x-next-page"), "3");
        assert_eq!(header("x-total"), "5");
    }
}
