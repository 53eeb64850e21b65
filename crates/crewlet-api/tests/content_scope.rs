//! Content is its own permission, against the real router:
//!
//! - anonymous and `read` callers get every content route with its content
//!   fields left out (`x-crewlet-content: hidden`), the snapshot marked
//!   `content_hidden`, and live frames without content; `read:content`,
//!   `operate` and `admin` tokens (and a token without `scopes`) get them;
//! - every content field is a `SECRET-` marker, so "no content" is checked
//!   as "no marker anywhere in the answer", not field by field;
//! - scopes nest: an `admin`-only token posts tasks;
//! - refusals are 401/403 naming the missing scope;
//! - a listener that is not loopback refuses anonymous reads unless the
//!   bootstrap names the risk, and never serves content anonymously.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::import;
use crewlet_api::{
    AgentState, AgentView, ApiBuilder, ApiError, CurrentTask, EngineView, ToolView,
    prepare_listener,
};
use crewlet_config::{
    AnonymousRead, ApiAuth, ApiConfig, ApiToken, Organization, Scope, check_company,
};
use crewlet_core::payload::{AgentTurnProgress, EventPayload, TaskStarted, TriggerSummary};
use crewlet_core::{AgentId, Event, EventType, TraceContext};
use crewlet_memory::{DiaryKind, MemoryStores, NewDiaryEntry};
use crewlet_queue::{EventQueue, MemoryQueue, topics};
use crewlet_store::Stores;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const READ: &str = "read-token-0123456789";
const CONTENT: &str = "content-token-0123456789";
const OPERATE: &str = "operate-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";
const LEGACY: &str = "legacy-token-0123456789";

/// Every content field of the fixtures holds this.
const MARK: &str = "SECRET-";

const WAIT: Duration = Duration::from_secs(20);

const COMPANY: &str = r#"
name: Test Co
providers:
  llm:
    main:
      type: openai
      model: gpt-test
      api_keys: ["${OPENAI_API_KEY}"]
roles:
  - name: CEO
    handle: ceo
units:
  - name: Engineering
    lead: cto
    roles:
      - name: CTO
        handle: cto
      - name: Engineer
        handle: eng
    schedules:
      - name: weekly
        cron: "0 9 * * 1"
        task: SECRET-schedule-task
        target: lead
"#;

fn tokens() -> Vec<ApiToken> {
    vec![
        ApiToken::new("dash", READ).with_scopes([Scope::Read]),
        ApiToken::new("reader", CONTENT).with_scopes([Scope::ReadContent]),
        ApiToken::new("ops", OPERATE).with_scopes([Scope::Operate]),
        ApiToken::new("founder", ADMIN).with_scopes([Scope::Admin]),
        ApiToken::new("legacy", LEGACY),
    ]
}

/// The engine's view with `eng` working on a task whose text is content.
struct Working(Arc<Organization>);

impl EngineView for Working {
    fn agents(&self) -> Vec<AgentView> {
        self.0
            .seats()
            .iter()
            .map(|s| {
                let mut a = AgentView::from_seat(s);
                if s.handle == "eng" {
                    a.state = Some(AgentState::Working);
                    a.current_task = Some(CurrentTask {
                        task_id: "t-1".into(),
                        summary: "SECRET-current-task".into(),
                        started_at: chrono::Utc::now(),
                        phase: Some("plan".into()),
                        trace_id: None,
                    });
                }
                a
            })
            .collect()
    }

    fn tools(&self, _: Option<&str>) -> Vec<ToolView> {
        Vec::new()
    }

    fn is_ready(&self) -> bool {
        true
    }

    fn is_draining(&self) -> bool {
        false
    }

    fn organization(&self) -> Option<Arc<Organization>> {
        Some(self.0.clone())
    }
}

struct Server {
    base: String,
    http: reqwest::Client,
    stores: Stores,
    queue: MemoryQueue,
    _task: tokio::task::JoinHandle<()>,
}

async fn serve(anonymous: Option<AnonymousRead>) -> Server {
    let stores = Stores::memory();
    import(&stores, COMPANY).await;
    let (_, org) = check_company("test", COMPANY).unwrap_or_else(|p| panic!("{p:?}"));
    let memory = MemoryStores::in_memory();
    memory
        .diary
        .write(
            NewDiaryEntry {
                agent_id: AgentId::for_seat("Test Co", "eng"),
                kind: DiaryKind::Long,
                content: "SECRET-diary-row".into(),
                ttl_until: None,
                embedding: None,
            },
            chrono::Utc::now(),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut config = ApiConfig {
        auth: ApiAuth {
            tokens: tokens(),
            allow_anonymous_read: anonymous,
            ..ApiAuth::default()
        },
        ..ApiConfig::default()
    };
    prepare_listener(&mut config, "127.0.0.1", 0).unwrap_or_else(|e| panic!("{e}"));
    let queue = MemoryQueue::standalone();
    let api = ApiBuilder::new(config, Arc::new(queue.clone()), &stores)
        .secret_env(|name| Some(format!("value-of-{name}")))
        .engine(Arc::new(Working(Arc::new(org))))
        .memory(memory)
        .build()
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let base = format!(
        "http://{}",
        listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    let task = tokio::spawn(async move {
        let _ = api.serve(listener, std::future::pending()).await;
    });
    Server {
        base,
        http: reqwest::Client::new(),
        stores,
        queue,
        _task: task,
    }
}

fn eng(kind: EventType, summary: &str, trace: TraceContext) -> Event {
    Event::new(kind, "test")
        .with_summary(summary)
        .with_agent(AgentId::for_seat("Test Co", "eng"), "Engineer")
        .with_agent_handle("eng")
        .with_task("t-1")
        .with_trace(trace)
}

/// A task's stored events, every content field marked.
fn history(trace: TraceContext, turn: uuid::Uuid) -> Vec<Event> {
    let started = TaskStarted {
        turn_id: turn,
        trigger: TriggerSummary {
            source: "api".into(),
            sender: None,
            channel: None,
            task_id: "t-1".into(),
            delegation_depth: 0,
            summary: "SECRET-trigger".into(),
        },
    };
    vec![
        eng(EventType::TaskCreated, "task for eng: SECRET-task", trace).with_payload(
            json!({"handle": "eng", "content": "SECRET-task", "source": "api", "title": "SECRET-title",
                   "ask": {"ask_id": uuid::Uuid::now_v7(), "asker": "cto", "question": "SECRET-ask", "depth": 1}}),
        ),
        eng(EventType::TaskStarted, "eng started t-1", trace).with_payload(started.to_payload()),
        eng(EventType::AgentPhaseCompleted, "eng plan completed", trace).with_payload(json!({
            "phase": "plan", "model": "gpt-test", "provider": "main", "input_tokens": 5,
            "output_tokens": 3, "duration_ms": 10, "turn_id": turn.to_string(), "iteration": 1,
            "outcome": "ok", "prompt": "SECRET-prompt", "response": "SECRET-response"})),
        eng(EventType::DiaryWritten, "eng remembered: SECRET-preview", trace).with_payload(
            json!({"entry_id": uuid::Uuid::now_v7(), "kind": "diary_long", "writer": "persist_decider",
                   "preview": "SECRET-preview", "chars": 20, "ttl_until": null, "turn_id": turn}),
        ),
        eng(EventType::MessageSent, "SECRET-chat", trace).with_payload(json!({"text": "SECRET-chat"})),
    ]
}

impl Server {
    async fn get(&self, path: &str, token: Option<&str>) -> (u16, Option<String>, String) {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = r.status().as_u16();
        let shown = r
            .headers()
            .get("x-crewlet-content")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        (status, shown, r.text().await.unwrap_or_default())
    }

    async fn publish(&self, e: &Event) {
        self.queue
            .publish(&topics::events(&e.event_type), e)
            .await
            .unwrap_or_else(|err| panic!("{err}"));
    }

    /// Stores and publishes the history; waits until the live projection
    /// shows `eng` working on it.
    async fn seed(&self) -> (TraceContext, Vec<Event>) {
        let trace = TraceContext::new_root();
        let turn = uuid::Uuid::now_v7();
        let events = history(trace, turn);
        self.stores
            .events
            .append(&events)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for e in &events {
            self.publish(e).await;
        }
        let progress = AgentTurnProgress {
            turn_id: turn,
            phase: "execute".into(),
            iteration: 1,
            role: "Engineer".into(),
            response: "SECRET-live".into(),
            tool_executions: vec![],
        };
        let progress = eng(
            EventType::AgentTurnProgress,
            "eng execute in progress",
            trace,
        )
        .with_payload(progress.to_payload());
        self.publish(&progress).await;
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (_, _, body) = self.get("/stream/snapshot", Some(ADMIN)).await;
            if body.contains("SECRET-live") && body.contains("SECRET-trigger") {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the live projection never showed the seeded turn: {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (trace, events)
    }
}

/// Who asks, and whether they may see content.
fn callers() -> [(&'static str, Option<&'static str>, bool); 6] {
    [
        ("anonymous", None, false),
        ("read", Some(READ), false),
        ("read:content", Some(CONTENT), true),
        ("operate", Some(OPERATE), true),
        ("admin", Some(ADMIN), true),
        ("a token without scopes", Some(LEGACY), true),
    ]
}

#[tokio::test]
async fn metadata_callers_get_no_content_on_any_route_and_content_tokens_get_it() {
    let s = serve(None).await;
    let (trace, events) = s.seed().await;
    let phase = &events[2];
    let routes = [
        "/events".to_owned(),
        format!("/events/{}", phase.id),
        format!("/events/{}", events[0].id),
        format!("/events/trace/{}", trace.trace_id),
        "/agents".to_owned(),
        "/agents/eng".to_owned(),
        "/agents/eng/memory".to_owned(),
        "/schedules".to_owned(),
        "/stream/snapshot".to_owned(),
    ];
    for (who, token, content) in callers() {
        for path in &routes {
            let (status, shown, body) = s.get(path, token).await;
            assert_eq!(status, 200, "{who} GET {path}: {body}");
            assert_eq!(
                shown.as_deref(),
                Some(if content { "shown" } else { "hidden" }),
                "{who} GET {path}: the x-crewlet-content header"
            );
            assert_eq!(
                body.contains(MARK),
                content,
                "{who} GET {path}: content {}: {body}",
                if content { "missing" } else { "leaked" }
            );
        }
    }

    // What a metadata reader keeps: the events, their types, ids, figures;
    // content keys are left out, not blanked.
    let (_, _, body) = s.get("/events", Some(READ)).await;
    let page: Value = serde_json::from_str(&body).unwrap_or_default();
    let list = page["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(list.len(), events.len(), "{page}");
    let stored_phase = list
        .iter()
        .find(|e| e["type"] == "agent_phase_completed")
        .cloned()
        .unwrap_or_default();
    assert_eq!(stored_phase["payload"]["input_tokens"], 5);
    assert_eq!(stored_phase["summary"], "eng plan completed");
    for key in ["prompt", "response"] {
        assert!(
            stored_phase["payload"].get(key).is_none(),
            "`{key}` is left out: {stored_phase}"
        );
    }
    let created = list
        .iter()
        .find(|e| e["type"] == "task_created")
        .cloned()
        .unwrap_or_default();
    assert!(created.get("summary").is_none(), "{created}");
    assert_eq!(created["payload"]["ask"]["asker"], "cto");
    assert_eq!(created["payload"]["handle"], "eng");
    let unknown = list
        .iter()
        .find(|e| e["type"] == "message_sent")
        .cloned()
        .unwrap_or_default();
    assert!(unknown.get("payload").is_none() && unknown.get("summary").is_none());

    let (_, _, body) = s.get("/stream/snapshot", None).await;
    let snap: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(snap["content_hidden"], true);
    let seat = snap["seats"]
        .as_array()
        .and_then(|l| l.iter().find(|x| x["handle"] == "eng"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(seat["state"], "working", "{seat}");
    assert_eq!(seat["task"]["task_id"], "t-1", "{seat}");
    assert!(seat["task"].get("summary").is_none() && seat["turn"].get("response").is_none());
    let (_, _, body) = s.get("/stream/snapshot", Some(CONTENT)).await;
    let snap: Value = serde_json::from_str(&body).unwrap_or_default();
    assert!(snap.get("content_hidden").is_none(), "{snap}");

    let (_, _, body) = s.get("/agents/eng/memory", None).await;
    let memory: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(memory["diary"]["total"], 1, "{memory}");
    assert_eq!(memory["diary"]["items"][0]["kind"], "diary_long");
    assert!(memory["diary"]["items"][0].get("content").is_none());
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `/ws/stream`, the token (if any) as the dashboard sends it: a
/// `crewlet.bearer.<hex>` subprotocol beside `crewlet.v1`.
async fn socket(s: &Server, token: Option<&str>) -> Socket {
    let url = format!("{}/ws/stream", s.base.replacen("http", "ws", 1));
    let mut req = url.into_client_request().unwrap_or_else(|e| panic!("{e}"));
    if let Some(t) = token {
        let offered = format!("crewlet.v1, crewlet.bearer.{}", hex::encode(t));
        req.headers_mut().insert(
            "sec-websocket-protocol",
            offered.parse().unwrap_or_else(|e| panic!("{e}")),
        );
    }
    let (socket, response) = tokio_tungstenite::connect_async(req)
        .await
        .unwrap_or_else(|e| panic!("connecting the socket: {e}"));
    if token.is_some() {
        assert_eq!(
            response
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok()),
            Some("crewlet.v1"),
            "the server selects crewlet.v1 and never echoes the token"
        );
    }
    socket
}

/// Frames (as text) until one carries event `id` (`None`: the first
/// frame); heartbeats skipped.
async fn frames_until(socket: &mut Socket, id: Option<uuid::Uuid>) -> Vec<String> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let msg = tokio::time::timeout_at(deadline, socket.next())
            .await
            .unwrap_or_else(|_| panic!("no frame within {WAIT:?}; got {out:?}"))
            .unwrap_or_else(|| panic!("the socket closed; got {out:?}"))
            .unwrap_or_else(|e| panic!("{e}"));
        if let Message::Text(t) = msg {
            let text = t.as_str().to_owned();
            let v: Value = serde_json::from_str(&text).unwrap_or_default();
            if v["kind"] == "heartbeat" {
                continue;
            }
            let done = match id {
                Some(id) => v["kind"] == "event" && v["data"]["id"] == id.to_string(),
                None => true,
            };
            out.push(text);
            if done {
                return out;
            }
        }
    }
}

#[tokio::test]
async fn the_live_stream_carries_content_only_to_content_tokens() {
    let s = serve(None).await;
    let (trace, _) = s.seed().await;
    let mut anonymous = socket(&s, None).await;
    let mut reader = socket(&s, Some(READ)).await;
    let mut founder = socket(&s, Some(ADMIN)).await;
    let turn = uuid::Uuid::now_v7();
    let phase = eng(
        EventType::AgentPhaseCompleted,
        "eng execute completed",
        trace,
    )
    .with_payload(
        json!({"phase": "execute", "turn_id": turn.to_string(), "iteration": 1, "outcome": "ok",
               "input_tokens": 7, "output_tokens": 2, "prompt": "SECRET-live-prompt",
               "response": "SECRET-live-response"}),
    );
    s.publish(&phase).await;
    for (who, sock) in [("anonymous", &mut anonymous), ("read", &mut reader)] {
        let frames = frames_until(sock, Some(phase.id)).await;
        let snapshot: Value = serde_json::from_str(&frames[0]).unwrap_or_default();
        assert_eq!(snapshot["kind"], "snapshot");
        assert_eq!(snapshot["data"]["content_hidden"], true, "{who}");
        for f in &frames {
            assert!(!f.contains(MARK), "{who}: a frame leaked content: {f}");
        }
        let last: Value =
            serde_json::from_str(frames.last().map_or("", String::as_str)).unwrap_or_default();
        assert_eq!(last["data"]["payload"]["input_tokens"], 7, "{who}: {last}");
    }
    let frames = frames_until(&mut founder, Some(phase.id)).await;
    let all = frames.join("\n");
    for secret in [
        "SECRET-live",
        "SECRET-trigger",
        "SECRET-live-prompt",
        "SECRET-live-response",
    ] {
        assert!(
            all.contains(secret),
            "the admin socket shows {secret}: {all}"
        );
    }

    // The URL form still works for clients that can send neither.
    let url = format!(
        "{}/ws/stream?token={CONTENT}",
        s.base.replacen("http", "ws", 1)
    );
    let (mut by_url, _) = tokio_tungstenite::connect_async(url)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let first = frames_until(&mut by_url, None).await;
    assert!(first[0].contains("SECRET-trigger"), "{}", first[0]);
}

#[tokio::test]
async fn scopes_nest_and_refusals_name_the_missing_scope() {
    let s = serve(Some(AnonymousRead::Refused)).await;
    let post = |token: Option<&'static str>| {
        let mut req = s
            .http
            .post(format!("{}/agents/eng/tasks", s.base))
            .json(&json!({"text": "do the thing"}));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move {
            let r = req.send().await.unwrap_or_else(|e| panic!("{e}"));
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    // `admin` includes `operate`.
    for token in [ADMIN, OPERATE, LEGACY] {
        let (status, body) = post(Some(token)).await;
        assert_eq!(status, 202, "{body}");
    }
    for token in [READ, CONTENT] {
        let (status, body) = post(Some(token)).await;
        assert_eq!(status, 403, "{body}");
        assert!(
            body["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("`operate` scope"),
            "{body}"
        );
    }
    let (status, body) = post(None).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("`operate` scope"),
        "{body}"
    );
    // Reads closed to anonymous callers: 401 naming `read`.
    for path in ["/events", "/stream/snapshot", "/agents/eng/memory"] {
        let (status, _, body) = s.get(path, None).await;
        assert_eq!(status, 401, "{path}: {body}");
        assert!(body.contains("`read` scope"), "{path}: {body}");
    }
    // `/config` with a token that reads content but is not `admin`: 403 naming it.
    let (status, _, body) = s.get("/config", Some(OPERATE)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("`admin` scope"), "{body}");
    let (status, _, _) = s.get("/config", Some(ADMIN)).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn anonymous_content_on_loopback_is_an_explicit_choice() {
    let s = serve(Some(AnonymousRead::Content)).await;
    s.seed().await;
    let (status, shown, body) = s.get("/events", None).await;
    assert_eq!((status, shown.as_deref()), (200, Some("shown")));
    assert!(body.contains("SECRET-prompt"), "{body}");
}

fn config(anonymous: Option<AnonymousRead>) -> ApiConfig {
    ApiConfig {
        auth: ApiAuth {
            allow_anonymous_read: anonymous,
            ..ApiAuth::default()
        },
        ..ApiConfig::default()
    }
}

#[tokio::test]
async fn a_public_listener_refuses_anonymous_reads_unless_the_bootstrap_names_the_risk() {
    // `true` on 0.0.0.0 (a bootstrap host or a `--host`): refused to start.
    for host in ["0.0.0.0", "::", "10.1.2.3", "dash.example.com"] {
        let mut c = config(Some(AnonymousRead::Loopback));
        match prepare_listener(&mut c, host, 8000) {
            Err(ApiError::Refused(reason)) => {
                assert!(reason.contains("anyone_on_the_network"), "{reason}")
            }
            other => panic!("{host}: {other:?}"),
        }
        // Content to anonymous readers off loopback: never.
        let mut c = config(Some(AnonymousRead::Content));
        assert!(
            matches!(prepare_listener(&mut c, host, 8000), Err(ApiError::Refused(r)) if r.contains("read:content")),
            "{host}"
        );
        // The explicit opt-in, and `false`, start.
        for ok in [AnonymousRead::AnyoneOnTheNetwork, AnonymousRead::Refused] {
            let mut c = config(Some(ok));
            prepare_listener(&mut c, host, 8000).unwrap_or_else(|e| panic!("{host} {ok:?}: {e}"));
            assert_eq!(c.host, host);
            assert!(c.auth.tokens.is_empty(), "no local token off loopback");
        }
    }

    // Unset on a public bind: it starts, and anonymous reads are off there.
    let stores = Stores::memory();
    let mut c = config(None);
    c.auth.tokens = tokens();
    prepare_listener(&mut c, "0.0.0.0", 8000).unwrap_or_else(|e| panic!("{e}"));
    let api = ApiBuilder::new(c, Arc::new(MemoryQueue::standalone()), &stores)
        .build()
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let base = format!(
        "http://{}",
        listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    tokio::spawn(async move {
        let _ = api.serve(listener, std::future::pending()).await;
    });
    let http = reqwest::Client::new();
    let r = http
        .get(format!("{base}/events"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status().as_u16(), 401);
    let r = http
        .get(format!("{base}/events"))
        .bearer_auth(READ)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status().as_u16(), 200);

    // On loopback with nothing set: metadata for anonymous callers.
    let mut c = config(None);
    c.auth.tokens = tokens();
    prepare_listener(&mut c, "127.0.0.1", 8000).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.auth.anonymous_access("127.0.0.1"),
        Ok(crewlet_config::AnonymousAccess::Metadata)
    );
}
