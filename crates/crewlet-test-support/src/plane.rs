//! A fake Plane API (v1) on 127.0.0.1 for tests, for one workspace:
//!
//! - `GET /api/v1/users/me/`, `GET /workspaces/{slug}/members/`;
//! - `GET|POST /workspaces/{slug}/projects/` (the creator becomes the
//!   project's admin), `GET|POST .../projects/{id}/members/`;
//! - `GET|POST .../projects/{id}/pages/`, `GET|PATCH .../pages/{page}/`;
//! - `GET /workspaces/{slug}/pages/search/?query=..&projects=<ids>&per_page=N`:
//!   every word must appear in the name or the text (case-insensitive),
//!   more than 16 distinct words is a 400, newest first;
//! - `GET|POST /workspaces/{slug}/webhooks/`, `PATCH .../webhooks/{id}/`
//!   (workspace admins only). A webhook created without `secret_key` gets
//!   a generated one; the secret is shown only in the create answer.
//!
//! Tokens go in `X-API-Key`. Pages are read only by members of their
//! project, and a page restricted to some users by those only. Every
//! request is recorded. [`FakePlane::deliver`] POSTs an event to every
//! active webhook, signed the way Plane signs (`X-Plane-Signature`: hex
//! HMAC-SHA256 of the body with the hook's secret).

mod routes;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use hmac::{Hmac, KeyInit, Mac};
use parking_lot::Mutex;
use serde_json::Value;
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A workspace member and its API token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaneUser {
    pub id: String,
    pub email: String,
    pub username: String,
    pub display_name: String,
    pub token: String,
    /// Workspace admin (may manage webhooks and see every project).
    pub admin: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeProject {
    pub id: String,
    pub identifier: String,
    pub name: String,
    /// User id -> role number (20 admin, 15 member, 5 guest).
    pub members: BTreeMap<String, u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakePlanePage {
    pub id: String,
    pub project_id: String,
    pub name: String,
    pub description_html: String,
    pub parent: Option<String>,
    pub external_id: Option<String>,
    pub external_source: Option<String>,
    /// User ids that may read it; empty: every project member.
    pub readers: BTreeSet<String>,
    /// Bumped on every write: the search's order.
    pub updated: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeWebhook {
    pub id: String,
    pub url: String,
    pub secret_key: String,
    pub is_active: bool,
}

pub use crate::request_log::Request;
use crate::request_log::RequestLog;

/// One delivery by [`FakePlane::deliver`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub url: String,
    /// The receiver's status; `None` when it could not be reached.
    pub status: Option<u16>,
    pub body: String,
}

#[derive(Default)]
pub(crate) struct Data {
    seq: u64,
    pub(crate) workspace: String,
    pub(crate) users: Vec<PlaneUser>,
    pub(crate) projects: BTreeMap<String, FakeProject>,
    pub(crate) pages: BTreeMap<String, FakePlanePage>,
    pub(crate) webhooks: Vec<FakeWebhook>,
    pub(crate) requests: RequestLog,
}

impl Data {
    pub(crate) fn next(&mut self, prefix: &str) -> String {
        self.seq += 1;
        format!("{prefix}-{:08}", self.seq)
    }

    pub(crate) fn tick(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

/// A running fake Plane; stops when dropped.
pub struct FakePlane {
    data: Arc<Mutex<Data>>,
    addr: SocketAddr,
    server: JoinHandle<()>,
}

impl Drop for FakePlane {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Hex HMAC-SHA256 of `body` with `secret`: Plane's `X-Plane-Signature`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return String::new();
    };
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

impl FakePlane {
    /// Serves workspace `workspace` on a free port of 127.0.0.1.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start(workspace: &str) -> FakePlane {
        let listener = match TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await {
            Ok(l) => l,
            Err(e) => panic!("fake Plane: cannot listen on 127.0.0.1: {e}"),
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => panic!("fake Plane: no local address: {e}"),
        };
        let data = Arc::new(Mutex::new(Data {
            workspace: workspace.to_owned(),
            ..Data::default()
        }));
        let app = Router::new()
            .fallback(routes::handle)
            .with_state(data.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakePlane { data, addr, server }
    }

    /// The instance URL (`integrations.plane.url`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn workspace(&self) -> String {
        self.data.lock().workspace.clone()
    }

    /// A workspace member `name` (`name@example.com`, username `name`).
    pub fn add_user(&self, name: &str, admin: bool) -> PlaneUser {
        let mut d = self.data.lock();
        let id = d.next("user");
        let user = PlaneUser {
            token: format!("plane_api_{name}_{id}"),
            id,
            email: format!("{name}@example.com"),
            username: name.to_owned(),
            display_name: name.to_owned(),
            admin,
        };
        d.users.push(user.clone());
        user
    }

    /// A project with no members; its id.
    pub fn add_project(&self, identifier: &str) -> String {
        let mut d = self.data.lock();
        let id = d.next("proj");
        d.projects.insert(
            id.clone(),
            FakeProject {
                id: id.clone(),
                identifier: identifier.to_owned(),
                name: identifier.to_owned(),
                members: BTreeMap::new(),
            },
        );
        id
    }

    /// Makes `user` a member of project `project` (role 15).
    pub fn join(&self, project: &str, user: &str) {
        if let Some(p) = self.data.lock().projects.get_mut(project) {
            p.members.insert(user.to_owned(), 15);
        }
    }

    /// A page readable by every member of `project`; its id.
    pub fn add_page(&self, project: &str, name: &str, html: &str, parent: Option<&str>) -> String {
        let mut d = self.data.lock();
        let id = d.next("page");
        let updated = d.tick();
        d.pages.insert(
            id.clone(),
            FakePlanePage {
                id: id.clone(),
                project_id: project.to_owned(),
                name: name.to_owned(),
                description_html: html.to_owned(),
                parent: parent.map(str::to_owned),
                external_id: None,
                external_source: None,
                readers: BTreeSet::new(),
                updated,
            },
        );
        id
    }

    /// Only these user ids may read page `id`.
    pub fn restrict(&self, id: &str, readers: &[&str]) {
        if let Some(p) = self.data.lock().pages.get_mut(id) {
            p.readers = readers.iter().map(|r| (*r).to_owned()).collect();
        }
    }

    pub fn projects(&self) -> Vec<FakeProject> {
        self.data.lock().projects.values().cloned().collect()
    }

    pub fn project_by_identifier(&self, identifier: &str) -> Option<FakeProject> {
        let d = self.data.lock();
        d.projects
            .values()
            .find(|p| p.identifier.eq_ignore_ascii_case(identifier))
            .cloned()
    }

    pub fn pages(&self) -> Vec<FakePlanePage> {
        self.data.lock().pages.values().cloned().collect()
    }

    pub fn webhooks(&self) -> Vec<FakeWebhook> {
        self.data.lock().webhooks.clone()
    }

    pub fn requests(&self) -> Vec<Request> {
        self.data.lock().requests.all()
    }

    /// Requests that changed something (`POST`, `PATCH`).
    pub fn writes(&self) -> Vec<Request> {
        self.data.lock().requests.with_methods(&["POST", "PATCH"])
    }

    pub fn clear_requests(&self) {
        self.data.lock().requests.clear();
    }

    /// POSTs `event` to every active webhook, signed with its secret.
    pub async fn deliver(&self, event: &Value) -> Vec<Delivery> {
        let hooks: Vec<FakeWebhook> = self
            .webhooks()
            .into_iter()
            .filter(|h| h.is_active)
            .collect();
        let body = event.to_string();
        let kind = event
            .get("event")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let http = reqwest::Client::new();
        let mut out = Vec::new();
        for (n, hook) in hooks.iter().enumerate() {
            let sent = http
                .post(&hook.url)
                .header("content-type", "application/json")
                .header("x-plane-signature", sign(&hook.secret_key, body.as_bytes()))
                .header("x-plane-delivery", format!("delivery-{n}-{}", body.len()))
                .header("x-plane-event", &kind)
                .body(body.clone())
                .timeout(std::time::Duration::from_secs(10))
                .send()
                .await;
            let (status, text) = match sent {
                Ok(r) => {
                    let status = r.status().as_u16();
                    (Some(status), r.text().await.unwrap_or_default())
                }
                Err(_) => (None, String::new()),
            };
            out.push(Delivery {
                url: hook.url.clone(),
                status,
                body: text,
            });
        }
        out
    }
}
