//! The test harness: the API on 127.0.0.1:0 with the memory queue and
//! memory stores, a recorder of everything published, and request signers.
#![allow(dead_code)]

pub mod entities;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use base64::Engine;
use crewlet_api::{Api, ApiBuilder, ApiLimits, ApiState, EngineView};
use crewlet_config::{ApiAuth, ApiConfig, ApiToken, check_company};
use crewlet_core::Event;
use crewlet_queue::{EventQueue, HandlerError, MemoryQueue, PublishListener, topics};
use crewlet_store::{NewRevision, Stores};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const TOKEN: &str = "ops-token-0123456789";
pub const GITHUB_SECRET: &str = "gh-secret";
pub const GITLAB_TOKEN: &str = "gl-token";
pub const PLANE_SECRET: &str = "plane-secret";
pub const JIRA_SECRET: &str = "jira-secret";
pub const CONFLUENCE_SECRET: &str = "conf-secret";
pub const SLACK_SECRET: &str = "slack-secret";

/// A company with every webhook secret; GitHub's comes from `${GH_SECRET}`.
pub const COMPANY: &str = r#"
name: Test Co
providers:
  llm:
    main:
      type: openai
      model: gpt-test
      api_keys: ["${OPENAI_API_KEY}"]
integrations:
  github:
    webhook_secret: "${GH_SECRET}"
  gitlab:
    webhook_token: gl-token
  plane:
    webhook_secret: plane-secret
  jira:
    webhook_secret: jira-secret
  confluence:
    webhook_secret: conf-secret
roles:
  - name: CEO
    handle: ceo
    integrations:
      slack:
        signing_secret: slack-secret
        bot_token: xoxb-test
units:
  - name: Engineering
    lead: cto
    roles:
      - name: CTO
        handle: cto
      - name: Engineer
        handle: eng
"#;

/// A company without any webhook secret.
pub const COMPANY_NO_SECRETS: &str = r#"
name: Bare Co
providers:
  llm:
    main:
      type: openai
      model: gpt-test
      api_keys: ["${OPENAI_API_KEY}"]
roles:
  - name: CEO
    handle: ceo
"#;

/// Everything published, in order, recorded inline (before `publish` returns).
#[derive(Default, Clone)]
pub struct Published(pub Arc<Mutex<Vec<(String, Event)>>>);

impl Published {
    pub fn on(&self, topic: &str) -> Vec<Event> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t == topic)
            .map(|(_, e)| e.clone())
            .collect()
    }

    pub fn inbound(&self) -> Vec<Event> {
        self.on(topics::NOTIFICATIONS_INBOUND)
    }
}

struct Recorder {
    published: Published,
    stores: Stores,
}

#[async_trait]
impl PublishListener for Recorder {
    async fn on_publish(&self, topic: &str, event: &Event) -> Result<(), HandlerError> {
        self.published
            .0
            .lock()
            .unwrap()
            .push((topic.to_owned(), event.clone()));
        self.stores
            .events
            .append(std::slice::from_ref(event))
            .await
            .map_err(HandlerError::from)
    }
}

pub struct Options {
    pub company: Option<&'static str>,
    pub tokens: bool,
    pub anonymous_read: bool,
    pub limits: ApiLimits,
    pub engine: Option<Arc<dyn EngineView>>,
    /// What `GET /agents/{id}/memory` reads; `None`: it answers 503.
    pub memory: Option<crewlet_memory::MemoryStores>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            company: Some(COMPANY),
            tokens: true,
            anonymous_read: true,
            limits: ApiLimits::default(),
            engine: None,
            memory: None,
        }
    }
}

pub struct Harness {
    pub base: String,
    pub http: reqwest::Client,
    pub stores: Stores,
    pub queue: MemoryQueue,
    pub published: Published,
    pub state: ApiState,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

pub async fn import(stores: &Stores, yaml: &str) -> i64 {
    let (company, _) =
        check_company("test", yaml).unwrap_or_else(|p| panic!("bad test company: {p:?}"));
    let active = stores.config.active().await.unwrap().map(|r| r.revision_id);
    stores
        .config
        .create(NewRevision {
            parent_revision_id: active,
            created_by: "test".into(),
            source: "cli-import".into(),
            summary: "test import".into(),
            payload: serde_json::to_value(&company).unwrap(),
            activate: true,
        })
        .await
        .unwrap()
        .revision_id
}

pub fn api_config(tokens: bool, anonymous_read: bool) -> ApiConfig {
    ApiConfig {
        host: "127.0.0.1".into(),
        port: 0,
        auth: ApiAuth {
            tokens: if tokens {
                vec![ApiToken {
                    id: "ops".into(),
                    token: TOKEN.into(),
                    scopes: None,
                }]
            } else {
                vec![]
            },
            // The harness's anonymous reads see content (the loopback
            // knob), as they did before content had its own scope; the
            // metadata-only default is tested in content_scope.rs.
            allow_anonymous_read: Some(if anonymous_read {
                crewlet_config::AnonymousRead::Content
            } else {
                crewlet_config::AnonymousRead::Refused
            }),
            allowed_origins: vec!["https://dash.example.com".into()],
            ..ApiAuth::default()
        },
        ..ApiConfig::default()
    }
}

/// Tier A `security` of the harness: the default, plus `GH_SECRET` (the
/// GitHub webhook secret of [`COMPANY`]) readable by the company.
pub fn security() -> crewlet_config::Security {
    let mut s = crewlet_config::Security::default();
    s.company_env.names.push("GH_SECRET".into());
    s
}

impl Harness {
    pub async fn start() -> Self {
        Self::with(Options::default()).await
    }

    pub async fn with(options: Options) -> Self {
        Self::on_stores(Stores::memory(), options).await
    }

    pub async fn on_stores(stores: Stores, options: Options) -> Self {
        let queue = MemoryQueue::standalone();
        let published = Published::default();
        queue.add_publish_listener(Arc::new(Recorder {
            published: published.clone(),
            stores: stores.clone(),
        }));
        if let Some(yaml) = options.company {
            import(&stores, yaml).await;
        }
        let mut builder = ApiBuilder::new(
            api_config(options.tokens, options.anonymous_read),
            Arc::new(queue.clone()),
            &stores,
        )
        .secret_env(|name| (name == "GH_SECRET").then(|| GITHUB_SECRET.to_owned()))
        .security(security())
        .limits(options.limits);
        if let Some(engine) = options.engine {
            builder = builder.engine(engine);
        }
        if let Some(memory) = options.memory {
            builder = builder.memory(memory);
        }
        let api: Api = builder.build().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let state = api.state().clone();
        let task = tokio::spawn(async move {
            api.serve(listener, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        Self {
            base,
            http: reqwest::Client::new(),
            stores,
            queue,
            published,
            state,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(self.url(path))
    }

    pub fn authed(&self, b: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        b.bearer_auth(TOKEN)
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

type HmacSha256 = Hmac<Sha256>;

pub fn hmac_hex(secret: &str, parts: &[&[u8]]) -> String {
    let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).unwrap();
    for p in parts {
        mac.update(p);
    }
    hex::encode(mac.finalize().into_bytes())
}

pub fn hmac_b64(key: &[u8], parts: &[&[u8]]) -> String {
    let mut mac = HmacSha256::new_from_slice(key).unwrap();
    for p in parts {
        mac.update(p);
    }
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

pub fn github_issue(number: u64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "action": "opened",
        "issue": {"number": number, "title": "Crash on start", "body": "@eng please look",
                  "html_url": "https://github.com/acme/app/issues/1"},
        "repository": {"full_name": "acme/app"},
        "sender": {"login": "octocat", "type": "User"}
    }))
    .unwrap()
}

impl Harness {
    /// Sends a GitHub `issues` delivery signed with `secret` (an HMAC computed
    /// here, independently of the code under test) and returns the response.
    pub async fn post_github(
        &self,
        path: &str,
        delivery: &str,
        body: Vec<u8>,
        secret: &str,
    ) -> reqwest::Response {
        let sig = format!("sha256={}", hmac_hex(secret, &[&body]));
        self.http
            .post(self.url(path))
            .header("content-type", "application/json")
            .header("x-github-event", "issues")
            .header("x-github-delivery", delivery)
            .header("x-hub-signature-256", sig)
            .body(body)
            .send()
            .await
            .unwrap()
    }
}

/// The response body as JSON (panics on a body that is not).
pub async fn json_of(r: reqwest::Response) -> serde_json::Value {
    r.json().await.unwrap()
}
