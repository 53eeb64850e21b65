//! A fake GitLab (REST API v4, the part provisioning uses) on 127.0.0.1:
//! users, groups, projects, direct members, personal access tokens (their
//! value shown once, at creation), group and project hooks, and a log of
//! every request. Authentication is `PRIVATE-TOKEN` (or a bearer token);
//! creating users, minting their tokens and writing members and hooks need
//! an administrator. Lists are paginated like GitLab (`page`, `per_page`,
//! `X-Next-Page`), and the page size can be capped to make a client page.
//!
//! ```text
//! let gitlab = FakeGitlab::start().await;
//! let admin = gitlab.add_admin("root");
//! gitlab.add_group("acme");
//! gitlab.add_project("acme/app");
//! // provision against gitlab.url(), then:
//! let sent = gitlab.fire_issue_comment("acme/app", 7, "alice", "@agent-eng please look").await;
//! ```
//!
//! [`FakeGitlab::fire_issue_comment`] posts a `Note Hook` payload (the
//! shape of GitLab's documented example) to every hook that covers the
//! project, with the hook's own `X-Gitlab-Token`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

mod routes;

/// One request the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path as sent (`/api/v4/groups/acme%2Fsub`).
    pub path: String,
    pub query: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeUser {
    pub id: u64,
    pub username: String,
    pub name: String,
    pub email: String,
    pub is_admin: bool,
    pub state: String,
}

/// A personal access token; `value` is what the client must send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeToken {
    pub id: u64,
    pub user_id: u64,
    pub name: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<String>,
    pub revoked: bool,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeHook {
    pub id: u64,
    pub url: String,
    /// The secret GitLab sends as `X-Gitlab-Token` (never shown by the API).
    pub token: String,
    /// `note_events`, `issues_events`, ...: the flags the hook was given.
    pub events: BTreeMap<String, bool>,
}

/// What one webhook delivery got back.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub url: String,
    /// 0 when nothing answered.
    pub status: u16,
    pub body: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Group,
    Project,
}

#[derive(Debug, Clone)]
struct Space {
    id: u64,
    kind: Kind,
    path: String,
    members: BTreeMap<u64, u32>,
    hooks: Vec<FakeHook>,
}

#[derive(Default)]
struct Data {
    seq: u64,
    users: Vec<FakeUser>,
    tokens: Vec<FakeToken>,
    spaces: Vec<Space>,
    requests: Vec<Request>,
    max_per_page: Option<usize>,
    rejected: BTreeSet<String>,
    no_group_hooks: bool,
}

impl Data {
    fn next(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn space(&mut self, kind: Kind, key: &str) -> Option<&mut Space> {
        let id = key.parse::<u64>().ok();
        self.spaces
            .iter_mut()
            .find(|s| s.kind == kind && (Some(s.id) == id || s.path.eq_ignore_ascii_case(key)))
    }

    fn user_of(&self, token: &str) -> Option<FakeUser> {
        let t = self
            .tokens
            .iter()
            .find(|t| t.value == token && !t.revoked)?;
        self.users.iter().find(|u| u.id == t.user_id).cloned()
    }
}

/// A running fake GitLab; stops when dropped.
pub struct FakeGitlab {
    data: Arc<Mutex<Data>>,
    addr: SocketAddr,
    server: JoinHandle<()>,
}

impl Drop for FakeGitlab {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeGitlab {
    /// Listens on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start() -> FakeGitlab {
        let listener = match TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await {
            Ok(l) => l,
            Err(e) => panic!("fake GitLab: cannot listen on 127.0.0.1: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => panic!("fake GitLab: no local address: {e}"),
        };
        let data = Arc::new(Mutex::new(Data::default()));
        let app = Router::new()
            .fallback(routes::handle)
            .with_state(data.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeGitlab { data, addr, server }
    }

    /// The instance URL (`integrations.gitlab.url`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A user; its id.
    pub fn add_user(&self, username: &str, is_admin: bool) -> u64 {
        let mut d = self.data.lock();
        let id = d.next();
        d.users.push(FakeUser {
            id,
            username: username.into(),
            name: username.into(),
            email: format!("{username}@example.test"),
            is_admin,
            state: "active".into(),
        });
        id
    }

    /// A working token (scope `api`) of user `user_id`.
    pub fn add_token(&self, user_id: u64) -> String {
        let mut d = self.data.lock();
        let id = d.next();
        let value = format!("glpat-fake-{id}-{}", uuid::Uuid::new_v4().simple());
        d.tokens.push(FakeToken {
            id,
            user_id,
            name: "fixture".into(),
            scopes: vec!["api".into()],
            expires_at: None,
            revoked: false,
            value: value.clone(),
        });
        value
    }

    /// An administrator `username`; its token.
    pub fn add_admin(&self, username: &str) -> String {
        let id = self.add_user(username, true);
        self.add_token(id)
    }

    /// A group (or subgroup, `acme/sub`); its id.
    pub fn add_group(&self, path: &str) -> u64 {
        self.add_space(Kind::Group, path)
    }

    /// A project `group/name`; its id.
    pub fn add_project(&self, path: &str) -> u64 {
        self.add_space(Kind::Project, path)
    }

    fn add_space(&self, kind: Kind, path: &str) -> u64 {
        let mut d = self.data.lock();
        let id = d.next();
        d.spaces.push(Space {
            id,
            kind,
            path: path.into(),
            members: BTreeMap::new(),
            hooks: Vec::new(),
        });
        id
    }

    /// A hook on the group or project at `path` that sends pushes only.
    ///
    /// # Panics
    /// When there is no such group or project.
    pub fn add_hook(&self, path: &str, url: &str, token: &str) -> u64 {
        let mut d = self.data.lock();
        let id = d.next();
        let Some(space) = d
            .spaces
            .iter_mut()
            .find(|s| s.path.eq_ignore_ascii_case(path))
        else {
            panic!("fake GitLab: no group or project {path}");
        };
        space.hooks.push(FakeHook {
            id,
            url: url.into(),
            token: token.into(),
            events: BTreeMap::from([("push_events".to_owned(), true)]),
        });
        id
    }

    /// Lists answer at most `n` items a page, whatever `per_page` asks.
    pub fn set_max_per_page(&self, n: usize) {
        self.data.lock().max_per_page = Some(n.max(1));
    }

    /// `POST /users` refuses `username` (400), as for a reserved name.
    pub fn reject_username(&self, username: &str) {
        self.data
            .lock()
            .rejected
            .insert(username.to_ascii_lowercase());
    }

    /// Group hook endpoints answer 404, as on GitLab Free.
    pub fn disable_group_hooks(&self) {
        self.data.lock().no_group_hooks = true;
    }

    pub fn user(&self, username: &str) -> Option<FakeUser> {
        let d = self.data.lock();
        d.users
            .iter()
            .find(|u| u.username.eq_ignore_ascii_case(username))
            .cloned()
    }

    pub fn users(&self) -> Vec<FakeUser> {
        self.data.lock().users.clone()
    }

    /// The access level of `username`'s direct membership of the group or
    /// project at `path`.
    pub fn member_level(&self, path: &str, username: &str) -> Option<u32> {
        let uid = self.user(username)?.id;
        let d = self.data.lock();
        let space = d
            .spaces
            .iter()
            .find(|s| s.path.eq_ignore_ascii_case(path))?;
        space.members.get(&uid).copied()
    }

    /// The hooks of the group or project at `path`.
    pub fn hooks(&self, path: &str) -> Vec<FakeHook> {
        let d = self.data.lock();
        d.spaces
            .iter()
            .find(|s| s.path.eq_ignore_ascii_case(path))
            .map(|s| s.hooks.clone())
            .unwrap_or_default()
    }

    /// Every token of `username`, revoked ones included.
    pub fn tokens_of(&self, username: &str) -> Vec<FakeToken> {
        let Some(uid) = self.user(username).map(|u| u.id) else {
            return Vec::new();
        };
        let d = self.data.lock();
        d.tokens
            .iter()
            .filter(|t| t.user_id == uid)
            .cloned()
            .collect()
    }

    /// Revokes every token of `username`.
    pub fn revoke_tokens_of(&self, username: &str) {
        let Some(uid) = self.user(username).map(|u| u.id) else {
            return;
        };
        for t in self.data.lock().tokens.iter_mut() {
            if t.user_id == uid {
                t.revoked = true;
            }
        }
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.data.lock().requests.clone()
    }

    /// The requests that may change something (anything but `GET`).
    pub fn writes(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| r.method != "GET")
            .collect()
    }

    /// Forgets the request log.
    pub fn clear_requests(&self) {
        self.data.lock().requests.clear();
    }

    /// `author` comments `note` on issue `iid` of `project`: a `Note Hook`
    /// delivery to every hook of the project or of a group above it that
    /// sends note events, with the hook's `X-Gitlab-Token`.
    pub async fn fire_issue_comment(
        &self,
        project: &str,
        iid: u64,
        author: &str,
        note: &str,
    ) -> Vec<Delivery> {
        let (body, targets) = {
            let mut d = self.data.lock();
            let author_id = d
                .users
                .iter()
                .find(|u| u.username.eq_ignore_ascii_case(author))
                .map_or(0, |u| u.id);
            let note_id = d.next();
            let project_id = d
                .spaces
                .iter()
                .find(|s| s.kind == Kind::Project && s.path.eq_ignore_ascii_case(project))
                .map_or(0, |s| s.id);
            let targets: Vec<(String, String)> = d
                .spaces
                .iter()
                .filter(|s| covers(s, project))
                .flat_map(|s| s.hooks.iter())
                .filter(|h| h.events.get("note_events") == Some(&true))
                .map(|h| (h.url.clone(), h.token.clone()))
                .collect();
            let body = note_hook(
                &self.url(),
                project,
                project_id,
                iid,
                (author, author_id),
                (note_id, note),
            );
            (body, targets)
        };
        let client = reqwest::Client::new();
        let mut out = Vec::new();
        for (url, token) in targets {
            let sent = client
                .post(&url)
                .header("content-type", "application/json")
                .header("x-gitlab-event", "Note Hook")
                .header("x-gitlab-token", token)
                .header("x-gitlab-event-uuid", uuid::Uuid::new_v4().to_string())
                .header("x-gitlab-instance", self.url())
                .header("user-agent", "GitLab/17.0.0")
                .body(body.to_string())
                .send()
                .await;
            let (status, body) = match sent {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    (status, resp.json::<Value>().await.unwrap_or(Value::Null))
                }
                Err(_) => (0, Value::Null),
            };
            out.push(Delivery { url, status, body });
        }
        out
    }
}

/// Whether the hooks of `space` fire for `project`: its own, or a group's
/// above it.
fn covers(space: &Space, project: &str) -> bool {
    let project = project.to_ascii_lowercase();
    let path = space.path.to_ascii_lowercase();
    match space.kind {
        Kind::Project => path == project,
        Kind::Group => project.starts_with(&format!("{path}/")),
    }
}

/// A `Note Hook` body for a comment on an issue, shaped like GitLab's
/// documented example.
fn note_hook(
    base: &str,
    project: &str,
    project_id: u64,
    iid: u64,
    (author, author_id): (&str, u64),
    (note_id, note): (u64, &str),
) -> Value {
    let web_url = format!("{base}/{project}");
    let (namespace, name) = project.rsplit_once('/').unwrap_or(("", project));
    let host = base.trim_start_matches("http://");
    let project_json = json!({
        "id": project_id, "name": name, "description": "", "web_url": web_url,
        "avatar_url": null, "git_ssh_url": format!("git@{host}:{project}.git"),
        "git_http_url": format!("{web_url}.git"), "namespace": namespace,
        "visibility_level": 0, "path_with_namespace": project, "default_branch": "main",
        "homepage": web_url, "url": format!("{web_url}.git"),
        "ssh_url": format!("git@{host}:{project}.git"), "http_url": format!("{web_url}.git")
    });
    let stamp = "2024-01-01 12:00:00 UTC";
    json!({
        "object_kind": "note",
        "event_type": "note",
        "user": {"id": author_id, "name": author, "username": author,
                 "avatar_url": null, "email": "[REDACTED]"},
        "project_id": project_id,
        "project": project_json,
        "object_attributes": {
            "id": note_id, "note": note, "noteable_type": "Issue", "author_id": author_id,
            "created_at": stamp, "updated_at": stamp, "project_id": project_id,
            "attachment": null, "line_code": null, "commit_id": "", "noteable_id": 1000 + iid,
            "system": false, "st_diff": null, "action": "create",
            "url": format!("{web_url}/-/issues/{iid}#note_{note_id}")
        },
        "repository": {"name": name, "url": format!("git@{host}:{project}.git"),
                       "description": "", "homepage": web_url},
        "issue": {
            "id": 1000 + iid, "iid": iid, "title": format!("Issue {iid}"), "description": "",
            "state": "opened", "project_id": project_id, "author_id": author_id,
            "assignee_ids": [], "assignee_id": null, "labels": [],
            "created_at": stamp, "updated_at": stamp,
            "url": format!("{web_url}/-/issues/{iid}")
        }
    })
}
