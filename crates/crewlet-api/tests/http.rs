//! Probes, auth, reads, events paging and the config routes over real HTTP.

mod common;

use common::json_of;

use chrono::{Duration as ChronoDuration, SubsecRound, Utc};
use common::*;
use crewlet_core::{Event, EventType, TraceContext};

#[tokio::test]
async fn health_is_200_and_ready_is_503_until_a_company_is_active() {
    let h = Harness::with(Options {
        company: None,
        ..Options::default()
    })
    .await;
    let r = h.get("/health").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(json_of(r).await["status"], "ok");
    let r = h.get("/ready").send().await.unwrap();
    assert_eq!(r.status(), 503);
    let body = json_of(r).await;
    assert_eq!(body["ready"], false);
    assert!(body["revision_id"].is_null());
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("no company revision")
    );

    let id = import(&h.stores, COMPANY).await;
    let r = h.get("/ready").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body = json_of(r).await;
    assert_eq!(body["ready"], true);
    assert_eq!(body["revision_id"], id);
    assert_eq!(body["embedded"], false);

    h.state.set_draining();
    let r = h.get("/ready").send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(json_of(r).await["draining"], true);
    assert_eq!(h.get("/health").send().await.unwrap().status(), 200);
    h.stop().await;
}

#[tokio::test]
async fn reads_are_open_by_default_but_a_wrong_token_is_refused() {
    let h = Harness::start().await;
    assert_eq!(h.get("/agents").send().await.unwrap().status(), 200);
    assert_eq!(
        h.authed(h.get("/agents")).send().await.unwrap().status(),
        200
    );
    let r = h.get("/agents").bearer_auth("wrong").send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert_eq!(json_of(r).await["error"], "unauthorized");
    let r = h
        .get("/agents")
        .header("authorization", "Basic abc")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    h.stop().await;
}

#[tokio::test]
async fn anonymous_reads_can_be_turned_off() {
    let h = Harness::with(Options {
        anonymous_read: false,
        ..Options::default()
    })
    .await;
    for path in [
        "/agents",
        "/org",
        "/events",
        "/budgets",
        "/tools",
        "/tokens/breakdown",
    ] {
        assert_eq!(h.get(path).send().await.unwrap().status(), 401, "{path}");
        assert_eq!(
            h.authed(h.get(path)).send().await.unwrap().status(),
            200,
            "{path}"
        );
    }
    // Probes stay open.
    assert_eq!(h.get("/health").send().await.unwrap().status(), 200);
    assert_eq!(h.get("/ready").send().await.unwrap().status(), 200);
    h.stop().await;
}

#[tokio::test]
async fn config_always_needs_a_token() {
    let h = Harness::start().await;
    assert_eq!(h.get("/config").send().await.unwrap().status(), 401);
    assert_eq!(
        h.get("/config")
            .bearer_auth("nope")
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        h.get("/config/revisions").send().await.unwrap().status(),
        401
    );
    let r = h
        .http
        .put(h.url("/config"))
        .body("name: X")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = h
        .http
        .post(h.url("/config/revisions/1/activate"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        h.authed(h.get("/config")).send().await.unwrap().status(),
        200
    );
    h.stop().await;
}

#[tokio::test]
async fn without_configured_tokens_config_is_refused_with_the_fix() {
    let h = Harness::with(Options {
        tokens: false,
        ..Options::default()
    })
    .await;
    let r = h.get("/config").send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(
        json_of(r).await["reason"]
            .as_str()
            .unwrap()
            .contains("api.auth.tokens")
    );
    h.stop().await;
}

#[tokio::test]
async fn agents_org_and_tools_from_the_active_revision() {
    let h = Harness::start().await;
    let body = json_of(h.get("/agents").send().await.unwrap()).await;
    let agents = body.as_array().unwrap();
    let handles: Vec<&str> = agents
        .iter()
        .map(|a| a["handle"].as_str().unwrap())
        .collect();
    assert_eq!(handles, ["ceo", "cto", "eng"]);
    assert!(agents[0]["state"].is_null());
    let eng = &agents[2];
    assert_eq!(eng["manager"], "cto");
    // The original engine's fields.
    assert_eq!(eng["name"], "Engineer");
    assert_eq!(eng["role"], "Engineer");
    assert_eq!(eng["goal"], "");
    assert_eq!(eng["token_budget"], 0);
    assert_eq!(eng["placement"], serde_json::json!({}));
    let id = eng["id"].as_str().unwrap();
    let by_id = json_of(h.get(&format!("/agents/{id}")).send().await.unwrap()).await;
    assert_eq!(by_id["handle"], "eng");
    let by_handle = json_of(h.get("/agents/eng").send().await.unwrap()).await;
    assert_eq!(by_handle["id"], id);
    let r = h.get("/agents/nobody").send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(json_of(r).await["error"], "Agent not found");

    let org = json_of(h.get("/org").send().await.unwrap()).await;
    assert_eq!(org["company"], "Test Co");
    assert_eq!(org["roles"], serde_json::json!(["ceo"]));
    assert_eq!(org["units"][0]["name"], "Engineering");
    assert_eq!(org["units"][0]["lead"], "cto");
    assert_eq!(org["seats"].as_array().unwrap().len(), 3);

    let tools = json_of(h.get("/tools?handle=eng").send().await.unwrap()).await;
    assert_eq!(tools["live"], false);
    assert_eq!(tools["tools"], serde_json::json!([]));
    assert_eq!(
        h.get("/tools?handle=ghost").send().await.unwrap().status(),
        404
    );
    h.stop().await;
}

#[tokio::test]
async fn reads_before_any_company() {
    let h = Harness::with(Options {
        company: None,
        ..Options::default()
    })
    .await;
    // As the original: no seats yet is an empty list, one seat is not found.
    let r = h.get("/agents").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(json_of(r).await, serde_json::json!([]));
    assert_eq!(h.get("/agents/eng").send().await.unwrap().status(), 404);
    // The org chart still waits for one.
    let r = h.get("/org").send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "15");
    h.stop().await;
}

#[tokio::test]
async fn events_are_keyset_paged_and_filtered() {
    let h = Harness::start().await;
    let base = (Utc::now() - ChronoDuration::minutes(10)).trunc_subsecs(0);
    let mut events = Vec::new();
    for i in 0..7 {
        let mut e = Event::new(EventType::TaskStarted, "test").with_task(format!("t-{}", i % 2));
        e.timestamp = base + ChronoDuration::seconds(i);
        events.push(e);
    }
    events.push(Event::new(EventType::RawWebhook, "test"));
    h.stores.events.append(&events).await.unwrap();

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut url = "/events?type=task_started&limit=3".to_owned();
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let page = json_of(h.get(&url).send().await.unwrap()).await;
        pages += 1;
        for e in page["events"].as_array().unwrap() {
            assert_eq!(e["type"], "task_started");
            seen.push(e["id"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
        assert!(pages < 10);
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = events[..7].iter().rev().map(|e| e.id.to_string()).collect();
    assert_eq!(seen, expected, "newest first, no gaps or repeats");

    let page = json_of(h.get("/events?task_id=t-1").send().await.unwrap()).await;
    assert_eq!(page["events"].as_array().unwrap().len(), 3);
    let page = json_of(h.get("/events?category=webhook").send().await.unwrap()).await;
    assert_eq!(page["events"].as_array().unwrap().len(), 1);
    let since = (base + ChronoDuration::seconds(5)).to_rfc3339();
    let url = format!("/events?type=task_started&since={}", urlencode(&since));
    let page = json_of(h.get(&url).send().await.unwrap()).await;
    assert_eq!(page["events"].as_array().unwrap().len(), 2);

    let one = json_of(
        h.get(&format!("/events/{}", events[0].id))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(one["id"], events[0].id.to_string());
    assert_eq!(
        h.get("/events/not-a-uuid").send().await.unwrap().status(),
        400
    );
    let missing = uuid::Uuid::now_v7();
    assert_eq!(
        h.get(&format!("/events/{missing}"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        h.get("/events?since=yesterday")
            .send()
            .await
            .unwrap()
            .status(),
        400
    );
    assert_eq!(
        h.get("/events?cursor=garbage")
            .send()
            .await
            .unwrap()
            .status(),
        400
    );
    assert_eq!(
        h.get("/events?limit=many").send().await.unwrap().status(),
        400
    );
    h.stop().await;
}

fn urlencode(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}

#[tokio::test]
async fn trace_query_returns_the_trace_in_order() {
    let h = Harness::start().await;
    let root = TraceContext::new_root();
    let a = Event::new(EventType::RawWebhook, "api").with_trace(root);
    let mut b = Event::new(EventType::TaskStarted, "engine").with_trace(root.child());
    b.timestamp = a.timestamp + ChronoDuration::milliseconds(5);
    let other = Event::new(EventType::TaskStarted, "engine").with_trace(TraceContext::new_root());
    h.stores
        .events
        .append(&[b.clone(), other, a.clone()])
        .await
        .unwrap();
    let body = json_of(
        h.get(&format!("/events/trace/{}", root.trace_id))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let ids: Vec<&str> = body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [a.id.to_string(), b.id.to_string()]);
    assert_eq!(
        h.get("/events/trace/xyz").send().await.unwrap().status(),
        400
    );
    h.stop().await;
}

#[tokio::test]
async fn unknown_routes_answer_json_404_and_cors_allows_the_configured_origin() {
    let h = Harness::start().await;
    let r = h.get("/nope").send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(json_of(r).await["error"], "not_found");
    let r = h
        .http
        .request(reqwest::Method::OPTIONS, h.url("/agents"))
        .header("origin", "https://dash.example.com")
        .header("access-control-request-method", "GET")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["access-control-allow-origin"],
        "https://dash.example.com"
    );
    let r = h
        .get("/agents")
        .header("origin", "https://evil.example.com")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("access-control-allow-origin").is_none());
    h.stop().await;
}

#[tokio::test]
async fn binding_a_taken_port_names_the_port_and_the_likely_holder() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = taken.local_addr().unwrap().port();
    let err = crewlet_api::bind("127.0.0.1", port)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains(&port.to_string()), "{err}");
    assert!(err.contains("crewlet run"), "{err}");
    assert!(err.contains("crewlet run api"), "{err}");
}

/// A running engine as the API sees it.
struct FakeEngine {
    org: std::sync::Arc<crewlet_config::Organization>,
    ready: std::sync::atomic::AtomicBool,
    draining: std::sync::atomic::AtomicBool,
    activated: std::sync::Mutex<Vec<i64>>,
}

impl crewlet_api::EngineView for FakeEngine {
    fn agents(&self) -> Vec<crewlet_api::AgentView> {
        self.org
            .seats()
            .iter()
            .map(|s| {
                let mut a = crewlet_api::AgentView::from_seat(s);
                if s.handle == "eng" {
                    a.state = Some(crewlet_api::AgentState::Working);
                    a.current_task = Some(crewlet_api::CurrentTask {
                        task_id: "task-1".into(),
                        summary: "fix the crash".into(),
                        started_at: Utc::now(),
                        phase: Some("execute".into()),
                        trace_id: None,
                    });
                } else {
                    a.state = Some(crewlet_api::AgentState::Idle);
                }
                a
            })
            .collect()
    }

    fn tools(&self, handle: Option<&str>) -> Vec<crewlet_api::ToolView> {
        vec![crewlet_api::ToolView {
            name: format!(
                "lookup_colleague{}",
                handle.map(|h| format!("_{h}")).unwrap_or_default()
            ),
            description: "find a colleague".into(),
            provider: "builtin".into(),
            annotations: crewlet_api::ToolAnnotations {
                read_only: true,
                ..Default::default()
            },
            input_schema: serde_json::json!({"type": "object"}),
        }]
    }

    fn is_ready(&self) -> bool {
        self.ready.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn is_draining(&self) -> bool {
        self.draining.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn organization(&self) -> Option<std::sync::Arc<crewlet_config::Organization>> {
        Some(self.org.clone())
    }

    fn revision_id(&self) -> Option<i64> {
        Some(1)
    }

    fn config_activated(&self, revision_id: i64) {
        self.activated.lock().unwrap().push(revision_id);
    }
}

#[tokio::test]
async fn embedded_in_the_engine_reads_live_state_through_engine_view() {
    use std::sync::atomic::Ordering;
    let (_, org) = crewlet_config::check_company("test", COMPANY).unwrap();
    let engine = std::sync::Arc::new(FakeEngine {
        org: std::sync::Arc::new(org),
        ready: false.into(),
        draining: false.into(),
        activated: Default::default(),
    });
    let h = Harness::with(Options {
        engine: Some(engine.clone()),
        ..Options::default()
    })
    .await;
    let r = h.get("/ready").send().await.unwrap();
    assert_eq!(r.status(), 503, "the engine is not ready yet");
    assert_eq!(json_of(r).await["embedded"], true);
    engine.ready.store(true, Ordering::SeqCst);
    let ready = json_of(h.get("/ready").send().await.unwrap()).await;
    assert_eq!(ready["ready"], true);
    assert_eq!(ready["engine_revision_id"], 1);

    let agents = json_of(h.get("/agents").send().await.unwrap()).await;
    assert_eq!(agents.as_array().map(Vec::len), Some(3));
    let eng = json_of(h.get("/agents/eng").send().await.unwrap()).await;
    assert_eq!(eng["state"], "working");
    assert_eq!(eng["current_task"]["task_id"], "task-1");
    let ceo = json_of(h.get("/agents/ceo").send().await.unwrap()).await;
    assert_eq!(ceo["state"], "idle");
    let tools = json_of(h.get("/tools?handle=eng").send().await.unwrap()).await;
    assert_eq!(tools["live"], true);
    assert_eq!(tools["tools"][0]["name"], "lookup_colleague_eng");
    assert_eq!(tools["tools"][0]["annotations"]["read_only"], true);

    let r = h
        .authed(h.http.put(h.url("/config")))
        .header("x-summary", "rename")
        .body(COMPANY.replace("Test Co", "Live Co"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(*engine.activated.lock().unwrap(), [2]);

    engine.draining.store(true, Ordering::SeqCst);
    let r = h.get("/ready").send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(json_of(r).await["draining"], true);
    h.stop().await;
}

#[tokio::test]
async fn wrong_method_is_a_json_405() {
    let h = Harness::start().await;
    let r = h.http.delete(h.url("/config")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(json_of(r).await["error"], "method_not_allowed");
    h.stop().await;
}

/// Revisions whose writes always lose a race with another writer.
struct RacingRevisions(crewlet_store::MemoryConfigRevisions);

#[async_trait::async_trait]
impl crewlet_store::ConfigRevisions for RacingRevisions {
    async fn create(
        &self,
        _new: crewlet_store::NewRevision,
    ) -> Result<crewlet_store::ConfigRevision, crewlet_store::StoreError> {
        Err(crewlet_store::StoreError::Conflict {
            what: "company config revision".into(),
            reason: "the parent revision is 1 but the active revision is 2; reload and retry"
                .into(),
        })
    }
    async fn active(
        &self,
    ) -> Result<Option<crewlet_store::ConfigRevision>, crewlet_store::StoreError> {
        self.0.active().await
    }
    async fn active_key(
        &self,
    ) -> Result<Option<crewlet_store::ActiveKey>, crewlet_store::StoreError> {
        self.0.active_key().await
    }
    async fn get(
        &self,
        id: i64,
    ) -> Result<Option<crewlet_store::ConfigRevision>, crewlet_store::StoreError> {
        self.0.get(id).await
    }
    async fn get_by_uuid(
        &self,
        id: uuid::Uuid,
    ) -> Result<Option<crewlet_store::ConfigRevision>, crewlet_store::StoreError> {
        self.0.get_by_uuid(id).await
    }
    async fn list(
        &self,
        limit: u32,
    ) -> Result<Vec<crewlet_store::ConfigRevision>, crewlet_store::StoreError> {
        self.0.list(limit).await
    }
    async fn list_page(
        &self,
        limit: u32,
        offset: u64,
    ) -> Result<Vec<crewlet_store::ConfigRevision>, crewlet_store::StoreError> {
        self.0.list_page(limit, offset).await
    }
    async fn activate(
        &self,
        id: i64,
    ) -> Result<crewlet_store::ConfigRevision, crewlet_store::StoreError> {
        self.0.activate(id).await
    }
    async fn revert(
        &self,
        id: i64,
        by: &str,
        summary: &str,
        source: &str,
    ) -> Result<crewlet_store::ConfigRevision, crewlet_store::StoreError> {
        self.0.revert(id, by, summary, source).await
    }
}

#[tokio::test]
async fn a_write_that_loses_a_race_in_the_store_is_409() {
    let stores = crewlet_store::Stores::memory();
    let mut api_stores = crewlet_api::ApiStores::from(&stores);
    api_stores.config =
        std::sync::Arc::new(RacingRevisions(crewlet_store::MemoryConfigRevisions::new()));
    let queue = std::sync::Arc::new(crewlet_queue::MemoryQueue::standalone());
    let api = crewlet_api::ApiBuilder::new(api_config(true, true), queue, api_stores)
        .security(security())
        .build()
        .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        let _ = api.serve(listener, std::future::pending()).await;
    });
    let r = reqwest::Client::new()
        .put(format!("{base}/config"))
        .bearer_auth(TOKEN)
        .header("x-summary", "first")
        .body(COMPANY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    let body = json_of(r).await;
    // The original's body for a write that lost the race: nothing is
    // active in this store, and no If-Match was sent.
    assert_eq!(body["error"], "revision_advanced");
    assert!(body["current_revision_id"].is_null(), "{body}");
    assert!(body["your_base"].is_null(), "{body}");
    server.abort();
}

#[tokio::test]
async fn the_dashboard_is_served_from_the_binary() {
    let h = Harness::start().await;
    let r = h.get("/dashboard").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let csp = r.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    let etag = r.headers()["etag"].clone();
    assert!(r.text().await.unwrap().contains("/dashboard/assets/app.js"));
    let r = h
        .get("/dashboard")
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);
    let r = h
        .get("/dashboard/assets/app.js")
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-encoding"], "gzip");
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    let r = h.get("/dashboard/assets/nope.js").send().await.unwrap();
    assert_eq!(r.status(), 404);
    let r = h.get("/dashboard/assets/..%2Fsecret").send().await.unwrap();
    assert_eq!(r.status(), 404);
    h.stop().await;
}
