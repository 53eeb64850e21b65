//! The REST API under `/api/v4`: routing, authentication, and the user,
//! team, channel, post, reaction and typing endpoints (bots, tokens and
//! config are in `admin`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::admin;
use super::model::error_json;
use super::state::{Data, Shared};

/// A status and a JSON body; errors are the same, Mattermost-shaped.
#[derive(Debug, Clone)]
pub(crate) struct Reply(pub StatusCode, pub Value);

pub(crate) type Res = Result<Reply, Reply>;

pub(crate) fn ok(body: Value) -> Res {
    Ok(Reply(StatusCode::OK, body))
}

pub(crate) fn created(body: Value) -> Res {
    Ok(Reply(StatusCode::CREATED, body))
}

pub(crate) fn fail(status: StatusCode, id: &str, message: &str) -> Reply {
    Reply(status, error_json(id, message, status.as_u16()))
}

pub(crate) fn error_response(status: StatusCode, id: &str, message: &str) -> Response {
    (status, Json(error_json(id, message, status.as_u16()))).into_response()
}

pub(crate) fn forbidden() -> Reply {
    fail(
        StatusCode::FORBIDDEN,
        "api.context.permissions.app_error",
        "You do not have the appropriate permissions.",
    )
}

pub(crate) fn not_found(id: &str, message: &str) -> Reply {
    fail(StatusCode::NOT_FOUND, id, message)
}

pub(crate) fn bad_request(id: &str, message: &str) -> Reply {
    fail(StatusCode::BAD_REQUEST, id, message)
}

pub(crate) fn user_not_found() -> Reply {
    not_found("app.user.missing_account.const", "Unable to find the user.")
}

fn channel_not_found() -> Reply {
    not_found(
        "app.channel.get.existing.app_error",
        "Unable to find the existing channel.",
    )
}

/// The token of `Authorization: Bearer <token>` (or `Token <token>`).
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get("authorization")?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let known = scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token");
    known.then(|| token.trim()).filter(|t| !t.is_empty())
}

/// The request body as JSON (400 when it is not).
pub(crate) fn body_json(body: &[u8]) -> Result<Value, Reply> {
    serde_json::from_slice(body).map_err(|_| {
        bad_request(
            "api.context.invalid_body_param.app_error",
            "Invalid or missing body in request body.",
        )
    })
}

/// A required string field of a JSON body (400 when missing or empty).
pub(crate) fn field<'a>(body: &'a Value, name: &str) -> Result<&'a str, Reply> {
    body[name]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            bad_request(
                "api.context.invalid_body_param.app_error",
                &format!("Invalid or missing {name} in request body."),
            )
        })
}

pub(crate) struct Query(HashMap<String, String>);

impl Query {
    fn parse(query: Option<&str>) -> Self {
        let pairs = query.unwrap_or_default().split('&').filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (!k.is_empty()).then(|| (k.to_owned(), v.to_owned()))
        });
        Self(pairs.collect())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn flag(&self, key: &str) -> bool {
        self.get(key) == Some("true")
    }

    /// A non-negative number, `default` when absent, 400 when malformed.
    pub fn number(&self, key: &str, default: i64) -> Result<i64, Reply> {
        match self.get(key) {
            None | Some("") => Ok(default),
            Some(v) => v.parse().ok().filter(|n: &i64| *n >= 0).ok_or_else(|| {
                bad_request(
                    "api.context.invalid_url_param.app_error",
                    &format!("Invalid or missing {key} parameter in request URL."),
                )
            }),
        }
    }

    /// `(skip, take)` from `page` and `per_page`.
    pub fn page(&self, per_page_default: i64) -> Result<(usize, usize), Reply> {
        let page = self.number("page", 0)?;
        let per_page = self.number("per_page", per_page_default)?.min(1000);
        let per_page = usize::try_from(per_page).unwrap_or(0);
        let page = usize::try_from(page).unwrap_or(0);
        Ok((page.saturating_mul(per_page), per_page))
    }
}

/// Every REST request: recorded, routed, answered with `X-Version-Id`.
pub(crate) async fn dispatch(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut data = shared.lock();
    data.requests
        .push((method.to_string(), uri.path().to_owned()));
    let query = Query::parse(uri.query());
    let Reply(status, body) =
        route(&mut data, &method, uri.path(), &query, &headers, &body).unwrap_or_else(|e| e);
    drop(data);
    let mut response = (status, Json(body)).into_response();
    response
        .headers_mut()
        .insert("x-version-id", HeaderValue::from_static("10.5.0.fake"));
    response
}

fn route(d: &mut Data, m: &Method, path: &str, q: &Query, h: &HeaderMap, body: &[u8]) -> Res {
    let segments: Vec<&str> = path
        .strip_prefix("/api/v4/")
        .unwrap_or_default()
        .split('/')
        .collect();
    // Authentication is checked only once a route matched, so an unknown
    // path is a 404 with or without a token.
    let auth = match bearer(h).and_then(|t| d.user_for_token(t)) {
        Some(user) => Ok(user.id.clone()),
        None => Err(fail(
            StatusCode::UNAUTHORIZED,
            "api.context.session_expired.app_error",
            "Invalid or expired session, please login again.",
        )),
    };
    let me = || auth.clone();
    match (m.as_str(), segments.as_slice()) {
        ("GET", ["system", "ping"]) => ok(json!({"status": "OK"})),
        ("GET", ["config", "client"]) => admin::client_config(d),
        ("GET", ["config"]) => admin::config(d, &me()?),
        ("GET", ["users", "me"]) => get_user(d, &me()?),
        ("GET", ["users", "username", name]) => {
            me()?;
            d.user_by_name(name)
                .map(|u| Reply(StatusCode::OK, u.to_json()))
                .ok_or_else(user_not_found)
        }
        ("POST", ["users", "ids"]) => {
            me()?;
            let ids = body_json(body)?;
            let users: Vec<Value> = ids
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|id| d.users.get(id.as_str()?))
                .map(|u| u.to_json())
                .collect();
            ok(json!(users))
        }
        ("POST", ["users", "tokens", "revoke"]) => admin::revoke_token(d, &me()?, body),
        ("GET", ["users", id]) => {
            let me = me()?;
            get_user(d, resolve(&me, id))
        }
        ("GET", ["users", id, "tokens"]) => admin::list_tokens(d, &me()?, id, q),
        ("POST", ["users", id, "tokens"]) => admin::create_token(d, &me()?, id, body),
        ("POST", ["users", id, "typing"]) => typing(d, &me()?, id, body),
        ("GET", ["users", id, "teams", team, "channels"]) => user_channels(d, &me()?, id, team),
        ("GET", ["teams", "name", name]) => {
            me()?;
            d.teams
                .values()
                .find(|t| t.name == *name)
                .map(|t| Reply(StatusCode::OK, t.to_json()))
                .ok_or_else(|| {
                    not_found(
                        "app.team.get_by_name.missing.app_error",
                        "Unable to find the existing team.",
                    )
                })
        }
        ("GET", ["teams", team, "members", user]) => {
            let me = me()?;
            let user = resolve(&me, user);
            if d.in_team(team, user) {
                ok(json!({"team_id": team, "user_id": user, "roles": "team_user"}))
            } else {
                Err(not_found(
                    "app.team.get_member.missing.app_error",
                    "No team member found for that user ID and team ID.",
                ))
            }
        }
        ("POST", ["teams", team, "members"]) => add_team_member(d, &me()?, team, body),
        ("GET", ["teams", team, "channels", "name", name]) => {
            channel_by_name(d, &me()?, team, name)
        }
        ("POST", ["channels", "direct"]) => direct(d, &me()?, body),
        ("GET", ["channels", channel, "members", user]) => {
            let me = me()?;
            let user = resolve(&me, user);
            if d.is_member(channel, user) {
                ok(json!({"channel_id": channel, "user_id": user, "roles": "channel_user"}))
            } else {
                Err(not_found(
                    "app.channel.get_member.missing.app_error",
                    "No channel member found for that user ID and channel ID.",
                ))
            }
        }
        ("POST", ["channels", channel, "members"]) => add_channel_member(d, &me()?, channel, body),
        ("GET", ["channels", channel, "posts"]) => channel_posts(d, &me()?, channel, q),
        ("GET", ["channels", channel]) => get_channel(d, &me()?, channel),
        ("GET", ["posts", post]) => get_post(d, &me()?, post),
        ("POST", ["posts"]) => create_post(d, &me()?, body),
        ("POST", ["reactions"]) => react(d, &me()?, body),
        ("GET", ["bots"]) => admin::list_bots(d, &me()?, q),
        ("POST", ["bots"]) => admin::create_bot(d, &me()?, body),
        ("PUT", ["bots", id]) => admin::patch_bot(d, &me()?, id, body),
        ("POST", ["bots", id, "disable"]) => admin::set_bot_enabled(d, &me()?, id, false),
        ("POST", ["bots", id, "enable"]) => admin::set_bot_enabled(d, &me()?, id, true),
        _ => Err(not_found(
            "api.context.404.app_error",
            "Sorry, we could not find the page.",
        )),
    }
}

/// `me` in a path means the caller.
pub(crate) fn resolve<'a>(me: &'a str, id: &'a str) -> &'a str {
    if id == "me" { me } else { id }
}

fn get_user(d: &Data, id: &str) -> Res {
    d.users
        .get(id)
        .map(|u| Reply(StatusCode::OK, u.to_json()))
        .ok_or_else(user_not_found)
}

fn user_channels(d: &Data, me: &str, user: &str, team: &str) -> Res {
    let user = resolve(me, user);
    if user != me && !d.is_admin(me) {
        return Err(forbidden());
    }
    if !d.teams.contains_key(team) {
        return Err(not_found(
            "app.team.get.find.app_error",
            "Unable to find the existing team.",
        ));
    }
    let mut channels: Vec<_> = d
        .channels
        .values()
        .filter(|c| (c.team_id == team || c.is_direct()) && d.is_member(&c.id, user))
        .collect();
    channels.sort_by_key(|c| c.create_at);
    ok(json!(
        channels.iter().map(|c| c.to_json()).collect::<Vec<_>>()
    ))
}

fn add_team_member(d: &mut Data, me: &str, team: &str, body: &[u8]) -> Res {
    if !d.is_admin(me) {
        return Err(forbidden());
    }
    let body = body_json(body)?;
    let user = resolve(me, field(&body, "user_id")?).to_owned();
    if body["team_id"].as_str().is_some_and(|t| t != team) {
        return Err(bad_request(
            "api.team.add_user_to_team.missing_parameter.app_error",
            "team_id in the body does not match the URL.",
        ));
    }
    if !d.teams.contains_key(team) {
        return Err(not_found(
            "app.team.get.find.app_error",
            "Unable to find the existing team.",
        ));
    }
    if !d.users.contains_key(&user) {
        return Err(user_not_found());
    }
    d.team_members.insert((team.to_owned(), user.clone()));
    created(json!({"team_id": team, "user_id": user, "roles": "team_user"}))
}

fn channel_by_name(d: &Data, me: &str, team: &str, name: &str) -> Res {
    let channel = d
        .channels
        .values()
        .find(|c| c.team_id == team && c.name == name)
        .ok_or_else(|| {
            not_found(
                "app.channel.get_by_name.missing.app_error",
                "Channel does not exist.",
            )
        })?;
    if channel.kind == "P" && !d.is_member(&channel.id, me) && !d.is_admin(me) {
        return Err(forbidden());
    }
    ok(channel.to_json())
}

fn get_channel(d: &Data, me: &str, channel: &str) -> Res {
    let rec = d.channels.get(channel).ok_or_else(channel_not_found)?;
    if rec.kind != "O" && !d.is_member(channel, me) && !d.is_admin(me) {
        return Err(forbidden());
    }
    ok(rec.to_json())
}

/// `GET /posts/{id}`: readable by members of its channel.
fn get_post(d: &Data, me: &str, post: &str) -> Res {
    let p = d
        .posts
        .iter()
        .find(|p| p.id == post && p.delete_at == 0)
        .ok_or_else(|| not_found("app.post.get.app_error", "Unable to get the post."))?;
    if !d.is_member(&p.channel_id, me) && !d.is_admin(me) {
        return Err(forbidden());
    }
    ok(p.to_json())
}

fn direct(d: &mut Data, me: &str, body: &[u8]) -> Res {
    let body = body_json(body)?;
    let ids: Vec<&str> = body
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let [a, b] = ids.as_slice() else {
        return Err(bad_request(
            "api.context.invalid_body_param.app_error",
            "Invalid or missing user_ids in request body.",
        ));
    };
    if !d.users.contains_key(*a) || !d.users.contains_key(*b) {
        return Err(user_not_found());
    }
    if me != *a && me != *b && !d.is_admin(me) {
        return Err(forbidden());
    }
    let (id, made) = d.direct_channel(a, b);
    let channel = d.channels.get(&id).map(|c| c.to_json()).unwrap_or_default();
    let status = if made {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(Reply(status, channel))
}

fn add_channel_member(d: &mut Data, me: &str, channel: &str, body: &[u8]) -> Res {
    let Some(rec) = d.channels.get(channel) else {
        return Err(channel_not_found());
    };
    if rec.is_direct() {
        return Err(bad_request(
            "api.channel.add_user_to_channel.type.app_error",
            "Can not add user to this channel type.",
        ));
    }
    if !d.is_admin(me) && !d.is_member(channel, me) {
        return Err(forbidden());
    }
    let body = body_json(body)?;
    let user = resolve(me, field(&body, "user_id")?).to_owned();
    if !d.users.contains_key(&user) {
        return Err(user_not_found());
    }
    d.join(channel, &user);
    created(json!({"channel_id": channel, "user_id": user, "roles": "channel_user"}))
}

fn channel_posts(d: &Data, me: &str, channel: &str, q: &Query) -> Res {
    if !d.channels.contains_key(channel) {
        return Err(channel_not_found());
    }
    if !d.is_member(channel, me) {
        return Err(forbidden());
    }
    let in_channel = d.posts.iter().filter(|p| p.channel_id == channel);
    let mut posts: Vec<_> = match q.get("since") {
        Some(_) => {
            let since = q.number("since", 0)?;
            in_channel.filter(|p| p.update_at > since).collect()
        }
        None => in_channel.filter(|p| p.delete_at == 0).collect(),
    };
    posts.sort_by_key(|p| std::cmp::Reverse(p.create_at));
    if q.get("since").is_none() {
        let (skip, take) = q.page(60)?;
        posts = posts.into_iter().skip(skip).take(take).collect();
    }
    let order: Vec<&str> = posts.iter().map(|p| p.id.as_str()).collect();
    let map: serde_json::Map<String, Value> =
        posts.iter().map(|p| (p.id.clone(), p.to_json())).collect();
    ok(json!({
        "order": order,
        "posts": map,
        "next_post_id": "",
        "prev_post_id": "",
        "has_next": false,
    }))
}

fn create_post(d: &mut Data, me: &str, body: &[u8]) -> Res {
    let body = body_json(body)?;
    let channel = field(&body, "channel_id")?;
    let message = body["message"].as_str().unwrap_or_default();
    let root_id = body["root_id"].as_str().unwrap_or_default();
    if !d.channels.contains_key(channel) {
        return Err(channel_not_found());
    }
    if !d.is_member(channel, me) {
        return Err(forbidden());
    }
    if !root_id.is_empty()
        && d.post(root_id)
            .is_none_or(|root| root.channel_id != channel)
    {
        return Err(bad_request(
            "api.post.create_post.root_id.app_error",
            "Invalid RootId parameter.",
        ));
    }
    let props = body["props"].clone();
    let post = d.create_post(me, channel, message, root_id, props, "");
    let mut json = post.to_json();
    if let Some(pending) = body["pending_post_id"].as_str() {
        json["pending_post_id"] = json!(pending);
    }
    created(json)
}

fn react(d: &mut Data, me: &str, body: &[u8]) -> Res {
    let body = body_json(body)?;
    let user = field(&body, "user_id")?;
    let post = field(&body, "post_id")?;
    let emoji = field(&body, "emoji_name")?;
    if user != me {
        return Err(forbidden());
    }
    let Some(channel) = d.post(post).map(|p| p.channel_id.clone()) else {
        return Err(not_found(
            "app.post.get.app_error",
            "Unable to get the post.",
        ));
    };
    if !d.is_member(&channel, me) {
        return Err(forbidden());
    }
    d.react(me, post, emoji)
        .map(|reaction| Reply(StatusCode::CREATED, reaction))
        .ok_or_else(|| not_found("app.post.get.app_error", "Unable to get the post."))
}

fn typing(d: &mut Data, me: &str, user: &str, body: &[u8]) -> Res {
    if resolve(me, user) != me {
        return Err(forbidden());
    }
    let body = body_json(body)?;
    let channel = field(&body, "channel_id")?;
    let parent = body["parent_id"].as_str().unwrap_or_default();
    d.typing(me, channel, parent);
    ok(json!({"status": "OK"}))
}
