//! Shared by the engine's end-to-end tests: the fake model's script for one
//! happy turn, company files, signed webhooks, polling.

#![allow(dead_code)]

pub mod sandbox;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crewlet_test_support::e2e::slack_signed;
// Shared with the other end-to-end tests; not every test binary uses each one.
#[allow(unused_imports)]
pub use crewlet_test_support::e2e::{Signed, free_port, get, github_issue, post, temp_dir};
use crewlet_test_support::fake_llm::{Reply, Script, When};
use serde_json::{Value, json};

/// Usage the fake model reports per call of the happy turn.
pub const PLAN_USAGE: (u64, u64) = (100, 20);
pub const CALL_USAGE: (u64, u64) = (200, 30);
pub const AFTER_CALL_USAGE: (u64, u64) = (50, 10);
pub const REVIEW_USAGE: (u64, u64) = (80, 15);
/// Input and output tokens of one happy turn.
pub const TURN_INPUT: u64 = PLAN_USAGE.0 + CALL_USAGE.0 + AFTER_CALL_USAGE.0 + REVIEW_USAGE.0;
pub const TURN_OUTPUT: u64 = PLAN_USAGE.1 + CALL_USAGE.1 + AFTER_CALL_USAGE.1 + REVIEW_USAGE.1;

/// The Slack signing secret of the `eng` seat in the test companies.
pub const SLACK_SECRET: &str = "e2e-slack-signing-secret";
/// The company's GitHub webhook secret in the test companies.
pub const GITHUB_SECRET: &str = "e2e-github-webhook-secret";

/// One turn: plan to call `chat__post_message`, call it, say so, review done.
pub fn happy_turn(channel: &str) -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({
                    "decision": "plan",
                    "reasoning": "answer in the thread",
                    "steps": [{"intent": "post the status", "tools": ["chat__post_message"]}],
                    "tools_needed": ["chat__post_message"],
                    "success_criteria": ["the status is posted"]
                }),
            )
            .usage(PLAN_USAGE.0, PLAN_USAGE.1),
        )
        .on(
            When::tool_offered("chat__post_message").and_after_tool_result(false),
            Reply::tool_call(
                "chat__post_message",
                json!({"channel": channel, "text": "on it: status is green", "thread": "1700000000.000100"}),
            )
            .usage(CALL_USAGE.0, CALL_USAGE.1),
        )
        .on(
            When::tool_offered("chat__post_message").and_after_tool_result(true),
            Reply::text("Posted the status in the thread.").usage(AFTER_CALL_USAGE.0, AFTER_CALL_USAGE.1),
        )
        .on(
            When::tool_offered("submit_review"),
            Reply::tool_call(
                "submit_review",
                json!({"decision": "done", "notes": "posted", "completed_work": "posted the status",
                       "final_artifact": "status posted in the thread"}),
            )
            .usage(REVIEW_USAGE.0, REVIEW_USAGE.1),
        )
}

/// A turn that needs no tools: plan `direct`, answer.
pub fn direct_turn(delay: Duration) -> Script {
    Script::new()
        .on(
            When::tool_offered("submit_plan"),
            Reply::tool_call(
                "submit_plan",
                json!({"decision": "direct", "reasoning": "simple", "steps": [{"intent": "answer"}]}),
            )
            .usage(10, 5)
            .delay(delay),
        )
        .on(When::any(), Reply::text("done").usage(10, 5).delay(delay))
}

pub fn fake_mcp_bin() -> PathBuf {
    crewlet_fake_mcp::binary_path().unwrap_or_else(|e| panic!("fake mcp server: {e}"))
}

/// A company with a CEO and an Engineering unit whose lead `eng` runs the
/// per-role MCP server `chat` (the fake server) as `eng-bot`.
pub fn company_yaml(name: &str, llm_base_url: &str, mcp_log: &Path) -> String {
    format!(
        r#"name: "{name}"
providers:
  llm:
    fake:
      type: openai-compatible
      model: fake-model
      base_url: "{llm_base_url}"
      timeout_seconds: 30
integrations:
  github:
    webhook_secret: "{GITHUB_SECRET}"
mcp_servers:
  - name: chat
    transport: stdio
    shared: false
    command: "{bin}"
    env:
      FAKE_MCP_LOG: "{log}"
    startup_timeout_seconds: 30
    request_timeout_seconds: 30
roles:
  - name: CEO
    handle: ceo
units:
  - name: Engineering
    lead: eng
    integrations:
      github_repositories: [acme/app]
    roles:
      - name: Engineer
        handle: eng
        mcp_env:
          chat:
            FAKE_MCP_IDENTITY: eng-bot
        integrations:
          slack:
            signing_secret: "{SLACK_SECRET}"
            bot_user_id: UENG
"#,
        bin = fake_mcp_bin().display(),
        log = mcp_log.display(),
    )
}

/// A Slack `app_mention` for the `eng` seat, signed now.
pub fn slack_mention(event_id: &str, channel: &str) -> Signed {
    let body = json!({
        "type": "event_callback",
        "event_id": event_id,
        "team_id": "T1",
        "api_app_id": "AENG",
        "event": {
            "type": "app_mention",
            "user": "U42",
            "text": "<@UENG> please post the build status in this thread",
            "channel": channel,
            "ts": "1700000000.000100"
        }
    })
    .to_string()
    .into_bytes();
    slack_signed(SLACK_SECRET, body)
}

/// The Tier A bootstrap of the single-process tests: the embedded API on
/// `port`, and the fake MCP server [`company_yaml`] runs allowed by the
/// `security` block.
pub fn bootstrap(port: u16) -> crewlet_config::Bootstrap {
    let mut bootstrap = crewlet_config::Bootstrap::default();
    bootstrap.api.port = port;
    bootstrap
        .security
        .mcp_commands
        .push(fake_mcp_bin().display().to_string());
    bootstrap
}

/// Polls `check` until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for `GET /ready` to answer 200.
pub async fn wait_ready(base: &str, timeout: Duration) {
    wait_for("/ready 200", timeout, || async {
        (get(base, "/ready").await.0 == 200).then_some(())
    })
    .await;
}

/// The events of a trace, once one of type `until` is among them.
pub async fn trace_until(base: &str, trace_id: &str, until: &str, timeout: Duration) -> Vec<Value> {
    wait_for(&format!("{until} in trace {trace_id}"), timeout, || async {
        let (status, body) = get(base, &format!("/events/trace/{trace_id}")).await;
        let events = body["events"].as_array().cloned().unwrap_or_default();
        (status == 200 && events.iter().any(|e| e["type"] == until)).then_some(events)
    })
    .await
}

pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e["type"].as_str().map(str::to_owned))
        .collect()
}

/// The JSONL lines the fake MCP server wrote.
pub fn mcp_log(path: &Path) -> Vec<Value> {
    crewlet_fake_mcp::read_log(path).unwrap_or_else(|e| panic!("fake mcp log: {e}"))
}

/// The stored events of one type (up to 500, newest first).
pub async fn events_of(
    stores: &crewlet_store::Stores,
    event_type: crewlet_core::EventType,
) -> Vec<crewlet_core::Event> {
    let query = crewlet_store::EventQuery {
        event_type: Some(event_type),
        limit: Some(500),
        ..crewlet_store::EventQuery::default()
    };
    stores
        .events
        .recent(&query)
        .await
        .map(|p| p.events)
        .unwrap_or_default()
}

/// `Some(())` once a task of seat `handle` completed (for [`wait_for`]).
pub async fn completed_by(stores: &crewlet_store::Stores, handle: &str) -> Option<()> {
    events_of(stores, crewlet_core::EventType::TaskCompleted)
        .await
        .iter()
        .any(|e| e.agent_handle() == Some(handle))
        .then_some(())
}

/// An engine environment with the test's `PATH` and nothing else.
pub fn path_only() -> crewlet_engine::EnvLookup {
    std::sync::Arc::new(|name: &str| {
        (name == "PATH").then(|| std::env::var("PATH").unwrap_or_default())
    })
}

/// How many of `events` each task has.
pub fn per_task(events: &[crewlet_core::Event]) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for e in events {
        *out.entry(e.task_id.clone().unwrap_or_default())
            .or_insert(0) += 1;
    }
    out
}

/// `method url` with a bearer token and an optional JSON body: the status
/// and the JSON answer (`null` when it is not JSON).
pub async fn call_api(
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(token)
        .header("x-summary", "test");
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req
        .send()
        .await
        .unwrap_or_else(|e| panic!("request failed: {e}"));
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// `POST /agents/{handle}/tasks {text}`: the task id (asserts 202).
pub async fn post_agent_task(base: &str, token: &str, handle: &str, text: &str) -> String {
    let (status, body) = call_api(
        reqwest::Method::POST,
        format!("{base}/agents/{handle}/tasks"),
        token,
        Some(json!({ "text": text })),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    body["task_id"].as_str().unwrap_or_default().to_owned()
}

/// The stored events of `event_type` through `GET /events` (newest first).
pub async fn api_events(base: &str, event_type: &str) -> Vec<Value> {
    let (_, body) = get(base, &format!("/events?type={event_type}&limit=200")).await;
    body["events"].as_array().cloned().unwrap_or_default()
}

/// Whether an event of `event_type` for `task_id` is stored.
pub async fn task_has(base: &str, event_type: &str, task_id: &str) -> bool {
    api_events(base, event_type)
        .await
        .iter()
        .any(|e| e["task_id"] == task_id)
}

/// `crewlet run` in this process: the embedded API on a free port with one
/// bearer token (every scope), memory queue and stores, no company yet.
pub struct RunningEngine {
    pub base: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), crewlet_engine::EngineError>>,
}

impl RunningEngine {
    /// Starts it and waits for `/health`.
    pub async fn start(token: &str, timeout: Duration) -> Self {
        let port = free_port();
        let mut bootstrap = crewlet_config::Bootstrap::default();
        bootstrap.api.port = port;
        bootstrap.api.auth.tokens = vec![crewlet_config::ApiToken {
            id: "founder".into(),
            token: token.into(),
            scopes: None,
        }];
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(crewlet_engine::run::run_until(
            bootstrap,
            crewlet_engine::RunOptions::default(),
            async move {
                let _ = stopped.await;
            },
        ));
        let base = format!("http://127.0.0.1:{port}");
        wait_for("/health", timeout, || async {
            (get(&base, "/health").await.0 == 200).then_some(())
        })
        .await;
        Self { base, stop, task }
    }

    /// Stops it and asserts it ended cleanly within `timeout`.
    pub async fn stop(self, timeout: Duration) {
        let _ = self.stop.send(());
        let result = tokio::time::timeout(timeout, self.task).await;
        assert!(matches!(result, Ok(Ok(Ok(())))), "{result:?}");
    }
}
